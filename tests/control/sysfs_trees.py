"""Trees of the files Linux' sysfs holds for power supplies and thermal zones, written into a test's folder
(Documentation/ABI/testing/sysfs-class-power and sysfs-class-thermal: one value per file, a newline after it)."""

from __future__ import annotations

from pathlib import Path


def write_attribute(path: Path, value: object) -> None:
    """Write ``value`` as the kernel shows it; replaced in one rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(f"{value}\n")
    partial.replace(path)


def power_supply(root: Path, name: str, *, kind: str = "Battery", **attributes: object) -> Path:
    """``root/name`` as a power supply of type ``kind`` with ``attributes`` (``capacity=80``, ``energy_now=...``,
    ``scope="Device"``, ``present=0``, ...); its folder."""
    folder = root / name
    write_attribute(folder / "type", kind)
    for key, value in attributes.items():
        write_attribute(folder / key, value)
    return folder


def thermal_zone(root: Path, index: int, celsius: float, kind: str = "cpu-thermal") -> Path:
    """``root/thermal_zone{index}`` at ``celsius`` (written in millidegrees, as the kernel does); its folder."""
    folder = root / f"thermal_zone{index}"
    write_attribute(folder / "type", kind)
    write_attribute(folder / "temp", round(celsius * 1000))
    return folder
