"""Linux' battery and temperature from sysfs trees in a temporary folder (the files the kernel exposes): which
supply and zones a source picks, the values read, garbage (``MalformedReading``) and files gone (``SensorFailure``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbrs.app.environment import parse_env_source
from sbrs.control.readings import MalformedReading, SensorFailure
from sbrs.control.sysfs import PowerSupplyBattery, ThermalTemperature, read_integer
from sbrs.errors import InputError
from tests.control.sysfs_trees import power_supply, thermal_zone, write_attribute


def battery(path: Path) -> PowerSupplyBattery:
    return PowerSupplyBattery(parse_env_source(f"power_supply:{path}"))


def test_the_first_real_battery_of_a_folder_of_supplies(tmp_path: Path) -> None:
    power_supply(tmp_path, "AC", kind="Mains", online=1)
    power_supply(tmp_path, "BAT0", present=0, capacity=0)  # an empty bay
    power_supply(tmp_path, "BAT1", capacity=64)
    power_supply(tmp_path, "hidpp_battery_0", scope="Device", capacity=12)  # a wireless mouse's
    sensor = battery(tmp_path)
    assert sensor.folder == tmp_path / "BAT1"
    assert sensor.read().values == [0.64]
    assert battery(tmp_path / "hidpp_battery_0").folder.name == "hidpp_battery_0"  # named, it is taken


def test_energy_then_charge_when_there_is_no_capacity(tmp_path: Path) -> None:
    folder = power_supply(tmp_path, "BAT0", energy_now=30_000_000, energy_full=40_000_000)
    assert battery(folder).read().values == [0.75]
    folder = power_supply(tmp_path, "BAT1", charge_now=1_000_000, charge_full=4_000_000)
    assert battery(folder).read().values == [0.25]
    folder = power_supply(tmp_path, "BAT2", energy_now=41_000_000, energy_full=40_000_000)
    assert battery(folder).read().values == [1.0]  # a battery's estimate may pass its full charge


@pytest.mark.parametrize(("content", "why"), [
    ("garbage", "holds 'garbage', not an integer"), ("", "holds '', not an integer"),
    ("12.5", "not an integer"), ("1_000", "not an integer"), ("140", "holds 140, not a percentage"),
    ("-3", "holds -3, not a percentage"), ("9" * 100, "not an integer"), ("\u00b2", "not an integer"),
])
def test_garbage_in_the_file_is_a_malformed_reading(tmp_path: Path, content: str, why: str) -> None:
    folder = power_supply(tmp_path, "BAT0", capacity=50)
    sensor = battery(folder)
    (folder / "capacity").write_text(content)
    with pytest.raises(MalformedReading, match=why.replace("(", r"\(").replace(")", r"\)")):
        sensor.read()


def test_a_supply_whose_files_vanish_does_not_answer(tmp_path: Path) -> None:
    folder = power_supply(tmp_path, "BAT0", capacity=50)
    sensor = battery(folder)
    (folder / "capacity").unlink()
    with pytest.raises(SensorFailure, match="no capacity, energy_now/energy_full or charge_now/charge_full"):
        sensor.read()
    write_attribute(folder / "capacity", 49)
    assert sensor.read().values == [0.49]


def test_a_supply_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    power_supply(tmp_path, "AC", kind="Mains")
    with pytest.raises(InputError, match=r"no battery in .* \(supplies: AC; name one: power_supply:NAME\)"):
        battery(tmp_path)
    with pytest.raises(InputError, match="no such folder"):
        battery(tmp_path / "nowhere")


def test_the_hottest_zone_in_degrees(tmp_path: Path) -> None:
    thermal_zone(tmp_path, 0, 41.5, "acpitz")
    thermal_zone(tmp_path, 1, 67.25, "x86_pkg_temp")
    thermal_zone(tmp_path, 2, -5.0, "battery-temp")
    (tmp_path / "cooling_device0").mkdir()  # not a zone
    sensor = ThermalTemperature(parse_env_source(f"thermal:{tmp_path}"))
    assert [zone.name for zone in sensor.zones] == ["thermal_zone0", "thermal_zone1", "thermal_zone2"]
    assert sensor.read().values == [67.25]
    one = ThermalTemperature(parse_env_source(f"thermal:{tmp_path / 'thermal_zone0'}"))
    assert one.read().values == [41.5]


def test_zones_named_by_type(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    thermal_zone(tmp_path, 0, 50.0, "CPU-therm")
    thermal_zone(tmp_path, 1, 45.0, "GPU-therm")
    monkeypatch.setattr("sbrs.control.sysfs.THERMAL_ROOT", str(tmp_path))  # the machine's own tree, here a test's
    assert ThermalTemperature(parse_env_source("thermal:gpu-therm")).read().values == [45.0]
    assert ThermalTemperature(parse_env_source("thermal:thermal_zone0")).read().values == [50.0]
    assert ThermalTemperature(parse_env_source("thermal")).read().values == [50.0]
    with pytest.raises(InputError, match=r"no thermal zone named 'soc' .*zones: thermal_zone0 \(CPU-therm\)"):
        ThermalTemperature(parse_env_source("thermal:soc"))


def test_a_zone_that_gives_nothing_at_the_start_is_left_out(tmp_path: Path) -> None:
    thermal_zone(tmp_path, 0, 50.0)
    (tmp_path / "thermal_zone1").mkdir()
    (tmp_path / "thermal_zone1" / "temp").mkdir()  # reading it fails, as a sensor that is off does (ENODATA)
    assert [zone.name for zone in ThermalTemperature(parse_env_source(f"thermal:{tmp_path}")).zones] == [
        "thermal_zone0"]
    with pytest.raises(InputError, match="gives a temperature"):
        ThermalTemperature(parse_env_source(f"thermal:{tmp_path / 'thermal_zone1'}"))


def test_garbage_in_one_zone_is_counted_and_the_others_still_read(tmp_path: Path) -> None:
    zone0 = thermal_zone(tmp_path, 0, 50.0)
    zone1 = thermal_zone(tmp_path, 1, 60.0)
    sensor = ThermalTemperature(parse_env_source(f"thermal:{tmp_path}"))
    write_attribute(zone1 / "temp", "n/a")
    batch = sensor.read()
    assert batch.values == [50.0] and batch.malformed == 1 and "not an integer" in str(batch.why)
    write_attribute(zone0 / "temp", 2_000_000)  # 2000 °C: no temperature a board has
    batch = sensor.read()
    assert batch.values == [] and batch.malformed == 2 and "not a temperature" in str(batch.why)
    (zone0 / "temp").unlink()
    (zone1 / "temp").unlink()
    with pytest.raises(SensorFailure, match="thermal_zone0/temp"):
        sensor.read()


def test_read_integer_reads_one_integer(tmp_path: Path) -> None:
    write_attribute(tmp_path / "value", -42)
    assert read_integer(tmp_path / "value") == -42
    with pytest.raises(FileNotFoundError):
        read_integer(tmp_path / "missing")
    (tmp_path / "folder").mkdir()
    with pytest.raises(SensorFailure, match="cannot read"):
        read_integer(tmp_path / "folder")
