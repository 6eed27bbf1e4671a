"""Partitions (cut tensors): each partition's line buffers live only while it runs (thesis Algorithm 10).

Algorithm 10 derives the minimum buffers of every partition alone (line 5, SDF3; here the simulation of
``schedule_csdf``) and then reuses buffers across partitions (line 9, Algorithm 8). Its bound is therefore
the largest, over partitions, of what one partition needs alone: its line buffers plus the whole tensors at
its boundaries. The tests build each partition of a chain as a chain of its own, schedule it alone, and
check that the partitioned schedule of the whole chain peaks at exactly that bound, that the arena reaches
it, that no two partitions' line buffers are ever live at once, and that the schedule computes the chain.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbrs.errors import InputError
from sbrs.memory import check_plan, lower_bound, plan_arena
from sbrs.reduction import check_schedule, cnn_to_csdf, reduced_problem, schedule_csdf
from sbrs.reduction.rows import layer_height
from tests.reduction.chains import Step, chain_model, chains, conv_out, reference, replay

ALIGN = 8  # one float64 row: block sizes stay the rows the schedule counts


def outputs_of(steps: list[Step]) -> list[str]:
    """The tensor each step of a chain produces (a residual block's sum)."""
    return [f"L{i}_add" if step[0] == "res" else f"L{i}" for i, step in enumerate(steps)]


def heights_of(height: int, steps: list[Step]) -> list[int]:
    """Input height of every step, and the output height last."""
    result = [height]
    for step in steps:
        h = result[-1]
        if step[0] == "conv":
            h = conv_out(h, *step[1:])
        elif step[0] == "pool":
            _, k, s, pt, pb = step
            h = conv_out(h, k, s, 1, pt, pb)
        result.append(h)
    return result


def sub_bands(bands: dict[str, int], start: int, stop: int, streamed: bool) -> dict[str, int]:
    """The bands of steps ``[start, stop)`` renamed for the chain of those steps alone."""
    result = {"in": bands["in"]} if streamed else {}
    for i in range(start, stop):
        for suffix in ("", "_conv", "_add"):
            if f"L{i}{suffix}" in bands:
                result[f"L{i - start}{suffix}"] = bands[f"L{i}{suffix}"]
    return result


def algorithm_10_bound(height: int, steps: list[Step], bands: dict[str, int], cuts: tuple[str, ...]) -> int:
    """Largest peak of one partition scheduled alone (its input and output held whole at a cut)."""
    names = outputs_of(steps)
    ends = [*sorted(names.index(t) + 1 for t in cuts), len(steps)]
    heights = heights_of(height, steps)
    peaks, start = [], 0
    for stop in ends:
        part = chain_model(heights[start], steps[start:stop])
        schedule = schedule_csdf(cnn_to_csdf(part, sub_bands(bands, start, stop, start == 0)))
        peaks.append(lower_bound(reduced_problem(schedule, alignment=ALIGN)))
        start = stop
    return max(peaks)


def check_partitioned(height: int, steps: list[Step], bands: dict[str, int], cut_steps: list[int]) -> None:
    model = chain_model(height, steps)
    names = outputs_of(steps)
    graph = cnn_to_csdf(model, bands, cuts=[names[i] for i in cut_steps])
    schedule = schedule_csdf(graph)
    assert check_schedule(graph, schedule) == []
    x = np.random.default_rng(height).standard_normal(height)
    np.testing.assert_allclose(replay(model, graph, schedule, x), reference(height, steps, x), rtol=0, atol=1e-9)
    problem = reduced_problem(schedule, alignment=ALIGN)
    peak = lower_bound(problem)
    assert peak == algorithm_10_bound(height, steps, bands, graph.cuts)
    arena = plan_arena(problem)
    assert check_plan(problem, arena) == []
    assert arena.arena_bytes == peak
    # line buffers of different partitions are never live at once (cut tensors span two partitions)
    part_of: dict[str, int] = {}
    index = 0
    for i, t in enumerate(names):
        part_of[t] = index
        if steps[i][0] == "res":
            part_of[f"L{i}_conv"] = index
        if t in graph.cuts:
            index += 1
    inner = [b for b in schedule.buffers if b.tensor in part_of and b.tensor not in graph.cuts]
    for a in inner:
        for b in inner:
            if part_of[a.tensor] < part_of[b.tensor]:
                assert a.last_step < b.first_step, (a.tensor, b.tensor)


def test_a_cut_frees_the_first_partitions_line_buffers() -> None:
    """Three 3-row convolutions on 48 rows, three stride-2 ones down to 6 rows, three more at 6 rows, all in
    1-row bands. Uncut, every line buffer is live at once. Cut at the 6-row tensor, the first partition's
    buffers are freed before the second starts, and the peak is the first partition's."""
    steps: list[Step] = [("conv", 3, 1, 1, 1, 1)] * 3 + [("conv", 3, 2, 1, 1, 1)] * 3 + [("conv", 3, 1, 1, 1, 1)] * 3
    model = chain_model(48, steps)
    bands = {layer.name: 1 for layer in model.layers}
    uncut = lower_bound(reduced_problem(schedule_csdf(cnn_to_csdf(model, bands)), alignment=ALIGN))
    cut = lower_bound(reduced_problem(schedule_csdf(cnn_to_csdf(model, bands, cuts=["L5"])), alignment=ALIGN))
    assert cut < uncut
    assert uncut == 8 * (9 * 3 + 6)  # nine 3-row line buffers (input included) and the 6-row output
    assert cut == 8 * (6 * 3 + 6)  # the first partition: six line buffers and the cut tensor whole
    check_partitioned(48, steps, bands, [5])


def test_cuts_that_change_nothing_are_dropped_and_unknown_ones_refused() -> None:
    steps: list[Step] = [("conv", 3, 1, 1, 1, 1)] * 3
    model = chain_model(12, steps)
    assert cnn_to_csdf(model, {}, cuts=["L0"]).cuts == ()  # nothing runs by parts
    assert cnn_to_csdf(model, {"L0": 1, "L1": 12}, cuts=["L0"]).cuts == ()  # the consumer is whole anyway
    assert cnn_to_csdf(model, {"L0": 1, "L1": 1}, cuts=["L0"]).cuts == ("L0",)
    with pytest.raises(InputError, match="nope"):
        cnn_to_csdf(model, {}, cuts=["nope"])


@settings(max_examples=80, deadline=None)
@given(chains(max_steps=5), st.data())
def test_partitioned_schedule_peaks_at_the_algorithm_10_bound(case: tuple[int, list], data: st.DataObject) -> None:
    """Random chains, bands and cuts: the peak equals the largest partition scheduled alone, the arena
    reaches it, partitions' line buffers never overlap in time, and the result is the whole inference."""
    height, steps = case
    model = chain_model(height, steps)
    bands = {layer.name: data.draw(st.integers(1, layer_height(layer)), label=layer.name)
             for layer in model.layers}
    cut_steps = data.draw(st.lists(st.integers(0, len(steps) - 1), unique=True, max_size=3), label="cuts")
    check_partitioned(height, steps, bands, sorted(cut_steps))
