"""Receptive-field tiling (``sbrs.reduction.tiles``) replayed in numpy on random chains: every member of a
tiled group computes its rows from what the firing holds, with its own band pads, and the result is the
whole inference; a group keeps no line buffer of its internal tensors and pays them as per-firing
transients."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sbrs.errors import InputError
from sbrs.memory import check_plan, lower_bound, plan_arena
from sbrs.model.cnn import INPUT_OP, OUTPUT_OP, CnnModel
from sbrs.reduction import CsdfGraph, Schedule, check_schedule, cnn_to_csdf, reduced_problem, schedule_csdf
from sbrs.reduction.rows import is_row_local, layer_height, row_bytes
from tests.reduction.chains import Ring, Step, chain_model, chains, reference, window_op


def step_layers(steps: list[Step], i: int) -> list[str]:
    return [f"L{i}_conv", f"L{i}_add"] if steps[i][0] == "res" else [f"L{i}"]


def compute(layer_op: str, layer, inputs: dict[str, tuple[np.ndarray, tuple[int, int]]]) -> np.ndarray:  # type: ignore[no-untyped-def]
    if layer_op == "Add":
        a, b = (inputs[t][0] for t in layer.inputs)
        return a + b
    rows, (top, bottom) = inputs[layer.inputs[0]]
    kind = "conv" if layer_op == "Conv" else "pool"
    return window_op(kind, rows, layer.kernel[0], layer.stride[0], layer.dilation[0], top, bottom)


def replay(model: CnnModel, graph: CsdfGraph, schedule: Schedule, x: np.ndarray) -> np.ndarray:
    """Run ``schedule`` on rings of the scheduled sizes; a tiled firing computes its members in numpy."""
    rings = {b.tensor: Ring(max(b.rows, 1)) for b in schedule.buffers}
    plans = {p.layer: p for p in graph.layers}
    result = None
    for actor, phase in schedule.firings:
        k = phase - 1
        tile = graph.tile(actor)
        if tile is not None:
            held: dict[str, tuple[int, np.ndarray]] = {}
            for item in tile.plan.inputs:
                lo, hi = item.rows[k]
                held[item.tensor] = (lo, rings[item.tensor].read(lo, hi))
            for name in tile.layers:
                layer = model.layer(name)
                member = tile.member(name)
                inputs = {}
                for item in member.inputs:
                    lo, hi = item.rows[k]
                    base, values = held[item.tensor]
                    assert base <= lo and hi - base <= len(values), f"{name} reads rows the firing lacks"
                    inputs[item.tensor] = (values[lo - base:hi - base], item.pads[k])
                o0, o1 = member.out_rows[k]
                band = compute(layer.op, layer, inputs)
                assert len(band) == o1 - o0
                held[layer.outputs[0]] = (o0, band)
            o0, o1 = tile.plan.out_rows[k]
            base, values = held[tile.exit]
            assert (base, len(values)) == (o0, o1 - o0)
            rings[tile.exit].write(o0, values)
            continue
        layer = model.layer(actor)
        plan = plans[actor]
        o0, o1 = plan.out_rows[k]
        if layer.op == INPUT_OP:
            rings["x"].write(o0, x[o0:o1])
            continue
        inputs = {item.tensor: (rings[item.tensor].read(*item.rows[k]), item.pads[k]) for item in plan.inputs}
        if layer.op == OUTPUT_OP:
            result = inputs[layer.inputs[0]][0]
            continue
        rings[layer.outputs[0]].write(o0, compute(layer.op, layer, inputs))
    assert result is not None
    return result


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])  # crops, short groups
@given(chains(max_steps=5), st.data())
def test_tiled_chains_compute_the_whole_inference(case: tuple[int, list], data: st.DataObject) -> None:
    height, steps = case
    assume(all(min(step[-2:]) >= 0 for step in steps if step[0] != "res"))  # tiles take no crops
    model = chain_model(height, steps)
    bands = {layer.name: data.draw(st.integers(1, layer_height(layer)), label=layer.name)
             for layer in model.layers}
    start = data.draw(st.integers(0, len(steps) - 1), label="start")
    stop = data.draw(st.integers(start + 1, len(steps)), label="stop")
    group = [name for i in range(start, stop) for name in step_layers(steps, i)]
    assume(len(group) > 1 and all(is_row_local(model, model.layer(n)) for n in group))
    exit_height = layer_height(model.layer(group[-1]))
    band = data.draw(st.integers(1, exit_height), label="tile band")
    graph = cnn_to_csdf(model, bands, tiles=[(group, band)])
    schedule = schedule_csdf(graph)
    assert check_schedule(graph, schedule) == []
    internal = {model.layer(n).outputs[0] for n in group[:-1]}
    assert not internal & {b.tensor for b in schedule.buffers}  # no line buffer inside the group
    firing_steps = {step for step, (actor, _) in enumerate(schedule.firings) if actor == group[-1]}
    assert {step for step, _ in schedule.transients} == firing_steps  # one transient per firing of the group
    for _, nbytes in schedule.transients:
        assert nbytes <= sum(row_bytes(model.tensors[t]) * model.tensors[t].shape[2] for t in internal)
    x = np.random.default_rng(height).standard_normal(height)
    np.testing.assert_allclose(replay(model, graph, schedule, x), reference(height, steps, x), rtol=0, atol=1e-9)
    problem = reduced_problem(schedule, alignment=8)
    arena = plan_arena(problem)
    assert check_plan(problem, arena) == [] and arena.arena_bytes >= lower_bound(problem)


def test_a_group_read_from_outside_is_refused() -> None:
    steps: list[Step] = [("conv", 3, 1, 1, 1, 1), ("res", 3, 1)]
    model = chain_model(12, steps)
    try:
        cnn_to_csdf(model, {}, tiles=[(["L1_conv"], 2), (["L0", "L1_conv"], 2)])
    except InputError as error:
        assert "two tile groups" in str(error) or "outside" in str(error)
    else:  # pragma: no cover
        raise AssertionError("expected an InputError")
