"""The one way an arena is placed: plan the offsets, verify them, prove how low any plan could go.

Every stage that needs an arena (the app's memory plan, the boundary tensors of execution units, their shadow
slots for SBRS-TP, the line buffers of processing by parts and the room a transition by parts needs, the
buffers of the reduction search's chosen configuration) builds a :class:`~sbrs.memory.problem.Problem` and
calls :func:`place`: one pass with its verifier in the pipeline, as ExecuTorch's memory planning verifies
what it planned. The planner is :func:`~sbrs.memory.arena.plan_arena`, the verifier
:func:`~sbrs.memory.check.check_plan` (it trusts nothing the planner computed) and the bound
:func:`~sbrs.memory.bounds.lower_bound`; a violation is an internal error naming the arena, never a plan that
runs. Only the search's fitness evaluation, which needs nothing but a size thousands of times, calls the
planner alone (``sbrs.reduction.ga``).
"""

from __future__ import annotations

from dataclasses import replace

from sbrs.errors import SbrsRuntimeError
from sbrs.memory.arena import ArenaPlan, plan_arena
from sbrs.memory.bounds import lower_bound
from sbrs.memory.check import check_plan
from sbrs.memory.problem import Problem

__all__ = ["ArenaError", "place", "verify"]


class ArenaError(SbrsRuntimeError):
    """An arena plan that breaks a rule of :func:`~sbrs.memory.check.check_plan`: a bug, never bad input."""


def verify(problem: Problem, plan: ArenaPlan, *, what: str) -> ArenaPlan:
    """``plan`` when it keeps every rule for ``problem`` (``check_plan``); else ``ArenaError`` naming ``what``
    (an arena read back from a file is verified this way too)."""
    violations = check_plan(problem, plan)
    if violations:
        more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
        raise ArenaError(f"internal error: the arena of {what} is unsafe: {violations[0].detail}{more}")
    return plan


def place(problem: Problem, *, what: str) -> ArenaPlan:
    """Offsets for every block of ``problem`` in one arena (``plan_arena``), verified (``verify``), with the
    lower bound no plan can beat (``ArenaPlan.lower_bound_bytes``). ``what`` names the arena in errors and
    charts, e.g. ``"the boundary tensors of app 'tiny'"``."""
    bound = lower_bound(problem)
    plan = verify(problem, plan_arena(problem, bound=bound), what=what)
    return replace(plan, lower_bound_bytes=bound)
