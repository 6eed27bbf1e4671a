"""What a runtime reports about itself: plan figures for observers and status (``facts``), the memory it holds
(``memory_report``, thesis Eq. 2.5-2.7); the arena bytes its steps really touch are its ``FrameRunner``'s
(``bound_accesses``).

One set of keys for both kinds of plan, so that ``sbrs run``'s summary, the ``sbrs_memory_*`` gauges and
``sbrs bench`` read a runtime of execution units and a runtime by parts alike; a runtime by parts adds how
SBRS-TP can use its arena (``transition_cut``, ``transition_overlap_pairs``, ``transition_pairs``). None of
this runs per frame.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sbrs.compile.footprint import Footprint
    from sbrs.compile.tables import TransitionPlan
    from sbrs.runtime.control_node import ControlNode


class Reporting(Protocol):
    """What the reports read of a runtime (``sbrs.runtime.engine.Runtime`` has all of it)."""

    plan: Any  # a UnitPlan or a PartsPlan
    execution: str
    providers: tuple[str, ...]
    node: ControlNode
    transitions: TransitionPlan
    memory_limit_bytes: int | None
    model_bytes: Mapping[str, int]
    footprint: Footprint | None

    @property
    def scenarios(self) -> tuple[str, ...]: ...

    @property
    def arena_bytes(self) -> int: ...

    @property
    def stream_count(self) -> int: ...

    @property
    def switch_session_count(self) -> int: ...


def facts(runtime: Reporting) -> dict[str, Any]:
    """Plan figures for observers and status: the arena and its lower bound, the app's unique parameter bytes and
    thesis-naive buffer bytes, the sessions (``units``: execution units, or distinct band-call models),
    granularity, providers, transition mode and arena, each scenario's steps, and ``memory_report``'s figures as
    ``memory_*`` (the ``sbrs_memory_*`` gauges)."""
    plan: Any = runtime.plan
    if runtime.execution == "parts":
        sessions, bound, steps = len(plan.call_keys), plan.lower_bound_bytes, {s: len(p.calls)
                                                                              for s, p in plan.scenarios.items()}
    else:
        sessions, bound, steps = len(plan.units), plan.arena_lower_bound, {s: len(seq)
                                                                          for s, seq in plan.sequences.items()}
    report = memory_report(runtime)
    return {"app": plan.app, "arena_bytes": plan.arena_bytes, "units": sessions, "lower_bound_bytes": bound,
            "providers": list(runtime.providers), **runtime.model_bytes, "granularity": plan.granularity,
            "transition": runtime.node.mode, "transition_arena": runtime.transitions.arena,
            "scenarios": list(runtime.scenarios), "steps": steps,
            **{f"memory_{key}": report[key] for key in
               ("params_bytes", "arena_bytes", "total_bytes", "limit_bytes", "planned_arena_bytes")}}


def memory_report(runtime: Reporting) -> dict[str, Any]:
    """What ``runtime`` holds, in bytes (DESIGN.md, "Interfaces"; thesis Eq. 2.5: m = m_par + m_buf).

    The plan, as ``sbrs.compile.footprint`` defines it everywhere (``sbrs build``, ``sbrs run``, ``sbrs bench``):
    ``params_bytes``, the unique parameter bytes as ONNX Runtime executes them (Eq. 2.6; conv→BN→activation
    folded; a tensor shared by scenarios counts once), ``plan_tensors_bytes``, the largest total of tensors any
    scenario has live at once, every tensor counted (those inside ONNX Runtime calls too),
    ``plan_transition_bytes``, the arena's room for switches, and ``total_bytes``, their sum, the plan;
    ``limit_bytes``: the app's ``memory_limit_mb`` (None without one) and ``within_limit`` (the plan within it).
    ``streams``: frames in flight at once in ``process``, each in an arena of its own (``sbrs.runtime.streams``;
    ``arena_bytes`` and the planned arena count every stream's). ``arena_bytes``: the arena sbrs really allocated
    (tensors between ONNX Runtime calls). Planned figures carry
    ``planned`` in their names: ``planned_arena_bytes`` (the arena the plan asked for),
    ``planned_lower_bound_bytes`` (its lower bound) and, by parts, ``planned_reduction_arena_bytes`` (the search's
    Algorithm 10 figure). ``arena_holds`` says which tensors the arena holds: tensors inside one ONNX Runtime call
    are ONNX Runtime's own memory, and so are its copies of the weights (``sbrs bench`` measures the process). By
    parts also ``transition_cut``
    (the fraction of an old frame after which the arena keeps the new frame's buffers
    apart; None: no room under the limit, ``sbrs.compile.parts.plan_transition_room``) and
    ``transition_overlap_pairs`` (ordered pairs whose new frame may start before the old frame's last call; with
    none, every switch happens at the frame boundary, as ``naive``). Each switch's ``SwitchRecord`` says what it did
    (``overlapped_steps``).
    """
    from sbrs.compile.footprint import Footprint

    plan: Any = runtime.plan
    arena = runtime.arena_bytes  # every band stream's
    footprint = runtime.footprint or Footprint(int(runtime.model_bytes["params_bytes"]), arena, 0)
    limit = runtime.memory_limit_bytes
    streams = runtime.stream_count
    report: dict[str, Any] = {"execution": runtime.execution, "streams": streams,
                              "switch_sessions": runtime.switch_session_count,
                              "params_bytes": footprint.params_bytes,
                              "plan_tensors_bytes": footprint.tensors_bytes,
                              "plan_transition_bytes": footprint.transition_bytes,
                              "total_bytes": footprint.plan_bytes, "arena_bytes": arena, "limit_bytes": limit,
                              "within_limit": None if limit is None else footprint.plan_bytes <= limit}
    if runtime.execution == "parts":
        report.update(planned_arena_bytes=streams * plan.arena_bytes,
                      planned_lower_bound_bytes=streams * plan.lower_bound_bytes,
                      planned_reduction_arena_bytes=plan.reduction.get("figures", {}).get("arena_bytes"))
        holds = ("every line buffer and band-call boundary tensor of every scenario (tensors inside one band "
                 "call are ONNX Runtime's)")
    else:
        report.update(planned_arena_bytes=streams * plan.arena_bytes,
                      planned_lower_bound_bytes=streams * plan.arena_lower_bound)
        holds = "tensors between execution units (tensors inside a unit are ONNX Runtime's)"
    report.update(transition=runtime.node.mode, transition_arena=runtime.transitions.arena, arena_holds=holds)
    if runtime.execution == "parts":
        tables = runtime.transitions.pairs.values()
        report.update(transition_cut=plan.reduction.get("transition_cut"),
                      transition_overlap_pairs=sum(1 for t in tables if t.wait and t.wait[0] < t.old_steps),
                      transition_pairs=len(tables))
    return report

