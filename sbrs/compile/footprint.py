"""The plan of what an app's runtime holds: one definition for ``sbrs build``, ``memory_report``, ``sbrs run``
and ``sbrs bench`` (thesis Eq. 2.5, m = m_par + m_buf, counted as the device pays it).

- ``params_bytes``: the parameters as ONNX Runtime executes them: convolution, batch normalization and a
  following activation folded into one layer (``sbrs.model.fold``; ONNX Runtime folds them in every session),
  each distinct tensor once (thesis Eq. 2.6). MobileNetV2 1.0: 13.95 MB, against 14.16 MB as exported.
- ``tensors_bytes``: the largest total of tensors live at once in any scenario, *every* tensor counted: those
  between ONNX Runtime calls, which sbrs places in its own arena, and those inside a call, which live in ONNX
  Runtime's allocator for the call's duration (thesis Algorithm 10, lines 2-9, on the folded models, with the
  band heights, cuts and tiles the app runs with; whole layers when it does not run by parts).
- ``transition_bytes``: what sbrs' arena holds beyond its own minimum so that a switch can overlap the old and
  the new frame (SBRS-TP's shadow slots for execution units, the room kept apart by parts).

The device pays more than the plan: ONNX Runtime's code and its session structures, the interpreter's share of
sbrs' Python, and any copy of the weights ONNX Runtime keeps besides the mapped file. ``sbrs bench`` measures
that from outside (``sbrs.bench.device_memory``) and puts it beside this plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sbrs.compile.parts_plan import PartsPlan
    from sbrs.compile.units import UnitPlan
    from sbrs.model.cnn import CnnModel


@dataclass(frozen=True)
class Footprint:
    """The plan's three parts in bytes (module docstring); ``plan_bytes`` is their sum."""

    params_bytes: int
    tensors_bytes: int
    transition_bytes: int

    @property
    def plan_bytes(self) -> int:
        return self.params_bytes + self.tensors_bytes + self.transition_bytes

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "plan_bytes": self.plan_bytes}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Footprint:
        return cls(int(data["params_bytes"]), int(data["tensors_bytes"]), int(data["transition_bytes"]))


def units_footprint(models: Mapping[str, CnnModel], plan: UnitPlan, streams: int = 1) -> Footprint:
    """The footprint of ``models`` run as the execution units of ``plan`` (its arena with any shadow slots), on
    ``streams`` frames at once: every tensor and the arena once per stream."""
    from sbrs.compile.arena import arena_problem
    from sbrs.compile.units import UnitLayout
    from sbrs.memory import lower_bound
    from sbrs.reduction import plan_reduction

    whole = plan_reduction(models)  # folded, every tensor, whole layers
    layout = UnitLayout(plan.units, plan.sequences, plan.inputs, plan.outputs, {t.id: t.spec for t in plan.tensors})
    minimum = lower_bound(arena_problem(layout, plan.alignment))
    return Footprint(int(whole.params_bytes), streams * int(whole.arena.arena_bytes),
                     streams * max(0, int(plan.arena_bytes) - minimum))


def parts_footprint(plan: PartsPlan) -> Footprint:
    """The footprint of an app run by parts: the search's figures of the configuration it runs (``chosen``:
    Algorithm 10 on the folded models, the tensors inside each band call included) and the room the arena keeps
    for transitions. Band heights given without a search have no figure for the tensors inside the calls: the
    plan is then the executor's own arena (line buffers and call boundaries), as placed before the room."""
    chosen = plan.reduction.get("chosen")
    params = int(plan.model_bytes["params_bytes"])
    without_room = int(plan.reduction.get("arena_without_room_bytes", plan.arena_bytes))
    tensors = without_room if chosen is None else int(chosen["memory_bytes"]) - int(chosen["params_bytes"])
    room = max(0, int(plan.arena_bytes) - without_room) if plan.reduction.get("transition_cut") is not None else 0
    return Footprint(params, tensors, room)
