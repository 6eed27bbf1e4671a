"""Reference figures for a plan: naive memory, per-timeline peaks and a proven lower bound on the arena.

DESIGN.md, "Memory": naive (every block its own buffer, the thesis' ``M_naive`` of Table 6.1), reuse
(Algorithm 8), arena (offsets in one arena) and the lower bound that no plan can go below.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from sbrs.memory.problem import Problem, align_up

__all__ = ["TimelinePoints", "lower_bound", "naive_bytes", "peak_by_timeline", "timeline_points"]


def naive_bytes(problem: Problem, *, aligned: bool = False) -> int:
    """Naive allocation (Table 6.1): every block its own buffer; sizes rounded up when ``aligned``."""
    if aligned:
        return sum(align_up(b.size, problem.alignment) for b in problem.blocks)
    return sum(b.size for b in problem.blocks)


@dataclass(frozen=True)
class TimelinePoints:
    """For one timeline: its distinct first steps and, at each, the bitmask of blocks live there."""

    timeline: str
    steps: tuple[int, ...]
    masks: tuple[int, ...]


def timeline_points(problem: Problem) -> tuple[TimelinePoints, ...]:
    """Live sets at every distinct first step of every timeline (enough to find every maximal live set).

    Any set of blocks live at step ``s`` is also live at ``p``, the largest first step among them that is
    ``<= s``; so only first steps need to be examined.
    """
    lives_on: dict[str, list[tuple[int, int, int]]] = {}
    for i, block in enumerate(problem.blocks):
        for live in block.lives:
            lives_on.setdefault(live.timeline, []).append((i, live.first, live.last))
    result = []
    for timeline in problem.timelines:
        lives = lives_on[timeline]
        steps = sorted({first for _, first, _ in lives})
        masks = [0] * len(steps)
        for i, first, last in lives:
            lo = bisect.bisect_left(steps, first)
            hi = bisect.bisect_right(steps, last)
            for k in range(lo, hi):
                masks[k] |= 1 << i
        result.append(TimelinePoints(timeline, tuple(steps), tuple(masks)))
    return tuple(result)


def _weight(mask: int, sizes: Sequence[int]) -> int:
    total = 0
    while mask:
        low = mask & -mask
        total += sizes[low.bit_length() - 1]
        mask ^= low
    return total


def _aligned_sizes(problem: Problem, aligned: bool) -> list[int]:
    a = problem.alignment if aligned else 1
    return [align_up(b.size, a) for b in problem.blocks]


def peak_by_timeline(problem: Problem, *, aligned: bool = True) -> dict[str, int]:
    """The largest total size of blocks live at one step, per timeline (a block counts once per step)."""
    sizes = _aligned_sizes(problem, aligned)
    return {tp.timeline: max(_weight(m, sizes) for m in tp.masks) for tp in timeline_points(problem)}


def lower_bound(problem: Problem, *, aligned: bool = True) -> int:
    """A proven lower bound on the arena bytes (and on the Algorithm 8 total) of every valid plan.

    The bound is the largest of:

    - for every timeline ``t`` and step ``s``: the total (aligned) size of the blocks live at ``(t, s)``;
    - for every concurrent set ``G`` in ``J``: the total size of the blocks live on two or more timelines of
      ``G`` ("shared"), plus, for each ``t ∈ G``, the largest total size of the blocks live on ``t`` and on no
      other timeline of ``G`` ("private to t") at one step of ``t``.

    Proof (arena). Blocks live at one step of one timeline pairwise overlap there, so they pairwise
    conflict (Algorithm 8, line 17); a valid plan gives them disjoint byte ranges
    ``[offset, offset + aligned size)`` inside ``[0, arena_bytes)``, so their sizes add up to at most
    ``arena_bytes``. For a concurrent set ``G``: take two blocks ``a != b`` live on ``G`` that are not both
    private to one timeline. Then ``a`` has a Live on some ``t ∈ G`` and ``b`` one on some ``u ∈ G`` with
    ``t != u`` (if ``a`` is shared pick ``t`` different from one of ``b``'s ``G``-timelines, and vice versa),
    so they conflict (Algorithm 8, lines 9-11). Hence the byte sets used by each shared block and by the
    private blocks of each ``t`` are pairwise disjoint, and the private blocks of ``t`` alone use at least
    their peak, by the first case. Summing the disjoint parts gives the bound.

    Proof (Algorithm 8). In a valid reuse plan pairwise conflicting blocks sit in pairwise different buffers,
    each at least as large as its member; so ``total`` is at least the first kind of bound. For the second,
    a buffer holding a block of the set ``G`` holds only private blocks of one ``t`` or a single shared block,
    and the buffers holding private blocks of ``t`` total at least their peak.

    Note that with a concurrent set the bound is not the sum of the per-timeline peaks: blocks shared between
    the set's timelines count once. The optimum arena can exceed the bound: even on one timeline, placing
    intervals of different sizes contiguously (dynamic storage allocation) can force fragmentation above the
    peak load, and with blocks live on several timelines the conflict graph is no longer an interval graph
    (e.g. a 5-cycle of equal-size blocks needs 3 sizes while every step holds 2).
    """
    if not problem.blocks:
        return 0
    sizes = _aligned_sizes(problem, aligned)
    points = timeline_points(problem)
    best = max(_weight(m, sizes) for tp in points for m in tp.masks)
    by_name = {tp.timeline: tp for tp in points}
    on_timeline: dict[str, set[int]] = {}  # timeline → the blocks live on it: a set visits only its own blocks
    for i, block in enumerate(problem.blocks):
        for live in block.lives:
            on_timeline.setdefault(live.timeline, set()).add(i)
    for group in sorted(problem.concurrent, key=sorted):
        best = max(best, _group_bound(group, on_timeline, by_name, sizes))
    return best


def _group_bound(group: frozenset[str], on_timeline: dict[str, set[int]], points: dict[str, TimelinePoints],
                 sizes: Sequence[int]) -> int:
    """Shared blocks of the concurrent set ``G`` plus each timeline's private peak (see :func:`lower_bound`)."""
    homes: dict[int, list[str]] = {}
    for t in sorted(group):
        for i in on_timeline.get(t, ()):
            homes.setdefault(i, []).append(t)
    shared = 0
    private: dict[str, int] = {t: 0 for t in group}
    for i, timelines in homes.items():
        if len(timelines) >= 2:
            shared += sizes[i]
        else:
            private[timelines[0]] |= 1 << i
    total = shared
    for t in sorted(group):
        if t in points and private[t]:
            total += max(_weight(m & private[t], sizes) for m in points[t].masks)
    return total
