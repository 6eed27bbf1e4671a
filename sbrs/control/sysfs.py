"""The battery and the temperature as Linux' sysfs gives them (``power_supply:`` and ``thermal:`` sources,
``sbrs.app.environment``; the files are those of the kernel's ABI, Documentation/ABI/testing/sysfs-class-power
and sysfs-class-thermal).

- ``PowerSupplyBattery``: ``/sys/class/power_supply/NAME/``: ``capacity`` (percent), else ``energy_now``/
  ``energy_full`` (µWh), else ``charge_now``/``charge_full`` (µAh); the first supply of type ``Battery`` that is
  not a peripheral's (``scope`` ``Device``: a mouse, a headset) unless one is named.
- ``ThermalTemperature``: ``/sys/class/thermal/thermal_zoneN/temp`` in millidegrees Celsius; the hottest of the
  zones chosen (all of them by default: a board throttles on its hottest). A zone that gives nothing when the
  source opens (a sensor that is off answers ENODATA) is left out.

A file holding anything else than one integer, or an impossible one (a capacity of 140 %), is a
``MalformedReading``; a file that cannot be read (gone, an I/O error) a ``SensorFailure``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sbrs.app.environment import POWER_SUPPLY_ROOT, THERMAL_ROOT, SensorSpec
from sbrs.control.readings import Batch, MalformedReading, SensorFailure
from sbrs.errors import InputError

logger = logging.getLogger(__name__)

MAX_ATTRIBUTE_BYTES = 64
"""A sysfs attribute holding a number is a few bytes; more is garbage (and is not read further)."""
MILLIDEGREES = 1000.0


def read_integer(path: Path) -> int:
    """The integer a sysfs attribute holds. ``FileNotFoundError`` when there is no such file, ``SensorFailure``
    when it cannot be read, ``MalformedReading`` when it holds something else than one integer."""
    try:
        with open(path, "rb") as stream:
            raw = stream.read(MAX_ATTRIBUTE_BYTES + 1)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise SensorFailure(f"cannot read {path}: {exc.strerror or exc}") from None
    text = raw.decode("ascii", errors="replace").strip()
    digits = text[1:] if text.startswith("-") else text
    if len(raw) > MAX_ATTRIBUTE_BYTES or not digits.isascii() or not digits.isdigit():
        shown = text[:24] + ("..." if len(text) > 24 else "")
        raise MalformedReading(f"{path} holds {shown!r}, not an integer")
    return int(text)


def _read_text(path: Path) -> str | None:
    try:
        with open(path, "rb") as stream:
            return stream.read(MAX_ATTRIBUTE_BYTES).decode("ascii", errors="replace").strip()
    except OSError:
        return None


BATTERY_FILES = ("capacity", "energy_now", "charge_now")


def find_power_supply(spec: SensorSpec) -> Path:
    """The folder of the battery ``spec`` names (module docstring); ``InputError`` naming ``spec`` when there is
    none (the sources are opened before the first frame: a typo fails at once)."""
    if spec.path is not None:
        folder = Path(spec.path)
        if not folder.is_dir():
            raise InputError(f"{spec.spec}: no such folder", field="environment")
        if any((folder / name).is_file() for name in BATTERY_FILES):
            return folder
        root = folder
    else:
        root = Path(POWER_SUPPLY_ROOT)
        if spec.name is not None:
            folder = root / spec.name
            if folder.is_dir():
                return folder
            raise InputError(f"{spec.spec}: no power supply {spec.name!r} in {root} "
                             f"(supplies: {', '.join(_entries(root)) or 'none'})", field="environment")
    for folder in (root / name for name in _entries(root)):
        if (_read_text(folder / "type") == "Battery" and _read_text(folder / "scope") != "Device"
                and _read_text(folder / "present") != "0"
                and any((folder / name).is_file() for name in BATTERY_FILES)):
            return folder
    raise InputError(f"{spec.spec}: no battery in {root} (supplies: {', '.join(_entries(root)) or 'none'}; "
                     "name one: power_supply:NAME)", field="environment")


def _entries(root: Path) -> list[str]:
    try:
        return sorted(entry.name for entry in root.iterdir() if entry.is_dir())
    except OSError:
        return []


class PowerSupplyBattery:
    """The battery level (0..1) of a Linux power supply (module docstring)."""

    polled = True

    def __init__(self, spec: SensorSpec) -> None:
        self.spec = spec
        self.folder = find_power_supply(spec)

    def read(self) -> Batch:
        try:
            percent = read_integer(self.folder / "capacity")
        except FileNotFoundError:
            pass
        else:
            if not 0 <= percent <= 100:
                raise MalformedReading(f"{self.folder / 'capacity'} holds {percent}, not a percentage")
            return Batch([percent / 100.0], heard=True)
        for now_name, full_name in (("energy_now", "energy_full"), ("charge_now", "charge_full")):
            try:
                now, full = read_integer(self.folder / now_name), read_integer(self.folder / full_name)
            except FileNotFoundError:
                continue
            if full <= 0 or now < 0:
                raise MalformedReading(f"{self.folder}: {now_name} {now} of {full_name} {full}")
            return Batch([min(1.0, now / full)], heard=True)  # a battery's estimate may pass its full charge
        raise SensorFailure(f"{self.folder}: no capacity, energy_now/energy_full or charge_now/charge_full to read")

    def fileno(self) -> int | None:
        return None

    def reopen(self) -> None:
        return None

    def close(self) -> None:
        return None


def find_thermal_zones(spec: SensorSpec) -> list[Path]:
    """The zone folders ``spec`` names (module docstring) that hold a ``temp``; ``InputError`` when none does."""
    root = Path(THERMAL_ROOT)
    if spec.path is not None:
        folder = Path(spec.path)
        if not folder.is_dir():
            raise InputError(f"{spec.spec}: no such folder", field="environment")
        if (folder / "temp").is_file():
            return [folder]
        root = folder
    zones = [root / name for name in _entries(root) if (root / name / "temp").is_file()
             and (spec.path is not None or name.startswith("thermal_zone"))]
    if spec.name is not None:
        wanted = spec.name.lower()
        zones = [zone for zone in zones if zone.name.lower() == wanted
                 or (_read_text(zone / "type") or "").lower() == wanted]
        if not zones:
            known = ", ".join(f"{zone.name} ({_read_text(zone / 'type')})"
                              for zone in (root / name for name in _entries(root))) or "none"
            raise InputError(f"{spec.spec}: no thermal zone named {spec.name!r} in {root} (zones: {known})",
                             field="environment")
    readable = []
    for zone in zones:
        try:
            read_integer(zone / "temp")
        except (OSError, SensorFailure, MalformedReading) as exc:  # a zone whose sensor is off (ENODATA)
            logger.debug("sbrs: %s: leaving out %s: %s", spec.spec, zone, exc)
            continue
        readable.append(zone)
    if not readable:
        raise InputError(f"{spec.spec}: no thermal zone in {root} gives a temperature", field="environment")
    return readable


class ThermalTemperature:
    """The temperature (°C) of the hottest of some thermal zones (module docstring)."""

    polled = True

    def __init__(self, spec: SensorSpec) -> None:
        self.spec = spec
        self.zones = find_thermal_zones(spec)

    def read(self) -> Batch:
        batch = Batch()
        temperatures, failures = [], []
        for zone in self.zones:
            try:
                millidegrees = read_integer(zone / "temp")
            except MalformedReading as exc:
                batch.garbage(str(exc))
                continue
            except (OSError, SensorFailure) as exc:
                failures.append(str(exc) if isinstance(exc, SensorFailure) else f"{zone / 'temp'}: {exc.strerror}")
                continue
            celsius = millidegrees / MILLIDEGREES
            if not -273.15 <= celsius <= 1000.0:
                batch.garbage(f"{zone / 'temp'} holds {millidegrees}, not a temperature in m°C")
                continue
            temperatures.append(celsius)
        if temperatures:
            batch.values.append(max(temperatures))
            batch.heard = True
        elif not batch.malformed:
            raise SensorFailure("; ".join(failures) or "no zone to read")
        return batch

    def fileno(self) -> int | None:
        return None

    def reopen(self) -> None:
        return None

    def close(self) -> None:
        return None
