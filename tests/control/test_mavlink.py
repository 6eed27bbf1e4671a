"""A flight controller's battery over MAVLink (``MavlinkBattery``): a stand-in autopilot made of pymavlink's own
encoder sends on loopback UDP (127.0.0.1 only), a TCP connection and a pseudo-terminal (a serial port without the
hardware). Levels are read, garbage is counted once per datagram and never spoils the next one, links that break
answer ``SensorFailure`` and open again."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from sbrs.app.environment import parse_env_source
from sbrs.cli import main
from sbrs.control.mavlink import MavlinkBattery
from sbrs.control.readings import Batch, SensorFailure
from sbrs.errors import InputError
from tests.conftest import REPO, assert_one_line_error
from tests.control.mavlink_sender import (
    FlightController,
    free_tcp_port,
    free_udp_port,
    pty_flight_controller,
    udp_flight_controller,
)


def read_until(sensor: MavlinkBattery, done: object, timeout: float = 5.0) -> Batch:
    """Read ``sensor`` until ``done(batch)`` holds for what came so far (loopback delivery is not instant)."""
    total = Batch()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = sensor.read()
        total.values += batch.values
        total.malformed += batch.malformed
        total.why = total.why or batch.why
        total.heard = total.heard or batch.heard
        if done(total):  # type: ignore[operator]
            return total
        time.sleep(0.005)
    return total


@pytest.fixture
def udp() -> tuple[MavlinkBattery, FlightController]:
    port = free_udp_port()
    sensor = MavlinkBattery(parse_env_source(f"mavlink:udpin:127.0.0.1:{port}"))
    autopilot, sender = udp_flight_controller(port)
    yield sensor, autopilot
    sender.close()
    sensor.close()


def test_levels_from_battery_status_and_sys_status(udp: tuple[MavlinkBattery, FlightController]) -> None:
    sensor, autopilot = udp
    assert sensor.fileno() is not None and not sensor.polled
    autopilot.send(autopilot.heartbeat(), autopilot.battery_status(87), autopilot.sys_status(86, mavlink1=True))
    batch = read_until(sensor, lambda b: len(b.values) == 2)
    assert batch.values == [0.87, 0.86] and batch.heard and batch.malformed == 0


def test_what_is_no_level_is_ignored(udp: tuple[MavlinkBattery, FlightController]) -> None:
    sensor, autopilot = udp
    ground_station = FlightController(autopilot.write, system=255, component=190)
    autopilot.send(ground_station.heartbeat(autopilot=8))  # MAV_AUTOPILOT_INVALID: not the flight controller
    autopilot.send(autopilot.battery_status(40, battery=1))  # a second battery
    unknown = bytearray(autopilot.heartbeat())
    unknown[7:10] = (250, 250, 0)  # a message id this dialect does not know (an autopilot's own): not garbage
    autopilot.send(bytes(unknown))
    autopilot.send(autopilot.battery_status(-1))  # "unknown": the flight controller is there, the level is not
    batch = read_until(sensor, lambda b: b.heard)
    time.sleep(0.05)
    batch.values += sensor.read().values
    assert batch.values == [] and batch.malformed == 0 and batch.heard


def test_one_flight_controller_is_followed(udp: tuple[MavlinkBattery, FlightController],
                                          caplog: pytest.LogCaptureFixture) -> None:
    """Two systems on one link (a second vehicle through the router): the level flipped between theirs at every
    message, and the policy's scenario with it. The first system heard with a level is followed."""
    sensor, autopilot = udp
    other = FlightController(autopilot.write, system=7)
    autopilot.send(other.sys_status(-1))  # "unknown" claims nothing: system 1 may still be the one followed
    autopilot.send(autopilot.heartbeat(), autopilot.sys_status(80))
    for _ in range(3):
        autopilot.send(other.heartbeat(), other.sys_status(10), other.battery_status(11), autopilot.sys_status(79))
    batch = read_until(sensor, lambda b: len(b.values) == 4)
    time.sleep(0.05)
    batch.values += sensor.read().values
    assert batch.values == [0.80, 0.79, 0.79, 0.79] and batch.malformed == 0 and batch.heard
    ignored = [record.getMessage() for record in caplog.records if "system 7" in record.getMessage()]
    assert len(ignored) == 1 and "following the flight controller of system 1" in ignored[0]


def test_a_garbage_datagram_counts_once_and_spoils_nothing(udp: tuple[MavlinkBattery, FlightController]) -> None:
    sensor, autopilot = udp
    valid = autopilot.battery_status(55)
    corrupt = bytearray(autopilot.battery_status(54))
    corrupt[-1] ^= 0xFF  # a bad checksum
    autopilot.send(b"\x00garbage \xfd\xfe\x03 not mavlink \xfd", valid, bytes(corrupt), valid[:11], valid,
                   autopilot.battery_status(120))
    batch = read_until(sensor, lambda b: b.malformed >= 4 and len(b.values) >= 2)
    assert batch.values == [0.55, 0.55] and batch.malformed == 4, batch
    assert "not MAVLink" in str(batch.why)


def test_a_port_in_use_is_one_line() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        with pytest.raises(InputError, match=f"cannot listen on 127.0.0.1:{port}"):
            MavlinkBattery(parse_env_source(f"mavlink:udpin:127.0.0.1:{port}"))


def test_a_serial_port_reads_a_byte_stream() -> None:
    autopilot, master, slave, path = pty_flight_controller()
    sensor = MavlinkBattery(parse_env_source(f"mavlink:{path}:115200"))
    try:
        stream = autopilot.heartbeat() + autopilot.sys_status(64) + b"\x13\x37noise" + autopilot.battery_status(63)
        autopilot.send(stream[:17], stream[17:])  # packets cut anywhere, as a serial line delivers them
        batch = read_until(sensor, lambda b: len(b.values) == 2)
        assert batch.values == [0.64, 0.63] and batch.malformed == 1 and batch.heard
        os.close(master)
        os.close(slave)
        master = slave = -1
        with pytest.raises(SensorFailure):
            read_until(sensor, lambda b: False, timeout=1.0)
        assert sensor.fileno() is None
        with pytest.raises(SensorFailure, match="cannot open"):
            sensor.reopen()
    finally:
        sensor.close()
        for descriptor in (master, slave):
            if descriptor >= 0:
                os.close(descriptor)


def test_a_missing_serial_device_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"cannot open .*ttyACM9"):
        MavlinkBattery(parse_env_source(f"mavlink:{tmp_path}/ttyACM9"))
    (tmp_path / "file").write_text("not a tty")
    with pytest.raises(InputError, match=r"is no serial device at 57600 baud \(Inappropriate ioctl for device\)$"):
        MavlinkBattery(parse_env_source(f"mavlink:{tmp_path}/file"))  # not "((25, 'Inappropriate ...'))"


def test_a_tcp_link_connects_again_after_the_server_went_away() -> None:
    port = free_tcp_port()
    sensor = MavlinkBattery(parse_env_source(f"mavlink:tcp:127.0.0.1:{port}"))  # nobody listens yet: no error
    assert sensor.fileno() is None
    with pytest.raises(SensorFailure, match="not open"):
        sensor.read()
    server = socket.create_server(("127.0.0.1", port))
    try:
        sensor.reopen()
        connection, _ = server.accept()
        autopilot = FlightController(connection.sendall)
        autopilot.send(autopilot.heartbeat(), autopilot.battery_status(71))
        assert read_until(sensor, lambda b: b.values).values == [0.71]
        connection.close()
        with pytest.raises(SensorFailure, match="the other side closed the link"):
            read_until(sensor, lambda b: False, timeout=2.0)
        sensor.reopen()
        connection, _ = server.accept()
        FlightController(connection.sendall).send(autopilot.battery_status(70))
        assert read_until(sensor, lambda b: b.values).values == [0.70]
        connection.close()
    finally:
        server.close()
        sensor.close()


def test_without_pymavlink_the_run_names_the_extra(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "pymavlink.dialects.v20", None)  # as if pymavlink were not installed
    port = free_udp_port()
    # -q: without the notice of a build made first, when the test runs before any other built tiny
    status = main(["run", str(REPO / "apps" / "tiny.yaml"), "--frames", "1", "--no-socket", "-q",
                   "--env-source", f"mavlink:udpin:127.0.0.1:{port}"])
    assert status == 2  # (a build made first may warn of a busy machine before it: the last line)
    assert_one_line_error(capsys.readouterr().err.splitlines(keepends=True)[-1],
                          '--env-source: reading a flight controller needs pymavlink: pip install "sbrs[mavlink]"')


def test_a_tcp_server_that_starts_after_the_run_is_connected_at_a_poll() -> None:
    """mavlink-router may start after sbrs: the link is opened at every poll until it connects, then read."""
    from sbrs.control import PolicyController
    from sbrs.control.sensors import EnvironmentSensors
    from tests.control.helpers import three_scenarios

    port = free_tcp_port()
    controller = PolicyController(three_scenarios(), lambda name: None)
    hub = EnvironmentSensors(controller, [MavlinkBattery(parse_env_source(f"mavlink:tcp:127.0.0.1:{port}"))],
                             poll_s=0.02, max_age_s=None)
    with hub:
        deadline = time.monotonic() + 10
        while hub.status()[0]["failed"] < 3 and time.monotonic() < deadline:  # polls while nobody listens
            time.sleep(0.01)
        assert hub.status()[0]["answering"] is False
        server = socket.create_server(("127.0.0.1", port))
        try:
            connection, _ = server.accept()
            autopilot = FlightController(connection.sendall)
            autopilot.send(autopilot.heartbeat(), autopilot.battery_status(33))
            while controller.environment.battery is None and time.monotonic() < deadline:
                time.sleep(0.01)
            status = hub.status()[0]
            connection.close()
        finally:
            server.close()
    assert controller.environment.battery == 0.33 and status["answering"] is True and status["failed"] >= 3
