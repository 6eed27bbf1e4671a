"""A flight controller's battery over MAVLink (``mavlink:`` sources, ``sbrs.app.environment``): pymavlink parses,
sbrs holds the link.

The level is ``SYS_STATUS.battery_remaining`` and ``BATTERY_STATUS.battery_remaining`` of battery 0 (percent; -1,
"unknown", is no reading). A HEARTBEAT from an autopilot (not from a ground station or another companion) says the
flight controller is there even while it sends no battery level.

One flight controller is followed: the first MAVLink system heard sending an autopilot's HEARTBEAT or a battery
level. A router may pass on the messages of other systems (a second vehicle, a simulator beside the real one);
their battery levels are ignored (the first of each system is logged), or the level, and the policy's scenario,
would flip between theirs at every message, whatever the hysteresis.

Why not ``pymavlink.mavutil.mavlink_connection``: importing ``mavutil`` sets the process' ``MAVLINK_DIALECT``
environment variable and imports about 170 modules (``ssl`` among them); a library must change no process-wide
state. So sbrs imports one generated dialect module (``pymavlink.dialects.v20.common``: its parser reads MAVLink
1 and 2) and reads the link itself: a UDP socket bound to HOST:PORT (``udpin``), a TCP connection (``tcp``, opened
again at each poll while it is down), or a serial device in raw mode at the given baud rate (``termios``). It
sends nothing (``sbrs.app.environment``).

Garbage: on UDP every datagram is parsed on its own (MAVLink puts whole packets in a datagram), so a datagram
holding anything else than whole, valid packets counts once as malformed and cannot spoil the next one. On a
stream (TCP, serial) every run of bytes the parser rejects counts once. A packet of a message this dialect does not
know (an autopilot's own messages) is not garbage and is ignored.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from typing import Any

from sbrs.app.environment import SensorSpec
from sbrs.control.readings import Batch, SensorFailure
from sbrs.errors import InputError

MAVLINK_EXTRA = 'reading a flight controller needs pymavlink: pip install "sbrs[mavlink]"'
READ_BYTES = 65536
MAX_DATAGRAMS_PER_READ = 256  # then the thread sees to its other sensors and comes back
CONNECT_TIMEOUT_S = 1.0
MAV_AUTOPILOT_INVALID = 8  # MAVLink's MAV_AUTOPILOT enum: "no valid autopilot", e.g. a ground station
UNKNOWN_LEVEL = -1  # battery_remaining when the autopilot does not know

logger = logging.getLogger(__name__)


def load_dialect() -> Any:
    """pymavlink's MAVLink 2 ``common`` dialect (it parses MAVLink 1 too); ``InputError`` naming the extra to
    install when pymavlink is missing."""
    try:
        from pymavlink.dialects.v20 import common
    except ImportError:
        raise InputError(MAVLINK_EXTRA, field="--env-source") from None
    return common


class MavlinkBattery:
    """The battery level (0..1) a flight controller reports over MAVLink (module docstring). ``udpin`` binds and
    a serial device opens here (``InputError`` when they cannot: a busy port, a missing device); ``tcp`` connects
    here or at a later poll."""

    polled = False

    def __init__(self, spec: SensorSpec) -> None:
        self.spec = spec
        self._dialect = load_dialect()
        self._parser = self._new_parser()
        self._socket: socket.socket | None = None
        self._descriptor: int | None = None  # a serial device's
        self._system: int | None = None  # the MAVLink system id of the flight controller followed, once heard
        self._ignored_systems: set[int] = set()  # other systems whose levels were ignored (logged once each)
        if spec.link == "udpin":
            self._socket = _bind_udp(spec)
        elif spec.link == "serial":
            try:
                self._descriptor = _open_serial(spec)
            except SensorFailure as exc:
                raise InputError(str(exc), field="--env-source") from None
        else:
            with contextlib.suppress(SensorFailure):  # the router may start later: a later poll connects
                self.reopen()

    def _new_parser(self) -> Any:
        parser = self._dialect.MAVLink(None)
        parser.robust_parsing = True  # garbage becomes BAD_DATA messages instead of exceptions
        return parser

    def fileno(self) -> int | None:
        if self._socket is not None:
            return self._socket.fileno()
        return self._descriptor

    def read(self) -> Batch:
        batch = Batch()
        if self.spec.link == "udpin":
            self._read_datagrams(batch)
        else:
            self._read_stream(batch)
        return batch

    def _read_datagrams(self, batch: Batch) -> None:
        link = self._socket
        if link is None:
            raise SensorFailure(f"{self.spec.spec}: not open")
        for _ in range(MAX_DATAGRAMS_PER_READ):
            try:
                datagram = link.recv(READ_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # nothing a bound, unconnected socket should see; the next read tries again
                batch.garbage(f"receiving: {exc.strerror or exc}")
                return
            messages, why = self._parse(datagram)
            if why is None and self._parser.buf_len() > 0:
                why = f"a datagram of {len(datagram)} bytes ends inside a packet"
            self._use(messages, batch)
            if why is not None:  # one datagram counts once; the next starts on a fresh parser
                batch.garbage(why)
                self._parser = self._new_parser()

    def _read_stream(self, batch: Batch) -> None:
        try:
            if self._socket is not None:
                data = self._socket.recv(READ_BYTES)
            elif self._descriptor is not None:
                data = os.read(self._descriptor, READ_BYTES)
            else:
                raise SensorFailure(f"{self.spec.spec}: not open")
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._drop()
            raise SensorFailure(f"{self.spec.spec}: {exc.strerror or exc}") from None
        if not data:
            self._drop()
            raise SensorFailure(f"{self.spec.spec}: the other side closed the link")
        messages, why = self._parse(data)
        self._use(messages, batch)
        for message in messages:
            if message.get_type() == "BAD_DATA":
                batch.garbage(f"not MAVLink: {message.reason}")
        if why is not None and not batch.malformed:
            batch.garbage(why)

    def _parse(self, data: bytes) -> tuple[list[Any], str | None]:
        """The messages in ``data`` and why it held garbage (None: it did not)."""
        try:
            messages = self._parser.parse_buffer(data) or []
        except Exception as exc:  # the parser's own failure on garbage it did not expect is garbage too
            self._parser = self._new_parser()
            return [], f"not MAVLink: {type(exc).__name__}: {exc}"
        bad = next((message.reason for message in messages if message.get_type() == "BAD_DATA"), None)
        return messages, None if bad is None else f"not MAVLink: {bad}"

    def _use(self, messages: list[Any], batch: Batch) -> None:
        for message in messages:
            kind = message.get_type()
            if kind == "HEARTBEAT":
                if message.autopilot != MAV_AUTOPILOT_INVALID and self._follows(message, kind, claims=True):
                    batch.heard = True
            elif kind == "SYS_STATUS" or (kind == "BATTERY_STATUS" and message.id == 0):
                percent = message.battery_remaining
                if self._follows(message, kind, claims=0 <= percent <= 100):
                    self._level(kind, percent, batch)

    def _follows(self, message: Any, kind: str, *, claims: bool) -> bool:
        """Whether ``message`` comes from the flight controller followed; the first system whose message
        ``claims`` it (an autopilot's HEARTBEAT, a known battery level) becomes it (module docstring)."""
        system = int(message.get_srcSystem())
        if self._system is None:
            if not claims:  # e.g. "level unknown" from whoever sent it: nothing to follow yet
                return True
            self._system = system
        if system == self._system:
            return True
        if system not in self._ignored_systems:
            self._ignored_systems.add(system)  # at most 256 system ids
            logger.warning("sbrs run: sensor %s: ignoring %s from MAVLink system %d: following the flight "
                           "controller of system %d, the first heard", self.spec.spec, kind, system, self._system)
        return False

    @staticmethod
    def _level(kind: str, percent: int, batch: Batch) -> None:
        batch.heard = True
        if percent == UNKNOWN_LEVEL:  # the autopilot does not know
            return
        if not 0 <= percent <= 100:
            batch.garbage(f"{kind}.battery_remaining {percent} is no percentage")
            return
        batch.values.append(percent / 100.0)

    def reopen(self) -> None:
        """Connect a TCP link or open a serial device again; ``SensorFailure`` while it cannot be."""
        self._drop()
        self._parser = self._new_parser()
        if self.spec.link == "tcp":
            assert self.spec.host is not None and self.spec.port is not None
            try:
                link = socket.create_connection((self.spec.host, self.spec.port), timeout=CONNECT_TIMEOUT_S)
            except OSError as exc:
                raise SensorFailure(f"{self.spec.spec}: cannot connect: {exc.strerror or exc}") from None
            link.setblocking(False)
            self._socket = link
        elif self.spec.link == "serial":
            self._descriptor = _open_serial(self.spec)

    def _drop(self) -> None:
        """Close a stream link (a UDP socket stays: it cannot break)."""
        if self.spec.link != "udpin":
            self.close()

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._descriptor is not None:
            with contextlib.suppress(OSError):
                os.close(self._descriptor)
            self._descriptor = None


def _bind_udp(spec: SensorSpec) -> socket.socket:
    assert spec.host is not None and spec.port is not None
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(spec.host, spec.port, type=socket.SOCK_DGRAM)[0]
    except OSError as exc:
        raise InputError(f"{spec.spec}: unknown host {spec.host!r} ({exc.strerror or exc})",
                         field="--env-source") from None
    link = socket.socket(family, kind, protocol)
    try:
        link.bind(address)
    except OSError as exc:
        link.close()
        raise InputError(f"{spec.spec}: cannot listen on {spec.host}:{spec.port} ({exc.strerror or exc})",
                         field="--env-source") from None
    link.setblocking(False)
    return link


def _open_serial(spec: SensorSpec) -> int:
    """A serial device, open read-only in raw mode at ``spec.baud``; ``SensorFailure`` when it cannot be."""
    import termios
    import tty

    assert spec.device is not None and spec.baud is not None
    try:
        descriptor = os.open(spec.device, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        raise SensorFailure(f"{spec.spec}: cannot open {spec.device} ({exc.strerror or exc})") from None
    try:
        tty.setraw(descriptor)
        attributes = termios.tcgetattr(descriptor)
        speed = getattr(termios, f"B{spec.baud}")
        attributes[4] = attributes[5] = speed
        attributes[2] |= termios.CLOCAL | termios.CREAD
        termios.tcsetattr(descriptor, termios.TCSANOW, attributes)
    except (OSError, termios.error, AttributeError) as exc:
        os.close(descriptor)
        # termios.error is (errno, text): said as OSError's text, not as the tuple
        why = exc.args[1] if isinstance(exc, termios.error) and len(exc.args) == 2 else getattr(exc, "strerror", None)
        raise SensorFailure(f"{spec.spec}: {spec.device} is no serial device at {spec.baud} baud "
                            f"({why or exc})") from None
    return descriptor
