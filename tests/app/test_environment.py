"""The grammar of a sensor source (``--env-source SPEC``, ``environment.sources``) and the app file's
``environment:`` section and ``policy.temperature``: what they resolve to, and one-line errors naming the field
(exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbrs.app import load_app_config
from sbrs.app.config import AppConfig, RequirementSet, TemperatureRule
from sbrs.app.environment import (
    EnvironmentConfig,
    SensorSpec,
    check_sources,
    parse_env_source,
    sources_from_args,
)
from sbrs.artifact.read import config_from_dict
from sbrs.cli import main
from sbrs.errors import InputError
from tests.conftest import assert_one_line_error


@pytest.mark.parametrize(("text", "expected"), [
    ("power_supply", SensorSpec("power_supply", "power_supply")),
    ("power_supply:BAT0", SensorSpec("power_supply", "power_supply:BAT0", name="BAT0")),
    ("power_supply:/tmp/ps", SensorSpec("power_supply", "power_supply:/tmp/ps", path="/tmp/ps")),
    ("thermal", SensorSpec("thermal", "thermal")),
    ("thermal:cpu-thermal", SensorSpec("thermal", "thermal:cpu-thermal", name="cpu-thermal")),
    ("thermal:/sys/class/thermal/thermal_zone3", SensorSpec("thermal", "thermal:/sys/class/thermal/thermal_zone3",
                                                            path="/sys/class/thermal/thermal_zone3")),
    (" mavlink:udpin:0.0.0.0:14550 ", SensorSpec("mavlink", "mavlink:udpin:0.0.0.0:14550", link="udpin",
                                                 host="0.0.0.0", port=14550)),
    ("mavlink:udp:127.0.0.1:14551", SensorSpec("mavlink", "mavlink:udp:127.0.0.1:14551", link="udpin",
                                               host="127.0.0.1", port=14551)),
    ("mavlink:udpin:[::1]:14550", SensorSpec("mavlink", "mavlink:udpin:[::1]:14550", link="udpin", host="::1",
                                             port=14550)),
    ("mavlink:tcp:localhost:5760", SensorSpec("mavlink", "mavlink:tcp:localhost:5760", link="tcp",
                                              host="localhost", port=5760)),
    ("mavlink:/dev/ttyACM0", SensorSpec("mavlink", "mavlink:/dev/ttyACM0", link="serial", device="/dev/ttyACM0",
                                        baud=57600)),
    ("mavlink:/dev/serial0:921600", SensorSpec("mavlink", "mavlink:/dev/serial0:921600", link="serial",
                                               device="/dev/serial0", baud=921600)),
])
def test_sources_parse(text: str, expected: SensorSpec) -> None:
    assert parse_env_source(text) == expected


def test_a_relative_path_is_relative_to_the_base(tmp_path: Path) -> None:
    spec = parse_env_source("thermal:fake/thermal", base=tmp_path)
    assert spec.path == str(tmp_path / "fake" / "thermal") and spec.field == "temperature"
    assert parse_env_source("power_supply:./ps").path == str(Path.cwd() / "ps")


@pytest.mark.parametrize(("text", "fragment"), [
    ("", "expected a sensor source"),
    ("gps", "unknown sensor source 'gps'"),
    ("none", "'none' means no sources and stands alone"),
    ("thermal:two words", "expected thermal:NAME (a name without spaces) or thermal:PATH"),
    ("mavlink", "say where the flight controller is"),
    ("mavlink:udpout:127.0.0.1:14550", "sbrs only listens to the flight controller and sends it nothing"),
    ("mavlink:tcpin:0.0.0.0:5760", "a tcpin link would bring nothing"),
    ("mavlink:serial:/dev/ttyS0", "unknown MAVLink link 'serial'"),
    ("mavlink:udpin:14550", "expected udpin:HOST:PORT"),
    ("mavlink:udpin:127.0.0.1:0", "a port in 1..65535"),
    ("mavlink:udpin:127.0.0.1:70000", "a port in 1..65535"),
    ("mavlink:udpin:127.0.0.1:port", "expected udpin:HOST:PORT"),
    ("mavlink:udpin:no:such:host:1", "is no host name or address"),
    ("mavlink:/dev/ttyUSB0:12345", "baud rate 12345 is not one a serial port is opened at"),
])
def test_bad_sources_name_the_option(text: str, fragment: str) -> None:
    with pytest.raises(InputError) as error:
        parse_env_source(text)
    assert error.value.field == "--env-source" and fragment in str(error.value), str(error.value)
    assert "\n" not in str(error.value)


def test_one_source_per_environment_value() -> None:
    assert sources_from_args(["none"]) == ()
    both = sources_from_args(["thermal", "mavlink:udpin:127.0.0.1:14550"])
    assert [spec.field for spec in both] == ["temperature", "battery"]
    with pytest.raises(InputError, match="two sources of the battery: power_supply and mavlink:/dev/ttyACM0; give one"):
        check_sources((parse_env_source("power_supply"), parse_env_source("mavlink:/dev/ttyACM0")))
    with pytest.raises(InputError, match="'none' stands alone"):
        sources_from_args(["none", "thermal"])


APP = """\
name: sensed
input: {name: input, shape: [1, 3, 8, 8], dtype: float32}
scenarios:
  - name: full
    layers: [{op: conv, out: 8, kernel: 3, pad: 1, act: relu}]
  - name: low
    layers: [{op: conv, out: 4, kernel: 3, pad: 1, act: relu}]
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "app.yaml"
    path.write_text(APP + text)
    return path


def test_defaults_without_the_section(tmp_path: Path) -> None:
    config = load_app_config(_write(tmp_path, ""))
    assert config.environment == EnvironmentConfig((), 1.0, 10.0, None)
    assert config.policy.temperature == () and config.policy.temperature_hysteresis == 5.0


def test_the_section_resolves_and_survives_the_build_manifest(tmp_path: Path) -> None:
    config = load_app_config(_write(tmp_path, """\
environment:
  sources: [thermal:./zones, "mavlink:udpin:127.0.0.1:14550"]
  poll_s: 0.25
  max_age_s: null
  min_fps: source
policy:
  temperature:
    - {above: 70, requirements: {accuracy: 0.5, energy: 0.5}}
    - {above: 85, scenario: low}
  hysteresis: {temperature: 3}
"""))
    environment = config.environment
    assert [spec.spec for spec in environment.sources] == ["thermal:./zones", "mavlink:udpin:127.0.0.1:14550"]
    assert environment.sources[0].path == str(tmp_path / "zones")  # relative to the app file
    assert (environment.poll_s, environment.max_age_s, environment.min_fps) == (0.25, None, "source")
    assert config.policy.temperature == (TemperatureRule(85.0, scenario="low"),  # highest first
                                         TemperatureRule(70.0, requirements=RequirementSet(0.5, 0.0, 0.0, 0.5)))
    assert config.policy.temperature_hysteresis == 3.0
    assert config_from_dict(config.to_dict()) == config
    assert load_app_config(_write(tmp_path, "environment: {min_fps: 15}\n")).environment.min_fps == 15.0


def test_a_manifest_from_before_the_section_reads_as_the_default(tmp_path: Path) -> None:
    data = load_app_config(_write(tmp_path, "")).to_dict()
    del data["environment"], data["policy"]["temperature"], data["policy"]["temperature_hysteresis"]
    config: AppConfig = config_from_dict(data)
    assert config.environment == EnvironmentConfig() and config.policy.temperature == ()


BAD = [
    ("unknown key", "environment:\n  sensors: [thermal]\n",
     "app.yaml:9: environment.sensors: unknown key (allowed: max_age_s, min_fps, poll_s, sources)"),
    ("bad source", "environment:\n  sources: [thermal, gps]\n",
     "app.yaml:9: environment.sources[1]: unknown sensor source 'gps'"),
    ("udpout", "environment:\n  sources: ['mavlink:udpout:127.0.0.1:14550']\n",
     "environment.sources[0]: mavlink:udpout:127.0.0.1:14550: sbrs only listens"),
    ("two batteries", "environment:\n  sources: [power_supply, 'mavlink:/dev/ttyACM0']\n",
     "app.yaml:9: environment.sources: two sources of the battery"),
    ("poll too short", "environment:\n  poll_s: 0\n",
     "app.yaml:9: environment.poll_s: Input should be greater than or equal to 0.01"),
    ("min_fps word", "environment:\n  min_fps: camera\n", "app.yaml:9: environment.min_fps"),
    ("source not a string", "environment:\n  sources: [12]\n", "app.yaml:9: environment.sources[0]"),
    ("unknown temperature scenario", "policy:\n  temperature: [{above: 80, scenario: nope}]\n",
     "app.yaml:9: policy.temperature[0].scenario: unknown scenario 'nope' (scenarios: full, low)"),
    ("duplicate temperature thresholds",
     "policy:\n  temperature:\n    - {above: 80, scenario: low}\n    - {above: 80, scenario: full}\n",
     "app.yaml:11: policy.temperature[1].above: duplicate threshold 80 (first: policy.temperature[0])"),
    ("temperature without an action", "policy:\n  temperature: [{above: 80}]\n",
     "policy.temperature[0]: give exactly one of 'scenario' (forced) or 'requirements'"),
    ("temperature below absolute zero", "policy:\n  temperature: [{above: -300, scenario: low}]\n",
     "policy.temperature[0].above: Input should be greater than or equal to -273.15"),
    ("temperature hysteresis", "policy:\n  hysteresis: {temperature: -1}\n",
     "policy.hysteresis.temperature: Input should be greater than or equal to 0"),
]


@pytest.mark.parametrize(("text", "fragment"), [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_sections_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                              fragment: str) -> None:
    assert main(["check", str(_write(tmp_path, text))]) == 2
    assert_one_line_error(capsys.readouterr().err, fragment)
