"""The scenario policy: each rule, the thesis ranking by hand on Table 5.4, hysteresis, measured values."""

from __future__ import annotations

import pytest

from sbrs.app import load_app_config
from sbrs.app.config import AppConfig, BatteryRule, DeclaredCharacteristics
from sbrs.control import Environment, Policy, check_requirements, rank_scenarios
from sbrs.errors import InputError
from tests.conftest import REPO
from tests.control.helpers import make_config, requirements, three_scenarios

# Thesis Table 5.4, Pascal VOC: accuracy (PR-AUC), fps, memory (MB), energy (J); apps/drone.yaml declares these.
TABLE_5_4 = {
    "accurate": (77.78, 15.41, 292.61, 0.384),
    "balanced": (76.28, 21.78, 210.69, 0.281),
    "efficient": (77.69, 20.26, 242.72, 0.291),
    "fast": (73.99, 59.27, 155.48, 0.101),
    "frugal": (72.85, 75.07, 130.21, 0.078),
}
# Thesis Table 5.2, Pascal VOC requirement sets r1..r5: (r_a, r_t, r_m, r_e).
TABLE_5_2 = {
    "r1": (1.0, 0.0, 0.0, 0.0),
    "r2": (0.7, 0.0, 0.3, 0.0),
    "r3": (0.6, 0.1, 0.0, 0.3),
    "r4": (0.5, 0.5, 0.0, 0.0),
    "r5": (0.1, 0.1, 0.4, 0.4),
}


def hand_scores(weights: tuple[float, float, float, float]) -> dict[str, float]:
    """score = r_a·norm(acc) + r_t·norm(fps) + r_m·(1 − norm(mem)) + r_e·(1 − norm(energy)), min-max over the table."""
    columns = list(zip(*TABLE_5_4.values(), strict=True))
    lows, highs = [min(column) for column in columns], [max(column) for column in columns]
    scores = {}
    for name, row in TABLE_5_4.items():
        norms = [(value - low) / (high - low) for value, low, high in zip(row, lows, highs, strict=True)]
        r_a, r_t, r_m, r_e = weights
        scores[name] = r_a * norms[0] + r_t * norms[1] + r_m * (1 - norms[2]) + r_e * (1 - norms[3])
    return scores


@pytest.fixture(scope="module")
def drone() -> AppConfig:
    return load_app_config(REPO / "apps" / "drone.yaml")


def explicit(weights: tuple[float, float, float, float]) -> Environment:
    return Environment(requirements=check_requirements(dict(zip(("accuracy", "throughput", "memory", "energy"),
                                                                weights, strict=True))))


def test_drone_declares_table_5_4(drone: AppConfig) -> None:
    for name, (accuracy, fps, memory, energy) in TABLE_5_4.items():
        declared = drone.scenario(name).characteristics
        assert (declared.accuracy, declared.fps, declared.memory_mb, declared.energy_j) == (accuracy, fps, memory, energy)


@pytest.mark.parametrize("requirement_set", list(TABLE_5_2))
def test_ranking_matches_hand_computation(drone: AppConfig, requirement_set: str) -> None:
    weights = TABLE_5_2[requirement_set]
    expected = hand_scores(weights)
    decision = Policy(drone).decide(explicit(weights), "accurate")
    assert decision.satisfied and decision.used["requirements_from"] == "explicit"
    for name, score in expected.items():
        assert decision.used["scores"][name] == pytest.approx(score, abs=1e-6)
    best = max(expected.values())
    winners = [name for name in TABLE_5_4 if abs(expected[name] - best) < 1e-9]
    assert decision.scenario == max(winners, key=lambda name: TABLE_5_4[name][0])


def test_ranking_winners_by_hand(drone: AppConfig) -> None:
    # Worked by hand from Table 5.4: r1 → accurate (1.0); r4: efficient 0.5·(4.84/4.93) + 0.5·(4.85/59.66) = 0.532
    # beats accurate = frugal = 0.5 and fast 0.483; r5 → frugal (0.1·0 + 0.1 + 0.4 + 0.4 = 0.9).
    policy = Policy(drone)
    assert policy.decide(explicit(TABLE_5_2["r1"]), "frugal").scenario == "accurate"
    decision = policy.decide(explicit(TABLE_5_2["r4"]), "accurate")
    assert decision.scenario == "efficient"
    assert decision.used["scores"]["efficient"] == pytest.approx(0.5 * 4.84 / 4.93 + 0.5 * 4.85 / 59.66)
    # accurate and frugal tie at 0.5: the more accurate one ranks first.
    assert decision.used["candidates"].index("accurate") < decision.used["candidates"].index("frugal")
    assert policy.decide(explicit(TABLE_5_2["r5"]), "accurate").scenario == "frugal"
    assert policy.decide(explicit(TABLE_5_2["r5"]), "accurate").used["scores"]["frugal"] == pytest.approx(0.9)


@pytest.mark.parametrize(("min_fps", "expected"), [(0, "accurate"), (15, "accurate"), (20, "efficient"),
                                                   (21, "balanced"), (22, "fast"), (60, "frugal")])
def test_min_fps_alone_picks_most_accurate_that_meets_it(drone: AppConfig, min_fps: float, expected: str) -> None:
    decision = Policy(drone).decide(Environment(min_fps=min_fps), "frugal")
    assert decision.scenario == expected and decision.satisfied
    assert decision.used["requirements_from"] == "default"
    assert all(TABLE_5_4[name][1] >= min_fps for name in decision.used["candidates"])


@pytest.mark.parametrize(("budget", "expected"), [(1.0, "accurate"), (0.291, "efficient"), (0.29, "balanced"),
                                                  (0.1, "frugal")])
def test_energy_budget_filters_candidates(drone: AppConfig, budget: float, expected: str) -> None:
    decision = Policy(drone).decide(Environment(energy_budget_j=budget), "accurate")
    assert decision.scenario == expected and decision.satisfied


def test_both_constraints(drone: AppConfig) -> None:
    decision = Policy(drone).decide(Environment(min_fps=21, energy_budget_j=0.2), "accurate")
    assert decision.scenario == "fast" and decision.used["candidates"] == ["fast", "frugal"]
    assert "min_fps 21 and energy_budget_j 0.2" in decision.reason


def test_unsatisfiable_min_fps_chooses_fastest(drone: AppConfig) -> None:
    decision = Policy(drone).decide(Environment(min_fps=100), "accurate")
    assert decision.scenario == "frugal" and not decision.satisfied
    assert "min_fps 100" in decision.reason and "fastest: frugal at 75.07 fps" in decision.reason


def test_unsatisfiable_energy_chooses_most_frugal_among_fast_enough(drone: AppConfig) -> None:
    decision = Policy(drone).decide(Environment(energy_budget_j=0.01), "accurate")
    assert decision.scenario == "frugal" and not decision.satisfied and "energy_budget_j 0.01" in decision.reason
    # balanced and frugal reach 25 fps, neither fits 0.05 J: the more frugal of those two.
    config = three_scenarios()
    decision = Policy(config).decide(Environment(min_fps=25, energy_budget_j=0.05), "accurate")
    assert decision.scenario == "frugal" and not decision.satisfied and "energy_budget_j 0.05" in decision.reason
    decision = Policy(config).decide(Environment(min_fps=25, energy_budget_j=0.15), "accurate")
    assert decision.scenario == "frugal" and decision.satisfied


def test_no_known_fps_keeps_current() -> None:
    config = make_config({"a": DeclaredCharacteristics(accuracy=1.0), "b": DeclaredCharacteristics(accuracy=2.0)})
    decision = Policy(config).decide(Environment(min_fps=10), "a")
    assert decision.scenario == "a" and not decision.satisfied and "no scenario has a known fps" in decision.reason


def test_unknown_fps_is_not_a_candidate_and_missing_values_score_zero() -> None:
    config = make_config({"mystery": DeclaredCharacteristics(accuracy=99.0),
                          "known": DeclaredCharacteristics(accuracy=50.0, fps=30.0),
                          "silent": DeclaredCharacteristics(fps=40.0)})
    policy = Policy(config)
    assert policy.decide(Environment(min_fps=10), "known").used["candidates"] == ["known", "silent"]
    decision = policy.decide(Environment(), "known")
    assert decision.scenario == "mystery"
    assert decision.used["scores"] == {"mystery": 1.0, "known": 0.0, "silent": 0.0}
    assert decision.used["candidates"] == ["mystery", "known", "silent"]  # tie: known has an accuracy, silent none


def test_ties_go_to_config_order() -> None:
    same = DeclaredCharacteristics(accuracy=70.0, fps=20.0)
    config = make_config({"first": same, "second": same, "third": same})
    assert Policy(config).decide(Environment(), "third").scenario == "first"


def test_measured_values_override_declared(drone: AppConfig) -> None:
    policy = Policy(drone)
    measured = {"accurate": {"fps": 35.0}, "fast": {"memory_mb": 400.0}}
    decision = policy.decide(Environment(min_fps=30), "frugal", measured)
    assert decision.scenario == "accurate"  # declared 15.41 fps would fail; measured 35 meets it
    assert decision.used["values"]["accurate"]["fps"] == "measured"
    assert decision.used["values"]["accurate"]["accuracy"] == "declared"
    assert decision.used["values"]["fast"]["memory_mb"] == "measured"
    assert decision.used["values"]["balanced"] == dict.fromkeys(("accuracy", "fps", "memory_mb", "energy_j"),
                                                                "declared")
    # With memory weighted, the measured (larger) memory of fast changes its score.
    weights = (0.0, 0.0, 1.0, 0.0)
    assert policy.decide(explicit(weights), "accurate").used["scores"]["fast"] > 0.8
    assert policy.decide(explicit(weights), "accurate", measured).used["scores"]["fast"] == 0.0
    # A measured value where nothing was declared is used too.
    config = make_config({"a": DeclaredCharacteristics(accuracy=80.0), "b": DeclaredCharacteristics(accuracy=70.0)})
    decision = Policy(config).decide(Environment(min_fps=10), "b", {"b": {"fps": 12.0}})
    assert decision.scenario == "b" and decision.satisfied and decision.used["values"]["b"]["fps"] == "measured"


def test_battery_threshold_forcing_a_scenario_wins() -> None:
    config = three_scenarios(battery=(BatteryRule(0.2, scenario="frugal"),))
    policy = Policy(config)
    environment = Environment(battery=0.1, requirements=requirements(accuracy=1.0))
    decision = policy.decide(environment, "accurate")
    assert decision.scenario == "frugal" and decision.satisfied and decision.used["battery_rule"] == 0.2
    assert "battery 0.1 is below 0.2: forces frugal" in decision.reason
    # Forced even when it misses a constraint; satisfied says so.
    decision = policy.decide(Environment(battery=0.1, min_fps=100), "accurate")
    assert decision.scenario == "frugal" and not decision.satisfied and "min_fps 100 not met" in decision.reason


def test_battery_threshold_requirements_and_explicit_override() -> None:
    config = three_scenarios(battery=(BatteryRule(0.5, requirements=requirements(accuracy=0.5, energy=0.5)),
                                      BatteryRule(0.2, requirements=requirements(energy=1.0))))
    policy = Policy(config)
    assert policy.decide(Environment(battery=0.9), "accurate").scenario == "accurate"
    decision = policy.decide(Environment(battery=0.4), "accurate")
    # accuracy 0.5·norm + energy 0.5·(1 − norm): accurate 0.5, balanced 0.25 + 0.333, frugal 0.5 → balanced.
    assert decision.scenario == "balanced" and decision.used["requirements_from"] == "battery below 0.5"
    decision = policy.decide(Environment(battery=0.1), "balanced")  # both active: the lowest governs
    assert decision.scenario == "frugal" and decision.used["requirements_from"] == "battery below 0.2"
    decision = policy.decide(Environment(battery=0.1, requirements=requirements(accuracy=1.0)), "frugal")
    assert decision.scenario == "accurate" and decision.used["requirements_from"] == "explicit"


def test_default_requirements() -> None:
    assert Policy(three_scenarios()).decide(Environment(), "frugal").scenario == "accurate"  # initial's: accuracy
    config = three_scenarios(default_requirements=requirements(throughput=1.0))
    decision = Policy(config).decide(Environment(), "accurate")
    assert decision.scenario == "frugal" and decision.used["requirements"]["throughput"] == 1.0


def _run(policy: Policy, environments: list[Environment], current: str,
         measured: list[dict[str, dict[str, float]]] | None = None) -> tuple[list[str], int]:
    """Feed a sequence of environments, switching as decided; the scenarios chosen and the number of switches."""
    chosen, switches = [], 0
    for index, environment in enumerate(environments):
        scenario = policy.decide(environment, current, measured[index] if measured else None).scenario
        switches += scenario != current
        current = scenario
        chosen.append(scenario)
    return chosen, switches


def test_battery_hovering_at_threshold_switches_once() -> None:
    levels = [0.3, *[0.19, 0.21, 0.199, 0.24, 0.2, 0.25] * 5]
    steady = Policy(three_scenarios(battery=(BatteryRule(0.2, scenario="frugal"),), battery_hysteresis=0.05))
    chosen, switches = _run(steady, [Environment(battery=level) for level in levels], "accurate")
    assert switches == 1 and chosen[0] == "accurate" and set(chosen[1:]) == {"frugal"}
    assert steady.active_thresholds == (0.2,)
    # It leaves only above below + hysteresis, and enters only below `below`.
    chosen, _ = _run(steady, [Environment(battery=level) for level in (0.251, 0.21, 0.199)], "frugal")
    assert chosen == ["accurate", "accurate", "frugal"]
    # Without hysteresis the same sequence flaps: the test above is meaningful.
    flappy = Policy(three_scenarios(battery=(BatteryRule(0.2, scenario="frugal"),), battery_hysteresis=0.0))
    _, switches = _run(flappy, [Environment(battery=level) for level in levels], "accurate")
    assert switches > 10


def test_a_threshold_held_by_its_hysteresis_says_so() -> None:
    """The reason said "battery 0.22 is below 0.2" while the hysteresis held the threshold: false, and it reached
    `sbrs env`, `sbrs status` and the switch records."""
    policy = Policy(three_scenarios(battery=(BatteryRule(0.2, scenario="frugal"),), battery_hysteresis=0.05))
    assert policy.decide(Environment(battery=0.19), "accurate").reason == "battery 0.19 is below 0.2: forces frugal"
    held = policy.decide(Environment(battery=0.22), "frugal")
    assert held.scenario == "frugal"
    assert held.reason == ("battery 0.22 has not risen above 0.25 since it fell below 0.2 (hysteresis): forces "
                           "frugal")


def test_fps_hovering_at_min_fps_switches_once() -> None:
    # balanced is measured at 29..31 fps while 30 are required: it keeps running (within 10%), no flapping.
    jitter = [{"balanced": {"fps": fps}} for fps in [31.0, *[29.0, 30.5, 27.5, 31.0] * 5]]
    environments = [Environment(min_fps=30)] * len(jitter)
    chosen, switches = _run(Policy(three_scenarios(fps_hysteresis=0.1)), environments, "accurate", jitter)
    assert switches == 1 and set(chosen) == {"balanced"}
    # The current scenario leaves once it falls below min_fps · (1 − hysteresis); a new one must meet min_fps.
    policy = Policy(three_scenarios(fps_hysteresis=0.1))
    assert policy.decide(environments[0], "balanced", {"balanced": {"fps": 26.9}}).scenario == "frugal"
    assert policy.decide(environments[0], "frugal", {"balanced": {"fps": 29.0}}).scenario == "frugal"
    _, switches = _run(Policy(three_scenarios(fps_hysteresis=0.0)), environments, "accurate", jitter)
    assert switches > 10


def test_min_fps_hovering_switches_once() -> None:
    environments = [Environment(min_fps=value) for value in [25.0, *[30.5, 29.5, 31.0, 28.0] * 5]]
    chosen, switches = _run(Policy(three_scenarios()), environments, "accurate")
    assert switches == 1 and set(chosen) == {"balanced"}


def test_decisions_are_deterministic(drone: AppConfig) -> None:
    environment = Environment(min_fps=20, energy_budget_j=0.3, requirements=requirements(accuracy=0.5, memory=0.5))
    first = Policy(drone).decide(environment, "accurate")
    assert all(Policy(drone).decide(environment, "accurate") == first for _ in range(3))


def test_rank_scenarios_equal_values_score_one() -> None:
    values = {"a": {"fps": 10.0}, "b": {"fps": 10.0}, "c": {}}
    assert rank_scenarios(requirements(throughput=1.0), values, ["a", "b", "c"]) == [("a", 1.0), ("b", 1.0),
                                                                                       ("c", 0.0)]


@pytest.mark.parametrize(("changes", "fragment"), [
    ({"battery": 1.5}, "battery: battery level must be in [0, 1], got 1.5"),
    ({"battery": 1.0000001}, "battery: battery level must be in [0, 1], got 1.0000001"),  # not "got 1"
    ({"min_fps": -1e-7}, "min_fps: must be ≥ 0, got -1e-07"),  # not "got -0"
    ({"battery": True}, "battery: expected a finite number, got True"),
    ({"min_fps": -1}, "min_fps: must be ≥ 0, got -1"),
    ({"min_fps": float("nan")}, "min_fps: expected a finite number"),
    ({"energy_budget_j": float("inf")}, "energy_budget_j: expected a finite number"),
    ({"energy_budget_j": "0.1"}, "energy_budget_j: expected a finite number, got '0.1'"),
    ({"requirements": {"accuracy": 0.5}}, "requirements: requirement weights must sum to 1, they sum to 0.5"),
    ({"requirements": {"speed": 1.0}}, "requirements: unknown key 'speed'"),
    ({"requirements": {"accuracy": 2.0, "energy": -1.0}}, "requirements.accuracy: weight must be a number in [0, 1]"),
    ({"requirements": [1, 0, 0, 0]}, "requirements: expected an object of weights"),
    ({"wind": 3.0}, "wind: unknown environment value"),
])
def test_environment_values_are_validated(changes: dict[str, object], fragment: str) -> None:
    with pytest.raises(InputError) as caught:
        Environment().updated(changes)
    assert fragment in str(caught.value)


def test_environment_update_and_clear() -> None:
    environment = Environment().updated({"battery": 0.5, "min_fps": 10})
    assert environment == Environment(battery=0.5, min_fps=10.0)
    assert environment.updated({"min_fps": None}) == Environment(battery=0.5)
    assert environment.to_dict() == {"battery": 0.5, "min_fps": 10.0, "energy_budget_j": None, "requirements": None,
                                      "temperature": None}
