"""Property tests: random DAG schedules and random multi-timeline problems with shared blocks."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbrs.memory import (
    ArenaPlan,
    Block,
    Live,
    Problem,
    ReusePlan,
    SharedBuffer,
    buffers_reuse,
    check_plan,
    check_reuse,
    lifetimes_from_schedule,
    lives_conflict,
    lower_bound,
    plan_arena,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def dag_problems(draw: st.DrawFn) -> Problem:
    """One timeline: a random CNN-like DAG in topological order (each layer reads 1-2 recent tensors)."""
    n = draw(st.integers(1, 30))
    tensors = ["in"]
    sizes = {"in": draw(st.integers(1, 5000))}
    steps = []
    for k in range(n):
        window = tensors[-draw(st.integers(1, 5)):]
        inputs = draw(st.lists(st.sampled_from(window), min_size=1, max_size=2, unique=True))
        out = f"t{k}"
        sizes[out] = draw(st.integers(1, 5000))
        steps.append((f"l{k}", inputs, [out]))
        tensors.append(out)
    keep = draw(st.lists(st.sampled_from(tensors), max_size=2))
    alignment = draw(st.sampled_from([1, 8, 64]))
    return Problem(tuple(lifetimes_from_schedule("s", steps, sizes, keep=keep)), alignment=alignment)


@st.composite
def multi_problems(draw: st.DrawFn, max_blocks: int = 16) -> Problem:
    """Several timelines, blocks live on one to three of them, random pipeline-parallel sets J."""
    timelines = [f"p{k}" for k in range(draw(st.integers(1, 4)))]
    blocks = []
    for k in range(draw(st.integers(1, max_blocks))):
        lives = tuple(
            Live(t, first, first + length)
            for t, first, length in draw(st.lists(
                st.tuples(st.sampled_from(timelines), st.integers(0, 8), st.integers(0, 4)), min_size=1, max_size=3))
        )
        size = draw(st.one_of(st.integers(1, 3000), st.sampled_from([0, 64, 128, 256])))
        blocks.append(Block(f"b{k}", size, lives))
    groups = draw(st.lists(st.sets(st.sampled_from(timelines), min_size=2), max_size=2)) if len(timelines) > 1 else []
    alignment = draw(st.sampled_from([1, 16, 64]))
    return Problem(tuple(blocks), frozenset(frozenset(g) for g in groups), alignment)


def _assert_plans_valid(problem: Problem) -> ArenaPlan:
    raw = buffers_reuse(problem)
    aligned = buffers_reuse(problem, aligned=True)
    assert check_reuse(problem, raw) == []
    assert check_reuse(problem, aligned) == []
    assert lower_bound(problem, aligned=False) <= raw.total
    plan = plan_arena(problem)
    assert check_plan(problem, plan) == []
    bound = lower_bound(problem)
    assert bound <= plan.arena_bytes <= aligned.total
    assert plan.arena_bytes % problem.alignment == 0
    if plan.arena_bytes == bound:
        assert plan.optimal
    return plan


def _assert_corruptions_rejected(problem: Problem, plan: ArenaPlan) -> None:
    offsets = plan.as_dict()
    ids = [b.id for b in problem.blocks]

    def kinds(new: dict[str, int]) -> set[str]:
        return {v.kind for v in check_plan(problem, dataclasses.replace(plan, offsets=tuple(new.items())))}

    assert "missing" in kinds({k: v for k, v in offsets.items() if k != ids[0]})
    if problem.alignment > 1:
        assert "misaligned" in kinds({**offsets, ids[0]: offsets[ids[0]] + 1})
    for a, b in itertools.combinations(ids, 2):
        if problem.conflicts(a, b) and problem.block(a).size > 0 and problem.block(b).size > 0:
            assert "overlap" in kinds({**offsets, a: offsets[b]})
            break


@SETTINGS
@given(dag_problems())
def test_dag_schedules(problem: Problem) -> None:
    _assert_corruptions_rejected(problem, _assert_plans_valid(problem))


@SETTINGS
@given(multi_problems())
def test_multi_timeline_problems(problem: Problem) -> None:
    _assert_corruptions_rejected(problem, _assert_plans_valid(problem))


@SETTINGS
@given(multi_problems())
def test_precomputed_conflicts_match_definition(problem: Problem) -> None:
    for a in problem.blocks:
        for b in problem.blocks:
            assert problem.conflicts(a.id, b.id) == lives_conflict(a, b, problem.concurrent)


def _brute_force_optimum(problem: Problem) -> int:
    """min over all orders of stacking each block on the conflicting blocks before it (exact optimum)."""
    sizes = [-(-b.size // problem.alignment) * problem.alignment for b in problem.blocks]
    best = sum(sizes)
    n = len(sizes)
    for perm in itertools.permutations(range(n)):
        ends: dict[int, int] = {}
        for i in perm:
            ends[i] = max((ends[j] for j in ends if problem.conflicts(problem.blocks[i].id, problem.blocks[j].id)),
                          default=0) + sizes[i]
        best = min(best, max(ends.values(), default=0))
    return best


@settings(max_examples=80, deadline=None)
@given(multi_problems(max_blocks=6))
def test_small_problems_are_solved_optimally(problem: Problem) -> None:
    plan = plan_arena(problem)
    assert plan.optimal
    assert plan.arena_bytes == _brute_force_optimum(problem)


@settings(max_examples=30, deadline=None)
@given(multi_problems())
def test_deterministic(problem: Problem) -> None:
    again = Problem.from_json(problem.to_json())
    assert plan_arena(problem) == plan_arena(again)
    assert buffers_reuse(problem) == buffers_reuse(again)


def _plain_overlaps(problem: Problem, offsets: dict[str, int]) -> set[tuple[str, ...]]:
    """The definition itself: every pair of blocks sharing a byte that ``lives_conflict`` says conflict."""
    align = problem.alignment
    extent = {b.id: (offsets[b.id], offsets[b.id] + -(-b.size // align) * align) for b in problem.blocks
              if b.size > 0}
    return {tuple(sorted((a.id, b.id))) for a, b in itertools.combinations(problem.blocks, 2)
            if a.id in extent and b.id in extent and extent[a.id][0] < extent[b.id][1]
            and extent[b.id][0] < extent[a.id][1] and lives_conflict(a, b, problem.concurrent)}


# every pair of blocks moved together costs O(blocks^4) definition checks an example (14 s of the fast tier):
# the fast tier moves eight drawn pairs an example, the slow tier every pair
@pytest.mark.parametrize("moved_pairs", ["drawn", pytest.param("every", marks=pytest.mark.slow)])
@SETTINGS
@given(problem=multi_problems(), data=st.data())
def test_fast_plan_checker_matches_the_pairwise_definition(moved_pairs: str, problem: Problem,
                                                           data: st.DataObject) -> None:
    """check_plan's sweeps find exactly the overlapping conflicting pairs, on plans valid or not: the planner's
    valid plan; that plan with pairs of blocks moved together above the arena (one pair sharing bytes: the
    hardest case for a sweep that looks for any), with drawn blocks moved onto others and half a block further
    (a few pairs); offsets drawn on a coarse grid (many)."""
    align = problem.alignment
    valid = plan_arena(problem)
    top = valid.arena_bytes
    valid = valid.as_dict()
    plans = [valid, {b.id: data.draw(st.integers(0, 6)) * 256 * align for b in problem.blocks}]
    pairs = list(itertools.combinations(problem.ids, 2))
    if moved_pairs == "drawn" and len(pairs) > 8:
        pairs = data.draw(st.lists(st.sampled_from(pairs), min_size=8, max_size=8, unique=True))
    for a, b in pairs:
        plans.append({**valid, a: top, b: top})
    for _ in range(6):
        moved, onto = data.draw(st.sampled_from(problem.blocks)), data.draw(st.sampled_from(problem.blocks))
        plans.append({**valid, moved.id: valid[onto.id]})
        plans.append({**valid, moved.id: valid[onto.id] + onto.size // 2 // align * align})
    for offsets in plans:
        arena = max((o + -(-problem.block(b).size // align) * align for b, o in offsets.items()), default=0)
        plan = ArenaPlan(tuple(offsets.items()), arena, align, "drawn")
        found = [v.subjects for v in check_plan(problem, plan) if v.kind == "overlap"]
        assert len(found) == len(set(found)) and set(found) == _plain_overlaps(problem, offsets)


@SETTINGS
@given(multi_problems(), st.data())
def test_fast_reuse_checker_matches_the_pairwise_definition(problem: Problem, data: st.DataObject) -> None:
    """check_reuse finds exactly the conflicting pairs that share a buffer, on random assignments."""
    homes = {b.id: data.draw(st.integers(0, 3)) for b in problem.blocks}
    buffers = tuple(SharedBuffer(f"B{k}", max((problem.block(b).size for b in homes if homes[b] == k), default=0),
                                 tuple(b for b in problem.ids if homes[b] == k)) for k in range(4))
    reuse = ReusePlan(buffers, sum(buf.size for buf in buffers))
    found = {v.subjects for v in check_reuse(problem, reuse) if v.kind == "conflict"}
    want = {(f"B{homes[a.id]}", a.id, b.id) for a, b in itertools.combinations(problem.blocks, 2)
            if homes[a.id] == homes[b.id] and lives_conflict(a, b, problem.concurrent)}
    assert found == want
