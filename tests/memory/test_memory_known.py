"""Hand-written memory problems whose optimum is known (plan == lower bound), and the planners' contracts."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from sbrs.memory import (
    ArenaPlan,
    Block,
    Live,
    MemorySummary,
    Problem,
    ProblemError,
    ReusePlan,
    align_up,
    buffers_reuse,
    check_plan,
    check_reuse,
    exact_arena,
    greedy_arena,
    lifetimes_from_schedule,
    lower_bound,
    merge_blocks,
    naive_bytes,
    peak_by_timeline,
    plan_arena,
    reuse_layout,
    summarize,
)
from tests.memory.memory_cases import (
    chain,
    diamond,
    five_cycle,
    mobilenet_v2,
    residual,
    thesis_app,
    two_scenarios_shared_stem,
)

KNOWN = {
    "chain": chain,
    "diamond": diamond,
    "residual": residual,
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v2_x0.5": lambda: mobilenet_v2(0.5),
    "two_scenarios_shared_input": two_scenarios_shared_stem,
}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_arena_meets_lower_bound(name: str) -> None:
    problem = KNOWN[name]()
    plan = plan_arena(problem)
    assert check_plan(problem, plan) == []
    assert plan.arena_bytes == lower_bound(problem)  # Arm NN style: plan == min possible size
    assert plan.optimal
    reuse = buffers_reuse(problem, aligned=True)
    assert check_reuse(problem, reuse) == []
    assert lower_bound(problem) <= plan.arena_bytes <= reuse.total <= naive_bytes(problem, aligned=True)


def test_chain_bound_is_largest_adjacent_pair() -> None:
    sizes = (602112, 1605632, 802816, 401408, 4000)
    assert lower_bound(chain(sizes=sizes)) == max(a + b for a, b in itertools.pairwise(sizes))


def test_residual_keeps_skip_tensor_alive() -> None:
    problem = residual()
    x = problem.block("x").lives[0]
    assert (x.first, x.last) == (0, 3)
    n = 64 * 56 * 56 * 4
    # at every step its input and output are live; with the skip tensor x that makes 3 tensors
    assert lower_bound(problem) == 3 * n
    assert plan_arena(problem).arena_bytes == 3 * n


def test_baseline_greedy_can_miss_bound_where_plan_arena_does_not() -> None:
    problem = mobilenet_v2(0.5)
    base = greedy_arena(problem)  # TFLite Micro / ExecuTorch: size order, best fit
    best = plan_arena(problem)
    assert base.arena_bytes > lower_bound(problem) == best.arena_bytes
    assert best.strategy != base.strategy


def test_five_cycle_optimum_exceeds_lower_bound() -> None:
    """Blocks live on several timelines: not an interval graph; every clique has 2 blocks, optimum 3."""
    problem = five_cycle()
    assert lower_bound(problem) == 128
    plan = plan_arena(problem)
    assert plan.arena_bytes == 192 and plan.optimal
    assert check_plan(problem, plan) == []
    exact, finished = exact_arena(problem)
    assert finished and exact is not None and exact.arena_bytes == 192


def test_concurrent_group_bound_counts_shared_blocks_once() -> None:
    """CNN^2 of the thesis alone: P2 and P3 pipelined; the crossing edges (live on both) count once."""
    cnn2 = thesis_app()
    cnn2 = cnn2.with_blocks(b for b in cnn2.blocks if b.id.endswith("^2") or "^2(" in b.id)
    peaks = peak_by_timeline(cnn2)
    assert peaks == {"P2": 3072 + 2 * 6272, "P3": 2 * 6272 + 10}
    # shared {e23(1), e23(2)} + private peak of P2 {e12} + private peak of P3 {e34}; not the sum of peaks
    assert lower_bound(cnn2) == 3072 + 2 * 6272 + 10
    plan = plan_arena(cnn2)
    assert plan.arena_bytes == lower_bound(cnn2) and check_plan(cnn2, plan) == []


def test_concurrency_makes_disjoint_intervals_conflict() -> None:
    a = Block("a", 100, (Live("p", 0, 0),))
    b = Block("b", 100, (Live("q", 5, 5),))
    sequential = Problem((a, b), alignment=1)
    parallel = Problem((a, b), frozenset({frozenset({"p", "q"})}), alignment=1)
    assert not sequential.conflicts("a", "b") and parallel.conflicts("a", "b")
    assert plan_arena(sequential).arena_bytes == 100 and lower_bound(sequential) == 100
    assert plan_arena(parallel).arena_bytes == 200 and lower_bound(parallel) == 200
    assert buffers_reuse(sequential).total == 100 and buffers_reuse(parallel).total == 200


def test_lifetimes_from_schedule_rules() -> None:
    steps = [("l0", ["in"], ["a"]), ("l1", ["a"], ["b", "side"]), ("l2", ["a", "b"], ["c"]), ("l3", ["c"], [])]
    sizes = {"in": 1, "a": 2, "b": 3, "c": 4, "side": 5}
    blocks = {b.id: b for b in lifetimes_from_schedule("t", steps, sizes, keep=["b"])}
    spans = {k: (v.lives[0].first, v.lives[0].last) for k, v in blocks.items()}
    assert spans == {"in": (0, 0), "a": (0, 2), "b": (1, 3), "side": (1, 3), "c": (2, 3)}
    assert list(blocks) == ["in", "a", "b", "side", "c"]
    with pytest.raises(ProblemError):
        lifetimes_from_schedule("t", [("l0", [], ["x"]), ("l1", [], ["x"])], {"x": 1})
    with pytest.raises(ProblemError):
        lifetimes_from_schedule("t", [("l0", ["x"], ["y"]), ("l1", [], ["x"])], {"x": 1, "y": 1})
    with pytest.raises(ProblemError):
        lifetimes_from_schedule("t", [("l0", [], ["x"])], {})


def test_merge_blocks_joins_lives_and_checks_sizes() -> None:
    merged = merge_blocks([Block("x", 8, (Live("a", 0, 1),)), Block("x", 8, (Live("b", 2, 3),))])
    assert merged == [Block("x", 8, (Live("a", 0, 1), Live("b", 2, 3)))]
    with pytest.raises(ProblemError):
        merge_blocks([Block("x", 8, (Live("a", 0, 1),)), Block("x", 9, (Live("b", 2, 3),))])


def test_problem_validation() -> None:
    with pytest.raises(ProblemError):
        Live("t", 3, 2)
    with pytest.raises(ProblemError):
        Block("x", -1, (Live("t", 0, 0),))
    with pytest.raises(ProblemError):
        Block("x", 1, ())
    with pytest.raises(ProblemError):
        Problem((Block("x", 1, (Live("t", 0, 0),)), Block("x", 1, (Live("t", 0, 0),))))
    with pytest.raises(ProblemError):
        Problem((), alignment=0)


def test_empty_and_zero_size_blocks() -> None:
    empty = Problem(())
    assert plan_arena(empty).arena_bytes == 0 and lower_bound(empty) == 0 and buffers_reuse(empty).total == 0
    zero = Problem((Block("z", 0, (Live("t", 0, 5),)), Block("y", 10, (Live("t", 0, 5),))))
    plan = plan_arena(zero)
    assert plan.arena_bytes == 64 and check_plan(zero, plan) == []


def test_json_round_trips() -> None:
    problem = thesis_app()
    assert Problem.from_json(problem.to_json()) == problem
    plan = plan_arena(problem)
    assert ArenaPlan.from_json(plan.to_json()) == plan
    reuse = buffers_reuse(problem)
    assert ReusePlan.from_json(reuse.to_json()) == reuse
    summary = summarize(problem)
    assert MemorySummary.from_dict(summary.to_dict()) == summary
    assert dataclasses.asdict(reuse)["total"] == 24586


def test_results_are_deterministic() -> None:
    for make in (two_scenarios_shared_stem, thesis_app, five_cycle):
        first = (plan_arena(make()).to_json(), buffers_reuse(make()).to_json())
        for _ in range(3):
            assert (plan_arena(make()).to_json(), buffers_reuse(make()).to_json()) == first


def test_reuse_layout_is_valid_and_sums_aligned_buffers() -> None:
    problem = mobilenet_v2()
    reuse = buffers_reuse(problem, aligned=True)
    layout = reuse_layout(problem, reuse)
    assert check_plan(problem, layout) == [] and layout.arena_bytes == reuse.total


def test_checker_rejects_corrupted_arena_plans() -> None:
    problem = mobilenet_v2()
    plan = plan_arena(problem)
    offsets = plan.as_dict()
    a, b = "t1", "t2"  # conv output and first depthwise output: live together
    assert problem.conflicts(a, b)

    def corrupt(new: dict[str, int], arena: int | None = None) -> list[str]:
        bad = dataclasses.replace(plan, offsets=tuple(new.items()),
                                  arena_bytes=plan.arena_bytes if arena is None else arena)
        return sorted({v.kind for v in check_plan(problem, bad)})

    assert "overlap" in corrupt({**offsets, a: offsets[b]})
    assert corrupt({k: v for k, v in offsets.items() if k != a}) == ["missing"]
    assert "misaligned" in corrupt({**offsets, a: offsets[a] + 8})
    assert corrupt(offsets, arena=plan.arena_bytes - 64) == ["outside"]
    assert corrupt({**offsets, "ghost": 0}) == ["unknown"]
    assert corrupt({**offsets, a: -64}) == ["negative"]
    assert check_plan(problem, dataclasses.replace(plan, alignment=32))[0].kind == "alignment"


def test_checker_rejects_corrupted_reuse_plans() -> None:
    problem = thesis_app()
    plan = buffers_reuse(problem)
    b1, b2, b3, b4 = plan.buffers

    def kinds(buffers: tuple, total: int | None = None) -> list[str]:
        bad = ReusePlan(buffers, sum(b.size for b in buffers) if total is None else total)
        return sorted({v.kind for v in check_reuse(problem, bad)})

    # e34^2 (P3) into B1 with e12^2 (P2): pipeline-parallel partitions conflict
    moved = dataclasses.replace(b1, members=(*b1.members, "e34^2"))
    assert kinds((moved, b2, b3)) == ["conflict"]
    assert kinds((b1, b2, b3)) == ["missing"]
    assert kinds((b1, b2, b3, b4, b4)) == ["duplicate"]
    assert kinds((dataclasses.replace(b1, size=3072), b2, b3, b4)) == ["undersized"]
    assert kinds((b1, b2, b3, b4), total=1) == ["total"]


def test_alignment_rounds_sizes() -> None:
    problem = Problem((Block("a", 1, (Live("t", 0, 1),)), Block("b", 65, (Live("t", 1, 2),))), alignment=64)
    assert align_up(65, 64) == 128 and lower_bound(problem) == 192 and lower_bound(problem, aligned=False) == 66
    plan = plan_arena(problem)
    assert plan.arena_bytes == 192 and all(off % 64 == 0 for _, off in plan.offsets)
