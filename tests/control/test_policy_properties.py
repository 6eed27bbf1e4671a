"""Properties of the policy over random sequences of environments (``sbrs.control.policy``): thresholds become
active and are released as documented (no flapping inside the hysteresis), a governing forced rule always wins,
decisions are deterministic, and every comparison a reason states is true of the numbers it prints."""

from __future__ import annotations

import re
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from sbrs.app.config import AppConfig, BatteryRule, TemperatureRule
from sbrs.control import Environment, Policy
from tests.control.helpers import requirements, three_scenarios

NAMES = ("accurate", "balanced", "frugal")
#: the characteristics three_scenarios declares, to aim values at them
FPS = (10.0, 30.0, 60.0)
ENERGY_J = (0.4, 0.2, 0.1)
#: how far from a threshold a value lands: within ``:g``'s six digits of it, or plainly apart
NUDGES = (-1e-3, -1e-7, -1e-8, 0.0, 1e-8, 1e-7, 1e-3)


def near(values: tuple[float, ...], low: float, high: float) -> st.SearchStrategy[float]:
    """A value at, just beside or anywhere around one of ``values``, within [low, high]."""
    nudged = st.builds(lambda value, nudge: min(max(value + nudge, low), high), st.sampled_from(values),
                       st.sampled_from(NUDGES))
    return st.one_of(nudged, st.floats(low, high, allow_nan=False))


@st.composite
def configs(draw: st.DrawFn) -> AppConfig:
    """three_scenarios with up to three battery and three temperature thresholds, each forcing or ranking."""
    belows = draw(st.lists(st.sampled_from((0.1, 0.2, 0.25, 0.5, 0.8)), max_size=3, unique=True))
    aboves = draw(st.lists(st.sampled_from((40.0, 60.0, 65.0, 80.0)), max_size=3, unique=True))
    battery = tuple(BatteryRule(below, scenario=draw(st.sampled_from(NAMES))) if draw(st.booleans())
                    else BatteryRule(below, requirements=requirements(energy=1.0)) for below in belows)
    hot = tuple(TemperatureRule(above, scenario=draw(st.sampled_from(NAMES))) if draw(st.booleans())
                else TemperatureRule(above, requirements=requirements(throughput=1.0)) for above in aboves)
    config = three_scenarios(battery=battery, battery_hysteresis=draw(st.sampled_from((0.0, 0.05, 0.1))))
    return replace(config, policy=replace(config.policy, temperature=tuple(sorted(hot, key=lambda r: -r.above)),
                                          temperature_hysteresis=draw(st.sampled_from((0.0, 5.0)))))


def environments(config: AppConfig) -> st.SearchStrategy[list[Environment]]:
    belows = tuple(rule.below for rule in config.policy.battery) or (0.5,)
    aboves = tuple(rule.above for rule in config.policy.temperature) or (60.0,)
    releases = tuple(above - config.policy.temperature_hysteresis for above in aboves)
    environment = st.builds(
        Environment,
        battery=st.one_of(st.none(), near(belows + tuple(b + config.policy.battery_hysteresis for b in belows), 0, 1)),
        temperature=st.one_of(st.none(), near(aboves + releases, -40.0, 120.0)),
        min_fps=st.one_of(st.none(), near(FPS, 0.0, 100.0)),
        energy_budget_j=st.one_of(st.none(), near(ENERGY_J, 0.0, 1.0)))
    return st.lists(environment, min_size=1, max_size=25)


NUMBER = r"(-?\d[\d.e+-]*)"
#: each comparison a reason states, and what must hold of its two numbers as printed
CLAIMS = (
    (re.compile(rf"battery {NUMBER} is below {NUMBER}:"), lambda value, bound: value < bound),
    (re.compile(rf"temperature {NUMBER} °C is above {NUMBER}:"), lambda value, bound: value > bound),
    (re.compile(rf"battery {NUMBER} has not risen above {NUMBER} "), lambda value, bound: value <= bound),
    (re.compile(rf"temperature {NUMBER} °C has not fallen below {NUMBER} "), lambda value, bound: value >= bound),
    (re.compile(rf"min_fps {NUMBER} not met: fps {NUMBER}"), lambda bound, value: value < bound),
    (re.compile(rf"energy_budget_j {NUMBER} not met: energy_j {NUMBER}"), lambda bound, value: value > bound),
    (re.compile(rf"no scenario meets min_fps {NUMBER} \(fastest: \S+ at {NUMBER} fps"), lambda bound, value: value < bound),
    (re.compile(rf"no scenario meets energy_budget_j {NUMBER}(?: with min_fps)? \(most frugal: \S+ at {NUMBER} J"),
     lambda bound, value: value > bound),
)


def expected_active(rules: tuple[BatteryRule, ...], battery: float | None, before: set[float],
                    hysteresis: float) -> set[float]:
    """The battery thresholds active after ``battery``, as APP_YAML.md states it: active below ``below``, and kept
    until the battery is above ``below`` plus the hysteresis."""
    if battery is None:
        return set()
    return {rule.below for rule in rules
            if battery < rule.below or (rule.below in before and battery <= rule.below + hysteresis)}


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_sequence_of_environments_decides_as_documented(data: st.DataObject) -> None:
    config = data.draw(configs())
    sequence = data.draw(environments(config))
    policy, twin = Policy(config), Policy(config)
    current, active = config.initial, set()
    for environment in sequence:
        decision = policy.decide(environment, current)
        assert twin.decide(environment, current) == decision  # deterministic, state included
        active = expected_active(config.policy.battery, environment.battery, active,
                                 config.policy.battery_hysteresis)
        assert set(policy.active_thresholds) == active
        governing = next((rule for rule in config.policy.battery if rule.below == min(active, default=None)), None)
        if governing is not None and governing.scenario is not None:
            assert decision.scenario == governing.scenario, decision.reason
        for pattern, holds in CLAIMS:
            for first, second in pattern.findall(decision.reason):
                assert holds(float(first), float(second)), decision.reason
        current = decision.scenario


def test_a_reason_prints_the_digits_that_make_it_true() -> None:
    """Six digits (``:g``) made a battery of 0.19999999 of full (energy_now/energy_full) read "battery 0.2 is below
    0.2", and a measured 59.9999999 fps "min_fps 60 not met: fps 60"."""
    policy = Policy(three_scenarios(battery=(BatteryRule(0.2, scenario="frugal"),)))
    assert policy.decide(Environment(battery=0.19999999), "accurate").reason == \
        "battery 0.19999999 is below 0.2: forces frugal"
    assert policy.decide(Environment(battery=0.1, min_fps=60), "accurate", {"frugal": {"fps": 59.9999999}}).reason == \
        "battery 0.1 is below 0.2: forces frugal (min_fps 60 not met: fps 59.9999999)"
    assert Policy(three_scenarios()).decide(Environment(min_fps=60.0000001), "accurate").reason == \
        "no scenario meets min_fps 60.0000001 (fastest: frugal at 60 fps)"
    config = three_scenarios()
    hot = replace(config, policy=replace(config.policy, temperature=(TemperatureRule(80.0, scenario="frugal"),)))
    assert Policy(hot).decide(Environment(temperature=80.00000001), "accurate").reason == \
        "temperature 80.00000001 °C is above 80: forces frugal"
    # values that :g tells apart keep its short form
    assert policy.decide(Environment(battery=0.19), "accurate").reason == "battery 0.19 is below 0.2: forces frugal"
