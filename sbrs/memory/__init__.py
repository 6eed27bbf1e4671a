"""Stage 3 of the data flow: memory planning (thesis Section 6.5.1, Algorithm 8, and an offset arena).

Model-independent: a :class:`Problem` is a list of blocks (tensors) with sizes and step intervals on
timelines (scenario or partition schedules) plus the pipeline-parallel sets ``J``. Planners:
:func:`buffers_reuse` (Algorithm 8, shared buffers) and :func:`plan_arena` (offsets in one arena);
:func:`lower_bound` proves how low any plan can go; :func:`check_plan` / :func:`check_reuse` prove a plan safe.
:func:`place` is the one entry point of every stage that needs an arena: it plans, verifies and bounds it.

The app's own memory plan (the MoC's tensors in one arena, with the thesis' figures, saved as
``APP.plan.json``) is :mod:`~sbrs.memory.app_plan`, over the problem :mod:`~sbrs.memory.tensors` derives.
"""

from typing import TYPE_CHECKING

from sbrs._lazy import lazy_exports

if TYPE_CHECKING:
    from sbrs.memory.app_plan import (
        AppPlan,
        MemoryReport,
        app_fingerprint,
        build_plan,
        default_plan_path,
        load_plan,
        naive_total_bytes,
        plan_scenarios,
        save_plan,
    )
    from sbrs.memory.arena import FITS, ORDERINGS, ArenaPlan, exact_arena, greedy_arena, plan_arena, reuse_layout
    from sbrs.memory.bounds import lower_bound, naive_bytes, peak_by_timeline
    from sbrs.memory.check import Violation, check_plan, check_reuse
    from sbrs.memory.placement import ArenaError, place, verify
    from sbrs.memory.problem import (
        Block,
        Live,
        Problem,
        ProblemError,
        align_up,
        lifetimes_from_schedule,
        lives_conflict,
        merge_blocks,
    )
    from sbrs.memory.report import MemorySummary, summarize
    from sbrs.memory.reuse import ReusePlan, SharedBuffer, buffers_reuse
    from sbrs.memory.tensors import memory_problem, scenario_schedule, tensor_id

__all__ = [
    "FITS",
    "ORDERINGS",
    "AppPlan",
    "ArenaError",
    "ArenaPlan",
    "Block",
    "Live",
    "MemoryReport",
    "MemorySummary",
    "Problem",
    "ProblemError",
    "ReusePlan",
    "SharedBuffer",
    "Violation",
    "align_up",
    "app_fingerprint",
    "buffers_reuse",
    "build_plan",
    "check_plan",
    "check_reuse",
    "default_plan_path",
    "exact_arena",
    "greedy_arena",
    "lifetimes_from_schedule",
    "lives_conflict",
    "load_plan",
    "lower_bound",
    "memory_problem",
    "merge_blocks",
    "naive_bytes",
    "naive_total_bytes",
    "peak_by_timeline",
    "place",
    "plan_arena",
    "plan_scenarios",
    "reuse_layout",
    "save_plan",
    "scenario_schedule",
    "summarize",
    "tensor_id",
    "verify",
]

__getattr__, __dir__ = lazy_exports(globals(), {
    "AppPlan": "sbrs.memory.app_plan",
    "MemoryReport": "sbrs.memory.app_plan",
    "app_fingerprint": "sbrs.memory.app_plan",
    "build_plan": "sbrs.memory.app_plan",
    "default_plan_path": "sbrs.memory.app_plan",
    "load_plan": "sbrs.memory.app_plan",
    "naive_total_bytes": "sbrs.memory.app_plan",
    "plan_scenarios": "sbrs.memory.app_plan",
    "save_plan": "sbrs.memory.app_plan",
    "memory_problem": "sbrs.memory.tensors",
    "scenario_schedule": "sbrs.memory.tensors",
    "tensor_id": "sbrs.memory.tensors",
    "FITS": "sbrs.memory.arena",
    "ORDERINGS": "sbrs.memory.arena",
    "ArenaPlan": "sbrs.memory.arena",
    "exact_arena": "sbrs.memory.arena",
    "greedy_arena": "sbrs.memory.arena",
    "plan_arena": "sbrs.memory.arena",
    "reuse_layout": "sbrs.memory.arena",
    "lower_bound": "sbrs.memory.bounds",
    "naive_bytes": "sbrs.memory.bounds",
    "peak_by_timeline": "sbrs.memory.bounds",
    "Violation": "sbrs.memory.check",
    "check_plan": "sbrs.memory.check",
    "check_reuse": "sbrs.memory.check",
    "ArenaError": "sbrs.memory.placement",
    "place": "sbrs.memory.placement",
    "verify": "sbrs.memory.placement",
    "Block": "sbrs.memory.problem",
    "Live": "sbrs.memory.problem",
    "Problem": "sbrs.memory.problem",
    "ProblemError": "sbrs.memory.problem",
    "align_up": "sbrs.memory.problem",
    "lifetimes_from_schedule": "sbrs.memory.problem",
    "lives_conflict": "sbrs.memory.problem",
    "merge_blocks": "sbrs.memory.problem",
    "MemorySummary": "sbrs.memory.report",
    "summarize": "sbrs.memory.report",
    "ReusePlan": "sbrs.memory.reuse",
    "SharedBuffer": "sbrs.memory.reuse",
    "buffers_reuse": "sbrs.memory.reuse",
})
