"""From the SBRS MoC to the memory-planning problem: every tensor of every scenario, with its lifetime.

A supergraph *tensor* is one output of one supergraph layer, ``"{layer id}:{output index}"``; the supergraph
edges that read it (Equation 5.2) share its data, so scenarios that share an edge share the tensor. Each
scenario's execution sequence φ^s is one timeline; a tensor lives from the step that writes it to the last
step that reads it (Algorithm 8, lines 13-16). Scenarios never run at once, so timelines never conflict
(transition overlaps are added by the switching stage).
"""

from __future__ import annotations

from collections.abc import Mapping

from sbrs.memory import Block, Problem, lifetimes_from_schedule, merge_blocks
from sbrs.moc.model import Moc
from sbrs.model import CnnModel

Schedule = list[tuple[str, list[str], list[str]]]


def tensor_id(layer_id: str, output: int) -> str:
    return f"{layer_id}:{output}"


def scenario_schedule(moc: Moc, scenario: str, model: CnnModel) -> Schedule:
    """φ^s as ``[(supergraph layer, tensors read, tensors written), ...]`` in supergraph tensor ids."""
    edge_capture = moc.edge_capture[scenario]
    edges = {edge.id: edge for edge in moc.edges}
    reads: dict[str, list[str]] = {}
    writes: dict[str, list[str]] = {}
    for edge in model.edges:
        captured = edges[edge_capture[edge.name]]
        tensor = tensor_id(captured.src, captured.src_output)
        reads.setdefault(edge.dst, []).append(tensor)
        writes.setdefault(edge.src, [])
        if tensor not in writes[edge.src]:
            writes[edge.src].append(tensor)
    return [(step.layer_id, reads.get(step.scenario_layer, []), writes.get(step.scenario_layer, []))
            for step in moc.steps[scenario]]


def tensor_sizes(moc: Moc) -> dict[str, int]:
    return {tensor_id(edge.src, edge.src_output): edge.spec.nbytes for edge in moc.edges}


def memory_problem(moc: Moc, models: Mapping[str, CnnModel], scenarios: tuple[str, ...] | None = None,
                   alignment: int = 64) -> Problem:
    """Blocks of every supergraph tensor of ``scenarios`` (default all), in Algorithm 8's visiting order."""
    sizes = tensor_sizes(moc)
    blocks: list[Block] = []
    for scenario in scenarios or moc.scenarios:
        blocks += lifetimes_from_schedule(scenario, scenario_schedule(moc, scenario, models[scenario]), sizes)
    return Problem(tuple(merge_blocks(blocks)), alignment=alignment)
