"""Thesis Section 4.4-4.5 on the CNN of Figure 4.1: Algorithm 3, Algorithm 4 and Table 4.1 reproduced exactly."""

from __future__ import annotations

import json

import pytest

from sbrs.memory import buffers_reuse, check_plan, plan_arena
from sbrs.reduction import (
    TABLE_4_1,
    TABLE_4_1_BANDS,
    bands_from_phases,
    check_schedule,
    cnn_to_csdf,
    derive_phases,
    figure_4_1_model,
    reduced_problem,
    schedule_csdf,
)

EDGES = ("x", "y2", "y3", "y4")  # B_1, B_2, B_4, B_5 of Table 4.1


def test_algorithm_3_phases_of_figure_4_1() -> None:
    """Section 4.5.1: Algorithm 3 derives Φ = {32, 16, 4, 1, 1}."""
    phases = derive_phases(figure_4_1_model())
    assert list(phases.values()) == [32, 16, 4, 1, 1]


@pytest.mark.parametrize("example", sorted(TABLE_4_1))
def test_table_4_1_buffers(example: str) -> None:
    """Table 4.1, Columns 8-12: the buffer of every edge and the total, in bytes (one-byte tokens)."""
    model = figure_4_1_model()
    schedule = schedule_csdf(cnn_to_csdf(model, TABLE_4_1_BANDS[example]))
    sizes = tuple(schedule.buffer(t).bytes for t in EDGES)
    assert (*sizes, sum(sizes)) == TABLE_4_1[example]
    assert schedule.buffer_bytes == TABLE_4_1[example][-1]


def test_table_4_1_phases_per_example() -> None:
    """Table 4.1, Columns 2-6: the number of phases of l_1..l_5 in every example."""
    model = figure_4_1_model()
    expected = {"Ex1": [1, 1, 1, 1, 1], "Ex2": [2, 2, 1, 1, 1], "Ex3": [32, 16, 1, 1, 1], "Ex4": [32, 16, 4, 1, 1]}
    for example, phases in expected.items():
        assert list(cnn_to_csdf(model, TABLE_4_1_BANDS[example]).phases.values()) == phases


def test_ex4_from_algorithm_3() -> None:
    """Ex4 is exactly Algorithm 3's Φ: 978 bytes."""
    model = figure_4_1_model()
    schedule = schedule_csdf(cnn_to_csdf(model, bands_from_phases(model, derive_phases(model))))
    assert schedule.buffer_bytes == 978


def test_section_4_5_2_sequences() -> None:
    """Section 4.5.2: V_23 = [384, 192, 192, 256], U_33 = [3*128, 0], V_33 = [0, 3*128], u_34(p) = 12."""
    graph = cnn_to_csdf(figure_4_1_model(), TABLE_4_1_BANDS["Ex4"])
    c23 = graph.channel("l2", "l3")
    assert c23.consumption_elements == (384, 192, 192, 256)
    assert c23.consumption == (6, 3, 3, 4)  # rows: 1 cropped + 5 used, 3, 3, 3 + 1 cropped
    assert c23.production == (1,) * 16
    c33 = graph.channel("l3", "l3")
    assert c33.self_loop
    assert c33.production_elements == (128, 128, 128, 0)
    assert c33.consumption_elements == (0, 128, 128, 128)
    assert graph.channel("l3", "l4").production_elements == (12, 12, 12, 12)
    assert graph.channel("l3", "l4").consumption_elements == (48,)
    # Algorithm 4, lines 11-13: self-loops exactly where the kernel is taller than the stride (l_2 and l_3)
    assert sorted(c.dst for c in graph.channels if c.self_loop) == ["l2", "l3"]
    c22 = graph.channel("l2", "l2")
    assert c22.production[0] == 16 and c22.consumption[0] == 0  # 17 - 1 rows reused
    assert graph.channel("l1", "l2").consumption[:2] == (17, 1)
    assert all(c.consistent for c in graph.channels)


def _expand(order: list[tuple[str, int, int]]) -> list[tuple[str, int]]:
    return [(actor, k) for actor, first, last in order for k in range(first, last + 1)]


def _interleave(a: str, a0: int, b: str, b0: int, count: int) -> list[tuple[str, int]]:
    """Table 4.1's ``[l_a(a0..), l_b(b0..)]``: a phase of ``a`` followed by a phase of ``b``, ``count`` times."""
    return [item for i in range(count) for item in ((a, a0 + i), (b, b0 + i))]


def test_ex4_schedule_is_table_4_1_column_7() -> None:
    """Column 7 of Ex4: l1(1-17), l21, [l1(18-22), l2(2-6)], l31, [l1(23-25), l2(7-9)], l32, ..., l41, l51."""
    graph = cnn_to_csdf(figure_4_1_model(), TABLE_4_1_BANDS["Ex4"])
    schedule = schedule_csdf(graph)
    expected = _expand([("l1", 1, 17), ("l2", 1, 1)])
    expected += [*_interleave("l1", 18, "l2", 2, 5), ("l3", 1)]
    expected += [*_interleave("l1", 23, "l2", 7, 3), ("l3", 2)]
    expected += [*_interleave("l1", 26, "l2", 10, 3), ("l3", 3)]
    expected += [*_interleave("l1", 29, "l2", 13, 4), ("l3", 4), ("l4", 1), ("l5", 1)]
    assert list(schedule.firings) == expected
    assert len(schedule.firings) == 54  # "the CNN inference is executed in 54 computational steps"
    assert check_schedule(graph, schedule) == []


def test_ex3_and_ex2_step_counts() -> None:
    """Ex3 takes 51 steps, Ex2 7 steps, Ex1 5 steps (Section 4.4)."""
    model = figure_4_1_model()
    counts = {ex: len(schedule_csdf(cnn_to_csdf(model, TABLE_4_1_BANDS[ex])).firings) for ex in ("Ex1", "Ex2", "Ex3")}
    assert counts == {"Ex1": 5, "Ex2": 7, "Ex3": 51}


def test_ex4_channel_sizes_and_line_buffer() -> None:
    """c_23 alone peaks at 6 rows, c_33 at 2; the line buffer B_2 keeps the overlap inside: 6 rows = 384 bytes."""
    schedule = schedule_csdf(cnn_to_csdf(figure_4_1_model(), TABLE_4_1_BANDS["Ex4"]))
    assert schedule.channel("l2->l3:y2").rows == 6
    assert schedule.channel("l3->l3:y2").rows == 2
    assert schedule.channel("l2->l3:y2").edge_rows == 6
    assert schedule.buffer("y2").rows == 6 and schedule.buffer("y2").bytes == 384
    assert schedule.buffer("x").rows == 17


def test_ex4_phase_plan_crops_at_first_and_last_phase() -> None:
    """Figure 4.3: l_3 reads 6, 5, 5, 6 rows; the first and last include a cropped row."""
    plan = cnn_to_csdf(figure_4_1_model(), TABLE_4_1_BANDS["Ex4"]).layer("l3")
    item = plan.input("y2")
    assert item.rows == ((1, 6), (4, 9), (7, 12), (10, 15))  # rows used (crop excluded)
    assert item.consumed == (6, 3, 3, 4)  # rows taken from c_23 (crop included)
    assert item.kept == (2, 2, 2, 0)
    assert item.pads == ((0, 0),) * 4
    assert plan.out_rows == ((0, 1), (1, 2), (2, 3), (3, 4))


def test_reduced_problem_arena_and_json() -> None:
    """Algorithm 10, lines 8-9: the reduced buffers in an arena never larger than their sum; JSON round trip."""
    model = figure_4_1_model()
    schedule = schedule_csdf(cnn_to_csdf(model, TABLE_4_1_BANDS["Ex4"]))
    problem = reduced_problem(schedule, alignment=1)
    assert sum(b.size for b in problem.blocks) == 978
    arena = plan_arena(problem)
    assert check_plan(problem, arena) == []
    assert arena.arena_bytes <= 978
    assert buffers_reuse(problem).total <= 978
    data = json.loads(schedule.to_json())
    assert data["buffer_bytes"] == 978 and len(data["firings"]) == 54
    json.loads(cnn_to_csdf(model, TABLE_4_1_BANDS["Ex4"]).to_json())
