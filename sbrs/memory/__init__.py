"""Stage 3 of the data flow: memory planning (thesis Section 6.5.1, Algorithm 8, and an offset arena).

Model-independent: a :class:`Problem` is a list of blocks (tensors) with sizes and step intervals on
timelines (scenario or partition schedules) plus the pipeline-parallel sets ``J``. Planners:
:func:`buffers_reuse` (Algorithm 8, shared buffers) and :func:`plan_arena` (offsets in one arena);
:func:`lower_bound` proves how low any plan can go; :func:`check_plan` / :func:`check_reuse` prove a plan safe.
"""

from typing import TYPE_CHECKING

from sbrs._lazy import lazy_exports

if TYPE_CHECKING:
    from sbrs.memory.arena import FITS, ORDERINGS, ArenaPlan, exact_arena, greedy_arena, plan_arena, reuse_layout
    from sbrs.memory.bounds import lower_bound, naive_bytes, peak_by_timeline
    from sbrs.memory.check import Violation, check_plan, check_reuse
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

__all__ = [
    "FITS",
    "ORDERINGS",
    "ArenaPlan",
    "Block",
    "Live",
    "MemorySummary",
    "Problem",
    "ProblemError",
    "ReusePlan",
    "SharedBuffer",
    "Violation",
    "align_up",
    "buffers_reuse",
    "check_plan",
    "check_reuse",
    "exact_arena",
    "greedy_arena",
    "lifetimes_from_schedule",
    "lives_conflict",
    "lower_bound",
    "merge_blocks",
    "naive_bytes",
    "peak_by_timeline",
    "plan_arena",
    "reuse_layout",
    "summarize",
]

__getattr__, __dir__ = lazy_exports(globals(), {
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
