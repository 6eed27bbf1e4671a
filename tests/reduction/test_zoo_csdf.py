"""CSDF consistency on every zoo CNN (small resolutions): maximal reduction and no reduction."""

from __future__ import annotations

import pytest

from sbrs import zoo
from sbrs.memory import check_plan, plan_arena
from sbrs.reduction import (
    check_schedule,
    cnn_to_csdf,
    full_bands,
    is_row_local,
    maximal_bands,
    reduced_problem,
    reducible_regions,
    schedule_csdf,
)
from tests.conftest import zoo_model

ZOO = [entry.name for entry in zoo.list_models()]


@pytest.mark.parametrize("name", ZOO)
@pytest.mark.parametrize("stream_input", [False, True])
def test_maximal_reduction_is_consistent(name: str, stream_input: bool) -> None:
    model = zoo_model(name)
    graph = cnn_to_csdf(model, maximal_bands(model, stream_input=stream_input))
    for channel in graph.channels:  # tokens produced = consumed per frame
        assert channel.consistent, channel.id
        assert len(channel.production) == graph.actor(channel.src).phases
        assert len(channel.consumption) == graph.actor(channel.dst).phases
    schedule = schedule_csdf(graph)  # raises on deadlock or rows left over
    assert len(schedule.firings) == sum(a.phases for a in graph.actors)
    assert check_schedule(graph, schedule) == []
    for buffer in schedule.buffers:
        assert 0 < buffer.rows <= buffer.full_rows, buffer.tensor
    assert schedule.buffer_bytes < schedule.full_bytes
    problem = reduced_problem(schedule)
    assert check_plan(problem, plan_arena(problem)) == []
    assert {b.id for b in problem.blocks} == {f"{model.name}/{b.tensor}" for b in schedule.buffers}
    per_edge = reduced_problem(schedule, per_edge=True)  # one block per FIFO channel (the thesis' B_k per e_ij)
    assert len(per_edge.blocks) == len({(e.src, e.dst, e.tensor) for e in model.edges})
    assert max(b.size for b in per_edge.blocks) <= max(b.size for b in problem.blocks)
    assert check_plan(per_edge, plan_arena(per_edge)) == []


@pytest.mark.parametrize("name", ZOO)
def test_whole_height_bands_keep_whole_tensors(name: str) -> None:
    model = zoo_model(name)
    graph = cnn_to_csdf(model, full_bands(model))
    assert all(a.phases == 1 for a in graph.actors)
    assert not any(c.self_loop for c in graph.channels)
    schedule = schedule_csdf(graph)
    assert all(b.rows == b.full_rows for b in schedule.buffers)
    tensors = {e.tensor for e in model.edges}
    assert {b.tensor for b in schedule.buffers} == tensors
    assert schedule.full_bytes == sum(model.tensors[t].nbytes for t in tensors)


@pytest.mark.parametrize("name", ZOO)
def test_regions_partition_row_local_layers_and_are_convex(name: str) -> None:
    model = zoo_model(name)
    regions = reducible_regions(model)
    members = [layer for region in regions for layer in region.layers]
    assert len(members) == len(set(members))
    assert set(members) == {layer.name for layer in model.layers
                            if is_row_local(model, layer) and layer.op != "Input"}
    successors: dict[str, set[str]] = {}
    for edge in model.edges:
        successors.setdefault(edge.src, set()).add(edge.dst)
    for region in regions:
        inside = set(region.layers)
        # layers reachable from the region by a path that leaves it must not be in it
        frontier = [d for layer in inside for d in successors.get(layer, ()) if d not in inside]
        seen: set[str] = set()
        while frontier:
            node = frontier.pop()
            if node in seen:
                continue
            seen.add(node)
            assert node not in inside, f"region {region.index} of {name} is not convex at {node}"
            frontier.extend(successors.get(node, ()))
        assert region.entries and region.exits


def test_efficientnet_se_gate_is_a_broadcast_entry() -> None:
    regions = reducible_regions(zoo_model("efficientnet_b0"))
    assert sum(1 for r in regions if r.broadcast) >= 10  # one per SE block


def test_mobilenet_v2_is_one_region_and_reduces_several_fold() -> None:
    model = zoo_model("mobilenet_v2")
    regions = reducible_regions(model)
    assert len(regions) == 1 and regions[0].entries == ("input",)
    schedule = schedule_csdf(cnn_to_csdf(model, maximal_bands(model)))
    assert schedule.buffer_bytes * 4 < schedule.full_bytes
