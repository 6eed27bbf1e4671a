"""The guard's verdict (``sbrs.bench.floors``, used by benchmarks/guard.py): figures against committed bounds,
checked by moving a bound past a figure, never by timing."""

from __future__ import annotations

import json

import pytest

from sbrs.bench.floors import Bound, bounds_from_runs, check, load_bounds, read_bounds, verdict
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
