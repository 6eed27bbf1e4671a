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


def arena_problem(layout: UnitLayout, alignment: int = ARENA_ALIGNMENT) -> Problem:
    """The memory-planning problem of ``layout``'s boundary tensors (module docstring)."""
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
    return Problem(tuple(merge_blocks(blocks)), alignment=alignment)


def plan_layout(layout: UnitLayout, *, app: str, granularity: str, adaptive: tuple[str, ...]) -> UnitPlan:
    """Place ``layout``'s boundary tensors in one arena (``sbrs.memory.place``: planned, verified, bounded) and
    return the complete ``UnitPlan``."""
    problem = arena_problem(layout)
    plan = place(problem, what=f"the boundary tensors of app '{app}'")
    offsets: Mapping[str, int] = plan.as_dict()
    tensors = tuple(BoundaryTensor(block.id, layout.tensor_specs[block.id].shape, layout.tensor_specs[block.id].dtype,
                                   offsets[block.id]) for block in problem.blocks)
    return UnitPlan(
        app=app, granularity=granularity, adaptive=adaptive, units=layout.units, sequences=layout.sequences,
        inputs=layout.inputs, outputs=layout.outputs, tensors=tensors, arena_bytes=plan.arena_bytes,
        alignment=plan.alignment, arena_lower_bound=int(plan.lower_bound_bytes or 0), arena_strategy=plan.strategy,
    )
