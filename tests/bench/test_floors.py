"""The guard's verdict (``sbrs.bench.floors``, used by benchmarks/guard.py): figures against committed bounds,
checked by moving a bound past a figure, never by timing."""

from __future__ import annotations

import json

import pytest

from sbrs.bench.floors import Bound, Retry, bounds_from_runs, check, load_bounds, measured_again, read_bounds, verdict
from tests.conftest import REPO

FIGURES = {"tiny/throughput/full": 0.93, "drone/switch": 0.74, "tiny/first_output": 1.05}
FLOORS = {"figures": {"tiny/throughput/full": {"floor": 0.86}, "drone/switch": {"ceiling": 0.85},
                      "tiny/first_output": {"ceiling": 1.2}}}


def test_every_figure_within_its_bound_passes() -> None:
    checks = check(FIGURES, read_bounds(FLOORS))
    assert not any(c.failed for c in checks)
    assert verdict(checks) == "guard: 3 figures, all within their bounds"


def test_a_floor_raised_above_its_figure_fails_and_is_named() -> None:
    floors = json.loads(json.dumps(FLOORS))
    floors["figures"]["tiny/throughput/full"]["floor"] = 0.95  # the figure, 0.93, is now below it
    checks = check(FIGURES, read_bounds(floors))
    assert [c.name for c in checks if c.failed] == ["tiny/throughput/full"]
    assert verdict(checks) == "guard: FAILED: tiny/throughput/full 0.930 < floor 0.950"


def test_a_ceiling_lowered_under_its_figure_fails() -> None:
    floors = json.loads(json.dumps(FLOORS))
    floors["figures"]["drone/switch"]["ceiling"] = 0.70
    floors["figures"]["tiny/throughput/full"]["floor"] = 0.99
    failed = [c for c in check(FIGURES, read_bounds(floors)) if c.failed]
    assert [c.name for c in failed] == ["tiny/throughput/full", "drone/switch"]
    assert "drone/switch 0.740 > ceiling 0.700" in verdict(failed)


def test_a_bound_not_measured_fails_unless_out_of_the_runs_scope() -> None:
    figures = {name: value for name, value in FIGURES.items() if name != "drone/switch"}
    assert verdict(check(figures, read_bounds(FLOORS))).startswith("guard: FAILED: drone/switch not measured")
    scoped = check(figures, read_bounds(FLOORS), only="tiny/throughput,tiny/first_output")
    assert not any(c.failed for c in scoped)


def test_a_figure_without_a_bound_decides_nothing() -> None:
    checks = check({**FIGURES, "new/throughput/x": 0.1}, read_bounds(FLOORS))
    assert not any(c.failed for c in checks)
    assert verdict(checks) == "guard: 4 figures, all within their bounds (1 without one)"


def measuring(*values: dict[str, float]):
    """A stand-in for the guard's second measurement: each call returns the next of ``values``, and the names it
    was asked for are kept."""
    asked: list[list[str]] = []

    def measure(names: list[str]) -> dict[str, float]:
        asked.append(names)
        return values[len(asked) - 1]

    return measure, asked


def test_a_figure_beyond_its_bound_once_is_measured_again_and_the_second_measurement_decides() -> None:
    floors = json.loads(json.dumps(FLOORS))
    floors["figures"]["tiny/throughput/full"]["floor"] = 0.95  # the first figure, 0.93, is below it
    bounds = read_bounds(floors)
    first = check(FIGURES, bounds)
    measure, asked = measuring({"tiny/throughput/full": 0.97, "tiny/throughput/skip": 0.5})
    final, retries = measured_again(FIGURES, first, measure)
    assert asked == [["tiny/throughput/full"]]  # only the figure beyond its bound
    assert retries == [Retry("tiny/throughput/full", 0.93, 0.97)]
    assert final == {**FIGURES, "tiny/throughput/full": 0.97}  # figures not asked for keep their first values
    checks = check(final, bounds)
    assert not any(c.failed for c in checks)
    assert verdict(checks, retries) == ("guard: 3 figures, all within their bounds (tiny/throughput/full within "
                                        "it when measured again: 0.930, then 0.970)")


def test_a_figure_beyond_its_bound_twice_fails_with_both_values() -> None:
    floors = json.loads(json.dumps(FLOORS))
    floors["figures"]["drone/switch"]["ceiling"] = 0.70  # the first figure, 0.74, is over it
    bounds = read_bounds(floors)
    measure, _ = measuring({"drone/switch": 0.72})
    final, retries = measured_again(FIGURES, check(FIGURES, bounds), measure)
    checks = check(final, bounds)
    assert [c.name for c in checks if c.failed] == ["drone/switch"]
    assert verdict(checks, retries) == ("guard: FAILED: drone/switch 0.720 > ceiling 0.700 (measured twice: "
                                        "0.740, then 0.720)")


def test_a_second_measurement_that_does_not_give_the_figure_leaves_the_first_to_decide() -> None:
    floors = json.loads(json.dumps(FLOORS))
    floors["figures"]["tiny/first_output"]["ceiling"] = 1.0
    bounds = read_bounds(floors)
    measure, _ = measuring({})
    final, retries = measured_again(FIGURES, check(FIGURES, bounds), measure)
    assert final == FIGURES and retries == [Retry("tiny/first_output", 1.05, None)]
    assert verdict(check(final, bounds), retries).endswith("(measured twice: 1.050, then not measured)")


def test_nothing_is_measured_again_where_every_figure_holds_or_was_never_measured() -> None:
    figures = {name: value for name, value in FIGURES.items() if name != "drone/switch"}
    measure, asked = measuring()
    final, retries = measured_again(figures, check(figures, read_bounds(FLOORS)), measure)
    assert asked == [] and retries == [] and final == figures  # drone/switch fails as not measured, unretried


def test_bounds_from_runs_sit_a_margin_beyond_the_worse_run() -> None:
    runs = [{"a/throughput/x": 1.0, "a/switch": 0.8}, {"a/throughput/x": 0.9, "a/switch": 0.7, "only/once": 1.0}]
    bounds = bounds_from_runs(runs, {"a/throughput/x": "floor", "a/switch": "ceiling"}, margin=0.1)
    assert bounds == {"a/throughput/x": {"floor": 0.81}, "a/switch": {"ceiling": 0.88}}
    assert all(Bound(kind, value).holds(run[name]) for run in runs for name, entry in bounds.items()
               for kind, value in entry.items())


def test_an_entry_needs_one_kind_of_bound() -> None:
    with pytest.raises(ValueError, match="'x'"):
        read_bounds({"figures": {"x": {"floor": 1.0, "ceiling": 2.0}}})


def test_the_committed_floors_read_and_name_known_kinds() -> None:
    bounds = load_bounds(REPO / "benchmarks" / "floors.json")
    assert bounds  # the guard runs against committed bounds
    for name, bound in bounds.items():
        assert bound.kind == ("floor" if "/throughput" in name else "ceiling"), name
        assert 0 < bound.value < 10, name


def test_the_guard_can_measure_again_every_committed_figure() -> None:
    """``benchmarks/guard.py`` measures a figure beyond its bound again through the measurement that gave it: each
    committed figure names one the guard makes."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("guard", REPO / "benchmarks" / "guard.py")
    assert spec is not None and spec.loader is not None
    guard = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(guard)
    for name in load_bounds(REPO / "benchmarks" / "floors.json"):
        part, target = guard.measurement_of(name)
        assert part in ("throughput", "switch", "startup"), name
        assert target in guard.APPS or target.removeprefix("model/") in guard.MODELS, name
        assert part == "throughput" or not target.startswith("model/"), name
    assert guard.measurement_of("model/shufflenet_v2_x0_5-qoperator/throughput") == (
        "throughput", "model/shufflenet_v2_x0_5-qoperator")
    assert guard.measurement_of("tiny/pss") == ("startup", "tiny")
