"""``policy.temperature``: thresholds above which a scenario is forced or requirements rank, their hysteresis, and
how they combine with battery thresholds (``sbrs.control.policy``, rule 1b)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbrs.app.config import AppConfig, BatteryRule, TemperatureRule
from sbrs.control import Environment, Policy, PolicyController
from sbrs.errors import InputError
from tests.control.helpers import requirements, three_scenarios


def hot_config(*rules: TemperatureRule, hysteresis: float = 5.0, battery: tuple[BatteryRule, ...] = ()) -> AppConfig:
    config = three_scenarios(battery=battery)
    return replace(config, policy=replace(config.policy, temperature=tuple(sorted(rules, key=lambda r: -r.above)),
                                          temperature_hysteresis=hysteresis))


def test_above_a_threshold_its_scenario_is_forced() -> None:
    policy = Policy(hot_config(TemperatureRule(80.0, scenario="frugal")))
    assert policy.decide(Environment(temperature=60.0), "accurate").scenario == "accurate"
    decision = policy.decide(Environment(temperature=85.5), "accurate")
    assert decision.scenario == "frugal" and decision.used["temperature_rule"] == 80.0
    assert decision.reason == "temperature 85.5 °C is above 80: forces frugal"
    assert policy.active_temperature_thresholds == (80.0,)
    assert policy.decide(Environment(), "frugal").scenario == "accurate"  # unknown: nothing active
    assert policy.active_temperature_thresholds == ()


def test_hysteresis_holds_a_threshold_until_it_is_cooler_by_the_margin() -> None:
    policy = Policy(hot_config(TemperatureRule(80.0, scenario="frugal"), hysteresis=5.0))
    assert policy.decide(Environment(temperature=80.0), "accurate").scenario == "accurate"  # not above yet
    assert policy.decide(Environment(temperature=80.1), "accurate").scenario == "frugal"
    for temperature in (79.0, 76.0, 75.0):  # still within the margin
        decision = policy.decide(Environment(temperature=temperature), "frugal")
        assert decision.scenario == "frugal"
        assert decision.reason == (f"temperature {temperature:g} °C has not fallen below 75 since it rose above 80 "
                                   "(hysteresis): forces frugal")  # not "is above 80"
    assert policy.decide(Environment(temperature=74.9), "frugal").scenario == "accurate"
    assert policy.decide(Environment(temperature=79.0), "accurate").scenario == "accurate"  # must pass 80 again


def test_the_highest_active_threshold_governs_and_may_give_requirements() -> None:
    policy = Policy(hot_config(TemperatureRule(70.0, requirements=requirements(throughput=1.0)),
                               TemperatureRule(90.0, scenario="frugal")))
    decision = policy.decide(Environment(temperature=75.0), "accurate")
    assert decision.scenario == "frugal"  # ranked by throughput: frugal is the fastest
    assert decision.used["requirements_from"] == "temperature above 70 °C"
    assert policy.decide(Environment(temperature=95.0), "accurate").reason.endswith("forces frugal")
    assert policy.active_temperature_thresholds == (90.0, 70.0)
    explicit = policy.decide(Environment(temperature=75.0, requirements=requirements(accuracy=1.0)), "frugal")
    assert explicit.scenario == "accurate" and explicit.used["requirements_from"] == "explicit"


def test_a_battery_threshold_comes_first() -> None:
    config = hot_config(TemperatureRule(80.0, scenario="balanced"),
                        battery=(BatteryRule(0.2, scenario="frugal"),
                                 BatteryRule(0.5, requirements=requirements(accuracy=1.0))))
    policy = Policy(config)
    assert policy.decide(Environment(battery=0.1, temperature=90.0), "accurate").scenario == "frugal"
    # a battery threshold giving only requirements leaves the temperature's forced scenario in force
    assert policy.decide(Environment(battery=0.4, temperature=90.0), "accurate").scenario == "balanced"
    assert policy.decide(Environment(battery=0.4, temperature=20.0), "balanced").scenario == "accurate"


def test_a_temperature_is_validated_like_every_environment_value() -> None:
    assert Environment(temperature=-40).temperature == -40.0  # cold is a temperature too
    for bad in (-300.0, 1e4, float("nan"), "hot", True):
        with pytest.raises(InputError, match="temperature"):
            Environment(temperature=bad)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=-5.0, max_value=5.0, allow_nan=False), min_size=1, max_size=60))
def test_a_value_hovering_at_a_threshold_switches_at_most_once(offsets: list[float]) -> None:
    """Readings within the hysteresis band around a threshold (80 °C, margin 5) switch at most once: after the
    first reading above 80 the forced scenario holds, because every later one is at least 75."""
    switches: list[str] = []
    controller = PolicyController(hot_config(TemperatureRule(80.0, scenario="frugal"), hysteresis=5.0),
                                  switches.append)
    for offset in offsets:
        controller.update_environment({"temperature": 80.0 + offset})
    assert len(switches) <= 1
    assert switches == (["frugal"] if any(80.0 + offset > 80.0 for offset in offsets) else [])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=60.0, max_value=100.0, allow_nan=False), min_size=1, max_size=80))
def test_every_switch_needs_the_temperature_to_cross_the_whole_band(readings: list[float]) -> None:
    """Between two switches the temperature has gone from above 80 to below 75 or back: a switch storm is
    impossible, however the readings jump."""
    switches: list[tuple[int, str]] = []
    controller = PolicyController(hot_config(TemperatureRule(80.0, scenario="frugal"), hysteresis=5.0),
                                  lambda name: switches.append((len(seen), name)))
    seen: list[float] = []
    for reading in readings:
        seen.append(reading)
        controller.update_environment({"temperature": reading})
    for index, name in switches:
        reading = seen[index - 1]
        assert reading > 80.0 if name == "frugal" else reading < 75.0
    assert [name for _, name in switches] == ["frugal", "accurate"] * (len(switches) // 2) + \
        (["frugal"] if len(switches) % 2 else [])
