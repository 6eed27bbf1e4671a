"""A stand-in flight controller: pymavlink's own MAVLink encoder sending HEARTBEAT, SYS_STATUS and BATTERY_STATUS
(MAVLink 2, or 1 where asked) to a loopback UDP port, a TCP connection or a pty, as an autopilot does."""

from __future__ import annotations

import os
import socket
from typing import Any

from pymavlink.dialects.v20 import common

UNKNOWN_VOLTAGE = 65535
UNKNOWN_TEMPERATURE = 32767


def free_udp_port() -> int:
    """A UDP port on 127.0.0.1 nobody holds right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class FlightController:
    """Packs MAVLink messages from system 1, component 1 (the autopilot) and hands each packet to ``write``."""

    def __init__(self, write: Any, system: int = 1, component: int = 1) -> None:
        self.write = write
        self.mav = common.MAVLink(self, srcSystem=system, srcComponent=component)

    def packet(self, message: Any, mavlink1: bool = False) -> bytes:
        return bytes(message.pack(self.mav, force_mavlink1=mavlink1))

    def heartbeat(self, autopilot: int = common.MAV_AUTOPILOT_ARDUPILOTMEGA) -> bytes:
        return self.packet(self.mav.heartbeat_encode(common.MAV_TYPE_QUADROTOR, autopilot, 0, 0,
                                                     common.MAV_STATE_ACTIVE))

    def battery_status(self, percent: int, battery: int = 0) -> bytes:
        return self.packet(self.mav.battery_status_encode(
            battery, common.MAV_BATTERY_FUNCTION_ALL, common.MAV_BATTERY_TYPE_LIPO, UNKNOWN_TEMPERATURE,
            [UNKNOWN_VOLTAGE] * 10, -1, -1, -1, percent))

    def sys_status(self, percent: int, mavlink1: bool = False) -> bytes:
        return self.packet(self.mav.sys_status_encode(0, 0, 0, 500, 11_100, -1, percent, 0, 0, 0, 0, 0, 0),
                           mavlink1)

    def send(self, *packets: bytes) -> None:
        for packet in packets:
            self.write(packet)


def udp_flight_controller(port: int) -> tuple[FlightController, socket.socket]:
    """A flight controller sending one datagram per packet to 127.0.0.1:``port`` (close the socket after)."""
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    return FlightController(lambda data: sender.sendto(data, ("127.0.0.1", port))), sender


def pty_flight_controller() -> tuple[FlightController, int, int, str]:
    """A flight controller on a pseudo-terminal: it writes to the master side; the device path of the other
    side is what sbrs opens as a serial port. Returns (controller, master, slave descriptors, device path):
    close both after; write only once sbrs has opened the device (it puts the line in raw mode)."""
    master, slave = os.openpty()
    return FlightController(lambda data: os.write(master, data)), master, slave, os.ttyname(slave)
