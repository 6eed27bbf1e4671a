"""The app file's ``policy:`` section: defaults, resolution, and one-line errors naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbrs.app import load_app_config
from sbrs.app.config import BatteryRule, RequirementSet
from sbrs.cli import main

APP = """\
name: policed
input: {name: input, shape: [1, 3, 8, 8], dtype: float32}
initial: accurate
scenarios:
  - name: accurate
    layers: [{op: conv, out: 8, kernel: 3, pad: 1, act: relu}]
    requirements: {accuracy: 0.8, throughput: 0.2}
    characteristics: {accuracy: 80, fps: 10, energy_j: 0.4}
  - name: frugal
    layers: [{op: conv, out: 4, kernel: 3, pad: 1, act: relu}]
    characteristics: {accuracy: 70, fps: 60, energy_j: 0.1}
"""

POLICY = """\
policy:
  battery:
    - {below: 0.5, requirements: {accuracy: 0.5, energy: 0.5}}
    - {below: 0.2, scenario: frugal}
  hysteresis: {battery: 0.1, fps: 0.2}
  high_power: [accurate]
  default_requirements: {throughput: 1.0}
"""


def _write(tmp_path: Path, policy: str) -> Path:
    path = tmp_path / "app.yaml"
    path.write_text(APP + policy)
    return path


def test_defaults_without_policy(tmp_path: Path) -> None:
    policy = load_app_config(_write(tmp_path, "")).policy
    assert policy.battery == () and policy.high_power == ()
    assert (policy.battery_hysteresis, policy.fps_hysteresis) == (0.05, 0.1)
    assert policy.default_requirements == RequirementSet(0.8, 0.2, 0.0, 0.0)  # the initial scenario's


def test_full_policy_resolves_sorted(tmp_path: Path) -> None:
    policy = load_app_config(_write(tmp_path, POLICY)).policy
    assert policy.battery == (BatteryRule(0.2, scenario="frugal"),
                              BatteryRule(0.5, requirements=RequirementSet(0.5, 0.0, 0.0, 0.5)))
    assert (policy.battery_hysteresis, policy.fps_hysteresis) == (0.1, 0.2)
    assert policy.high_power == ("accurate",)
    assert policy.default_requirements == RequirementSet(0.0, 1.0, 0.0, 0.0)


BAD = [
    ("unknown key", "policy:\n  batery: []\n",
     "app.yaml:13: policy.batery: unknown key (allowed: battery, default_requirements, high_power, hysteresis, temperature)"),
    ("unknown scenario", "policy:\n  battery:\n    - {below: 0.2, scenario: nope}\n",
     "app.yaml:14: policy.battery[0].scenario: unknown scenario 'nope' (scenarios: accurate, frugal)"),
    ("threshold above 1", "policy:\n  battery: [{below: 1.5, scenario: frugal}]\n",
     "app.yaml:13: policy.battery[0].below: Input should be less than or equal to 1"),
    ("threshold below 0", "policy:\n  battery: [{below: -0.1, scenario: frugal}]\n",
     "policy.battery[0].below: Input should be greater than or equal to 0"),
    # thresholds the value can never cross were accepted and then never acted, or never released their rule
    ("threshold at 0", "policy:\n  battery: [{below: 0, scenario: frugal}]\n",
     "app.yaml:13: policy.battery[0].below: a battery level is never below 0: this threshold would never be active"),
    ("threshold released above a full battery", "policy:\n  battery: [{below: 0.96, scenario: frugal}]\n",
     "app.yaml:13: policy.battery[0].below: released only above 1.01 (below + policy.hysteresis.battery 0.05)"),
    ("hysteresis releasing above a full battery",
     "policy:\n  battery: [{below: 0.2, scenario: frugal}, {below: 0.5, scenario: frugal}]\n"
     "  hysteresis: {battery: 0.5}\n",
     "app.yaml:13: policy.battery[1].below: released only above 1 (below + policy.hysteresis.battery 0.5)"),
    ("temperature threshold at the top of the range", "policy:\n  temperature: [{above: 1000, scenario: frugal}]\n",
     "app.yaml:13: policy.temperature[0].above: a temperature is never above 1000 °C"),
    ("temperature threshold released below absolute zero",
     "policy:\n  temperature: [{above: -270, scenario: frugal}]\n",
     "app.yaml:13: policy.temperature[0].above: released only below -275 °C"),
    ("threshold not a number", "policy:\n  battery: [{below: low, scenario: frugal}]\n",
     "app.yaml:13: policy.battery[0].below"),  # (the union member is named too: .float)
    ("duplicate thresholds",
     "policy:\n  battery:\n    - {below: 0.2, scenario: frugal}\n    - {below: 0.2, scenario: accurate}\n",
     "app.yaml:15: policy.battery[1].below: duplicate threshold 0.2 (first: policy.battery[0])"),
    ("scenario and requirements",
     "policy:\n  battery:\n    - {below: 0.2, scenario: frugal, requirements: {energy: 1.0}}\n",
     "app.yaml:14: policy.battery[0]: give exactly one of 'scenario' (forced) or 'requirements'"),
    ("neither scenario nor requirements", "policy:\n  battery:\n    - {below: 0.2}\n",
     "policy.battery[0]: give exactly one of"),
    ("requirements not summing to 1", "policy:\n  battery:\n    - {below: 0.2, requirements: {energy: 0.5}}\n",
     "app.yaml:14: policy.battery[0].requirements: requirement weights must sum to 1, they sum to 0.5"),
    ("unknown high-power scenario", "policy:\n  high_power: [accurate, turbo]\n",
     "app.yaml:13: policy.high_power[1]: unknown scenario 'turbo'"),
    ("duplicate high-power scenario", "policy:\n  high_power: [accurate, accurate]\n",
     "policy.high_power[1]: duplicate entry 'accurate'"),
    ("fps hysteresis of 1", "policy:\n  hysteresis: {fps: 1.0}\n",
     "app.yaml:13: policy.hysteresis.fps: Input should be less than 1"),
    ("unknown hysteresis key", "policy:\n  hysteresis: {energy: 0.1}\n",
     "policy.hysteresis.energy: unknown key (allowed: battery, fps, temperature)"),
    ("default requirements not summing", "policy:\n  default_requirements: {accuracy: 0.3}\n",
     "policy.default_requirements: requirement weights must sum to 1"),
    ("policy not a mapping", "policy: [frugal]\n", "policy: Input should be a valid dictionary"),
]


@pytest.mark.parametrize(("policy", "fragment"), [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_policy_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str,
                                           fragment: str) -> None:
    status = main(["check", str(_write(tmp_path, policy))])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith("sbrs: error: "), err
    assert fragment in err, err
