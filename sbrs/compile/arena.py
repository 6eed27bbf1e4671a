"""The one arena of boundary tensors: lifetimes per scenario, offsets from ``sbrs.memory``, checked at build.

Every tensor that crosses a unit boundary (the frame input and graph outputs included) gets a fixed offset in
one preallocated, 64-byte-aligned buffer. The problem given to ``sbrs.memory``: one timeline per scenario
whose steps are the unit calls of a frame; a tensor is live from the call that produces it to the last call
that reads it, the frame input from call 0 (it is copied in before the first call), graph outputs until the
last call (they are copied out after it). An output a unit writes but that the scenario never reads still
occupies its slot during that call. Timelines of different scenarios never overlap: a switch happens between
frames (transitions that overlap old and new steps will add their own lives here).

Tensors inside a unit are not in this arena: ONNX Runtime allocates them itself, so ``arena_bytes`` covers
boundary tensors only.
"""

from __future__ import annotations

from collections.abc import Mapping

from sbrs.compile.units import BoundaryTensor, UnitLayout, UnitPlan
from sbrs.errors import SbrsRuntimeError
from sbrs.memory import Block, Live, Problem, merge_blocks, place

ARENA_ALIGNMENT = 64


def arena_problem(layout: UnitLayout, alignment: int = ARENA_ALIGNMENT, *, resume: bool = False) -> Problem:
    """The memory-planning problem of ``layout``'s boundary tensors (module docstring).

    ``resume`` (``runtime.on_switch: resume``, beyond the thesis): for every ordered pair o → n whose sequences
    share a prefix of P units (``sbrs.compile.layout.shared_prefixes``), the tensors n's units after the prefix
    read that the prefix produced (or the frame input) are also live on o's timeline from their production to
    o's last step, so that no later step of o overwrites them: a frame stopped anywhere on o continues on n
    after the prefix (``sbrs.compile.transitions.ResumeTable``)."""
    units = {unit.id: unit for unit in layout.units}
    blocks: list[Block] = []
    for scenario, calls in layout.sequences.items():
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for tensor in layout.inputs[scenario].values():
            first[tensor] = last[tensor] = 0
        for call, unit_id in enumerate(calls):
            unit = units[unit_id]
            for tensor in unit.input_tensors[scenario]:
                if tensor not in first:
                    raise SbrsRuntimeError(f"scenario {scenario}: unit {unit_id} reads {tensor} before it is produced")
                last[tensor] = call
            for tensor in unit.outputs:
                first[tensor] = last[tensor] = call
        end = len(calls) - 1
        for tensor in layout.outputs[scenario].values():
            last[tensor] = end
        blocks.extend(Block(tensor, layout.tensor_specs[tensor].nbytes, (Live(scenario, first[tensor], last[tensor]),))
                      for tensor in first)
    if resume:
        blocks.extend(_resume_lives(layout))
    return Problem(tuple(merge_blocks(blocks)), alignment=alignment)


def _resume_lives(layout: UnitLayout) -> list[Block]:
    """The lives ``arena_problem`` adds under ``resume``: each live-in tensor of a shared prefix, on the old
    scenario's timeline until its last step."""
    from sbrs.compile.layout import shared_prefixes

    units = {unit.id: unit for unit in layout.units}
    blocks: list[Block] = []
    for (old, new), count in shared_prefixes(layout).items():
        if count == 0:
            continue
        calls = layout.sequences[old]
        produced = {tensor: 0 for tensor in layout.inputs[new].values()}
        for call, unit_id in enumerate(calls[:count]):
            produced.update({tensor: call for tensor in units[unit_id].outputs})
        wanted = {tensor for unit_id in layout.sequences[new][count:] for tensor in units[unit_id].input_tensors[new]}
        wanted |= set(layout.outputs[new].values())
        blocks.extend(Block(tensor, layout.tensor_specs[tensor].nbytes, (Live(old, produced[tensor], len(calls) - 1),))
                      for tensor in sorted(wanted & produced.keys()))
    return blocks


def plan_layout(layout: UnitLayout, *, app: str, granularity: str, adaptive: tuple[str, ...],
                resume: bool = False) -> UnitPlan:
    """Place ``layout``'s boundary tensors in one arena (``sbrs.memory.place``: planned, verified, bounded) and
    return the complete ``UnitPlan`` (``resume``: ``arena_problem``'s)."""
    problem = arena_problem(layout, resume=resume)
    plan = place(problem, what=f"the boundary tensors of app '{app}'")
    offsets: Mapping[str, int] = plan.as_dict()
    tensors = tuple(BoundaryTensor(block.id, layout.tensor_specs[block.id].shape, layout.tensor_specs[block.id].dtype,
                                   offsets[block.id]) for block in problem.blocks)
    return UnitPlan(
        app=app, granularity=granularity, adaptive=adaptive, units=layout.units, sequences=layout.sequences,
        inputs=layout.inputs, outputs=layout.outputs, tensors=tensors, arena_bytes=plan.arena_bytes,
        alignment=plan.alignment, arena_lower_bound=int(plan.lower_bound_bytes or 0),
        arena_strategy=plan.strategy + ("+resume" if resume else ""),
    )
