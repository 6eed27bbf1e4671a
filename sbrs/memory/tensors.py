"""From the SBRS MoC to the memory-planning problem: every tensor of every scenario, with its lifetime.

A supergraph *tensor* is one output of one supergraph layer, ``"{layer id}:{output index}"``; the supergraph
edges that read it (Equation 5.2) share its data, so scenarios that share an edge share the tensor. Each
scenario's execution sequence φ^s is one timeline; a tensor lives from the step that writes it to the last
step that reads it (Algorithm 8, lines 13-16). Scenarios never run at once, so timelines never conflict
(transition overlaps are added by the switching stage).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sbrs.memory.problem import Block, Problem, lifetimes_from_schedule, merge_blocks
from sbrs.moc.model import Moc, SuperEdge
from sbrs.model import CnnModel

Schedule = list[tuple[str, list[str], list[str]]]


def tensor_id(layer_id: str, output: int, shape: Sequence[int] | None = None) -> str:
    """``"{layer}:{output}"``; an output whose size differs between the scenarios running the layer (the same
    layer at several input sizes, ``sized_outputs``) is one tensor per size: ``"{layer}:{output}@{shape}"``."""
    return f"{layer_id}:{output}" + ("" if shape is None else "@" + "x".join(str(extent) for extent in shape))


def sized_outputs(moc: Moc) -> frozenset[tuple[str, int]]:
    """(layer id, output) of every supergraph layer output whose edges carry tensors of more than one size."""
    specs: dict[tuple[str, int], set[tuple[int, ...]]] = {}
    for edge in moc.edges:
        specs.setdefault((edge.src, edge.src_output), set()).add(tuple(edge.spec.shape))
    return frozenset(output for output, shapes in specs.items() if len(shapes) > 1)


def edge_tensor_id(edge: SuperEdge, sized: frozenset[tuple[str, int]]) -> str:
    """The supergraph tensor a supergraph edge reads."""
    sized_here = (edge.src, edge.src_output) in sized
    return tensor_id(edge.src, edge.src_output, edge.spec.shape if sized_here else None)


def scenario_schedule(moc: Moc, scenario: str, model: CnnModel,
                      sized: frozenset[tuple[str, int]] | None = None) -> Schedule:
    """φ^s as ``[(supergraph layer, tensors read, tensors written), ...]`` in supergraph tensor ids."""
    sized = sized_outputs(moc) if sized is None else sized
    edge_capture = moc.edge_capture[scenario]
    edges = {edge.id: edge for edge in moc.edges}
    reads: dict[str, list[str]] = {}
    writes: dict[str, list[str]] = {}
    for edge in model.edges:
        captured = edges[edge_capture[edge.name]]
        tensor = edge_tensor_id(captured, sized)
        reads.setdefault(edge.dst, []).append(tensor)
        writes.setdefault(edge.src, [])
        if tensor not in writes[edge.src]:
            writes[edge.src].append(tensor)
    return [(step.layer_id, reads.get(step.scenario_layer, []), writes.get(step.scenario_layer, []))
            for step in moc.steps[scenario]]


def tensor_sizes(moc: Moc) -> dict[str, int]:
    sized = sized_outputs(moc)
    return {edge_tensor_id(edge, sized): edge.spec.nbytes for edge in moc.edges}


def memory_problem(moc: Moc, models: Mapping[str, CnnModel], scenarios: tuple[str, ...] | None = None,
                   alignment: int = 64) -> Problem:
    """Blocks of every supergraph tensor of ``scenarios`` (default all), in Algorithm 8's visiting order."""
    sizes = tensor_sizes(moc)
    sized = sized_outputs(moc)
    blocks: list[Block] = []
    for scenario in scenarios or moc.scenarios:
        blocks += lifetimes_from_schedule(scenario, scenario_schedule(moc, scenario, models[scenario], sized), sizes)
    return Problem(tuple(merge_blocks(blocks)), alignment=alignment)
