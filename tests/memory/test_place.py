"""``sbrs.memory.placement``: the one entry point that plans an arena, verifies it and carries its lower bound, and
the chart of a plan. Every stage that needs an arena goes through it (read from the source)."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

import sbrs.memory.placement as placing
from sbrs.memory import ArenaError, ArenaPlan, check_plan, lower_bound, place, plan_arena
from tests.memory.memory_cases import mobilenet_v2, thesis_app, two_scenarios_shared_stem

PACKAGE = Path(__file__).resolve().parents[2] / "sbrs"


@pytest.mark.parametrize("case", [thesis_app, mobilenet_v2, two_scenarios_shared_stem])
def test_place_plans_verifies_and_bounds(case) -> None:  # type: ignore[no-untyped-def]
    problem = case()
    placed = place(problem, what="a test")
    assert check_plan(problem, placed) == []
    assert placed.lower_bound_bytes == lower_bound(problem) <= placed.arena_bytes
    assert replace(placed, lower_bound_bytes=None) == plan_arena(problem)
    assert ArenaPlan.from_dict(placed.to_dict()) == placed


def test_a_broken_plan_is_an_error_naming_the_arena(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = mobilenet_v2()

    def overlapping(problem, **options):  # type: ignore[no-untyped-def]
        plan = plan_arena(problem, **options)
        return replace(plan, offsets=tuple((name, 0) for name, _ in plan.offsets))

    monkeypatch.setattr(placing, "plan_arena", overlapping)
    with pytest.raises(ArenaError, match="the arena of the test tensors is unsafe"):
        place(problem, what="the test tensors")


def test_the_chart_draws_every_step_within_the_arena() -> None:
    problem = two_scenarios_shared_stem()
    placed = place(problem, what="a test")
    chart = placed.chart(problem, width=40, title="two scenarios")
    lines = chart.splitlines()
    assert lines[0].startswith(f"two scenarios: {placed.arena_bytes} bytes") and "lower bound" in lines[0]
    steps = [line for line in lines[1:-1]]
    assert len(steps) == sum(max(live.last for b in problem.blocks for live in b.lives if live.timeline == t) + 1
                             for t in problem.timelines)
    assert all(line.count("|") == 2 and len(line.split("|")[1]) == 40 for line in steps)
    peak = max(int(line.rsplit("|", 1)[1]) for line in steps)
    assert peak == placed.lower_bound_bytes  # the most bytes live at one step: the bound, on these timelines
    assert lines[-1].startswith("blocks: a=")


def test_every_arena_of_the_package_is_placed_through_place() -> None:
    """Outside ``sbrs.memory`` nothing calls the planner or the checker itself, except the search's fitness
    evaluation, which needs only a size (``sbrs.reduction.ga``)."""
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "memory" and path.parent.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                    "plan_arena", "check_plan", "greedy_arena", "exact_arena"):
                calls.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert [call for call in calls if not call.startswith("reduction/ga.py:")] == []
    assert len(calls) == 1
