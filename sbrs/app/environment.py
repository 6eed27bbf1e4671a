"""The app's ``environment:`` section and the grammar of a sensor source (``sbrs run --env-source SPEC``).

A sensor source is one line of text, the same in the app file (``environment.sources``) and on the command line::

    power_supply                 the battery: the first supply of type Battery under /sys/class/power_supply
    power_supply:NAME            ... the supply NAME there (e.g. BAT0)
    power_supply:PATH            ... a supply's folder, or a folder of supplies (a PATH holds a '/')
    thermal                      the temperature: the hottest zone under /sys/class/thermal
    thermal:NAME                 ... the zones whose folder (thermal_zone0) or type (cpu-thermal) is NAME
    thermal:PATH                 ... a zone's folder, or a folder of zones
    mavlink:udpin:HOST:PORT      the battery a flight controller reports: MAVLink datagrams sent to HOST:PORT
    mavlink:udp:HOST:PORT        (the same; pymavlink's older name)
    mavlink:tcp:HOST:PORT        ... from a TCP server (mavlink-router's, port 5760 by default)
    mavlink:DEVICE[:BAUD]        ... from a serial device (/dev/ttyACM0, /dev/serial0:921600; default 57600)

sbrs only listens to a flight controller: it sends nothing (a heartbeat from it could make the autopilot believe a
ground station is there, and its loss trigger a failsafe). So a link where the other side waits to hear from us
first (``udpout``, ``tcpin``) would bring nothing and is refused.

A relative PATH is relative to the app file in ``environment.sources`` and to the working directory on the
command line. This module parses and checks text only (no file is opened: a build may be made on another
machine than the one that runs it); ``sbrs.control.sensors`` opens and reads the sources.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbrs.errors import InputError

POWER_SUPPLY_ROOT = "/sys/class/power_supply"
THERMAL_ROOT = "/sys/class/thermal"
DEFAULT_BAUD = 57600
#: Baud rates a serial link may be opened at (the rates Linux' termios names).
BAUD_RATES: tuple[int, ...] = (1200, 2400, 4800, 9600, 19200, 38400, 57600, 115200, 230400, 460800, 500000,
                               576000, 921600, 1000000, 1152000, 1500000, 2000000, 2500000, 3000000, 3500000,
                               4000000)
SENSOR_KINDS: tuple[str, ...] = ("power_supply", "thermal", "mavlink")
#: The environment value each kind of sensor reports (``sbrs.control.policy.ENVIRONMENT_FIELDS``).
SENSOR_FIELDS: dict[str, str] = {"power_supply": "battery", "thermal": "temperature", "mavlink": "battery"}
MAVLINK_LINKS: tuple[str, ...] = ("udpin", "tcp", "serial")
NO_SOURCES = "none"
"""``--env-source none``: run without the app file's sources."""

DEFAULT_POLL_S = 1.0
DEFAULT_MAX_AGE_S = 10.0
MIN_POLL_S = 0.01
SPEC_FORMS = ("power_supply[:NAME|:PATH], thermal[:NAME|:PATH], mavlink:udpin:HOST:PORT, mavlink:tcp:HOST:PORT "
              "or mavlink:DEVICE[:BAUD]")


@dataclass(frozen=True)
class SensorSpec:
    """One sensor source, parsed (module docstring). ``spec`` is the text as given: it names the sensor in
    logs, in ``sbrs status`` and in the summary. sysfs sources have a ``name`` or a ``path`` (neither: the
    kind's default root); MAVLink sources a ``link`` (``udpin``, ``tcp``, ``serial``) with ``host`` and
    ``port``, or ``device`` and ``baud``."""

    kind: str
    spec: str
    name: str | None = None
    path: str | None = None
    link: str | None = None
    host: str | None = None
    port: int | None = None
    device: str | None = None
    baud: int | None = None

    @property
    def field(self) -> str:
        """The environment value this source reports: ``battery`` or ``temperature``."""
        return SENSOR_FIELDS[self.kind]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SensorSpec:
        return cls(**data)


@dataclass(frozen=True)
class EnvironmentConfig:
    """The app's ``environment:`` section, resolved: the sensor ``sources``, how often polled sources are read
    (``poll_s``), how long a value lives without a new reading (``max_age_s``; None: for ever) and ``min_fps``:
    a number, ``"source"`` (the frame source's frame rate, when the source has one) or None."""

    sources: tuple[SensorSpec, ...] = ()
    poll_s: float = DEFAULT_POLL_S
    max_age_s: float | None = DEFAULT_MAX_AGE_S
    min_fps: float | str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> EnvironmentConfig:
        """From ``dataclasses.asdict`` of one (a build's manifest); None (a build without the section): the default."""
        if data is None:
            return cls()
        return cls(sources=tuple(SensorSpec.from_dict(item) for item in data["sources"]), poll_s=data["poll_s"],
                   max_age_s=data["max_age_s"], min_fps=data["min_fps"])


def parse_env_source(text: str, *, base: str | Path | None = None, field: str = "--env-source") -> SensorSpec:
    """``text`` (module docstring) as a ``SensorSpec``; a relative PATH is made absolute against ``base`` (default:
    the working directory). ``InputError`` naming ``field`` when the text is not a source."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"expected a sensor source ({SPEC_FORMS}), got {text!r}", field=field)
    spec = text.strip()
    kind, _, rest = spec.partition(":")
    if kind in ("power_supply", "thermal"):
        if not rest:
            return SensorSpec(kind, spec)
        if "/" in rest:
            path = Path(rest).expanduser()
            if not path.is_absolute():
                path = Path(base or Path.cwd()) / path
            return SensorSpec(kind, spec, path=str(path))
        if not rest.strip() or any(char.isspace() for char in rest) or len(rest) > 64:
            raise InputError(f"{spec}: expected {kind}:NAME (a name without spaces) or {kind}:PATH", field=field)
        return SensorSpec(kind, spec, name=rest)
    if kind == "mavlink":
        return _parse_mavlink(spec, rest, field)
    if kind == NO_SOURCES and not rest:
        raise InputError(f"'{NO_SOURCES}' means no sources and stands alone (--env-source {NO_SOURCES}); an app "
                         "file without sources leaves environment.sources out", field=field)
    raise InputError(f"unknown sensor source {spec[:60]!r} (sources: {SPEC_FORMS})", field=field)


def _parse_mavlink(spec: str, rest: str, field: str) -> SensorSpec:
    if not rest:
        raise InputError(f"{spec}: say where the flight controller is: mavlink:udpin:HOST:PORT, "
                         "mavlink:tcp:HOST:PORT or mavlink:DEVICE[:BAUD]", field=field)
    if rest.startswith("/"):
        device, colon, baud_text = rest.rpartition(":")
        if not colon or not baud_text.isdigit():
            device, baud = rest, DEFAULT_BAUD
        else:
            baud = int(baud_text)
            if baud not in BAUD_RATES:
                raise InputError(f"{spec}: baud rate {baud} is not one a serial port is opened at "
                                 f"({', '.join(map(str, BAUD_RATES))})", field=field)
        return SensorSpec("mavlink", spec, link="serial", device=device, baud=baud)
    link, _, address = rest.partition(":")
    if link in ("udpout", "tcpin", "udpbcast"):
        raise InputError(f"{spec}: sbrs only listens to the flight controller and sends it nothing, so a {link} "
                         "link would bring nothing: use udpin:HOST:PORT (e.g. a UDP endpoint of mavlink-router), "
                         "tcp:HOST:PORT or a serial device", field=field)
    if link not in ("udpin", "udp", "tcp"):
        raise InputError(f"{spec}: unknown MAVLink link {link[:20]!r} (mavlink:udpin:HOST:PORT, mavlink:tcp:HOST:PORT "
                         "or mavlink:DEVICE[:BAUD], e.g. mavlink:/dev/ttyACM0:57600)", field=field)
    host, separator, port_text = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not separator or not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise InputError(f"{spec}: expected {link}:HOST:PORT with a port in 1..65535 (e.g. {link}:127.0.0.1:14550)",
                         field=field)
    if ":" in host:  # only an IPv6 literal may hold colons
        import ipaddress  # only such an address needs it

        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise InputError(f"{spec}: {host!r} is no host name or address", field=field) from None
    return SensorSpec("mavlink", spec, link="udpin" if link == "udp" else link, host=host, port=int(port_text))


def check_sources(sources: tuple[SensorSpec, ...], field: str = "--env-source") -> tuple[SensorSpec, ...]:
    """``sources`` when no environment value has two of them (two batteries would overwrite each other's
    readings); ``InputError`` naming ``field`` otherwise."""
    seen: dict[str, SensorSpec] = {}
    for source in sources:
        first = seen.get(source.field)
        if first is not None:
            raise InputError(f"two sources of the {source.field}: {first.spec} and {source.spec}; give one",
                             field=field)
        seen[source.field] = source
    return sources


def sources_from_args(texts: list[str] | tuple[str, ...]) -> tuple[SensorSpec, ...]:
    """``--env-source`` as given (repeatable): the sources, or none for ``--env-source none``."""
    if list(texts) == [NO_SOURCES]:
        return ()
    if NO_SOURCES in texts:
        raise InputError(f"'{NO_SOURCES}' stands alone: give it as the only --env-source", field="--env-source")
    return check_sources(tuple(parse_env_source(text) for text in texts))


def check_period(value: float, field: str, *, allow_none: bool = False) -> float | None:
    """A polling period or an age in seconds (a finite number ≥ ``MIN_POLL_S``); ``InputError`` naming ``field``."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not MIN_POLL_S <= float(value) <= 86400:
        raise InputError(f"expected seconds in [{MIN_POLL_S:g}, 86400], got {value!r}", field=field)
    return float(value)
