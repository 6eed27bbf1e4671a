"""Validity checkers for memory plans (DESIGN.md invariant 3, "Arena safety").

The checkers do not trust the planners' precomputed conflict masks: they work from the blocks' Lives and the
concurrent sets ``J`` alone. Checking every pair of blocks that share bytes against every pair of concurrent
timelines grew with the square of both (a 60-scenario app's shadow arena has 3540 concurrent sets); so a plan
is first swept, timeline by timeline and set by set, for *any* conflicting pair sharing a byte
(``_any_overlap``, ``O(L log L)`` in its ``L`` Lives plus one merge of byte ranges per concurrent set), and
only a plan that has one is gone through pair by pair to name every such pair. The result is the plain
definition's, :func:`~sbrs.memory.problem.lives_conflict` applied to every pair sharing bytes (a hypothesis
property in ``tests/memory`` compares the two on random problems and plans).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sbrs.memory.arena import ArenaPlan
from sbrs.memory.problem import Problem, align_up
from sbrs.memory.reuse import ReusePlan

__all__ = ["Violation", "check_plan", "check_reuse"]


@dataclass(frozen=True)
class Violation:
    """One broken rule: ``kind`` (a fixed word), the blocks or buffers involved and a readable detail."""

    kind: str
    subjects: tuple[str, ...]
    detail: str


def check_plan(problem: Problem, plan: ArenaPlan) -> list[Violation]:
    """Every rule an arena plan must keep; an empty list means the plan is valid.

    Kinds: ``alignment`` (plan alignment differs from the problem's), ``duplicate``, ``unknown``, ``missing``
    (block offsets), ``negative``, ``misaligned`` (offset not a multiple of the alignment), ``outside``
    (``offset + aligned size > arena_bytes``), ``overlap`` (two conflicting blocks share bytes). Overlaps are
    found by sweeps that cost ``O(L log L)`` for the ``L`` Lives of the problem plus one merge of byte ranges
    per concurrent set (``_any_overlap``); only a plan that has one is gone through pair by pair to name every
    pair (``_overlapping_pairs``).
    """
    out: list[Violation] = []
    align = problem.alignment
    if plan.alignment != align:
        out.append(Violation("alignment", (), f"plan alignment {plan.alignment} != problem {align}"))
    known = set(problem.ids)
    offsets: dict[str, int] = {}
    for name, offset in plan.offsets:
        if name in offsets:
            out.append(Violation("duplicate", (name,), f"block {name} has two offsets"))
        elif name not in known:
            out.append(Violation("unknown", (name,), f"offset given for unknown block {name}"))
        else:
            offsets[name] = offset
    out.extend(Violation("missing", (b,), f"block {b} has no offset") for b in problem.ids if b not in offsets)
    extents: list[tuple[int, int, str]] = []
    for name, offset in offsets.items():
        size = align_up(problem.block(name).size, align)
        if not isinstance(offset, int) or offset < 0:
            out.append(Violation("negative", (name,), f"block {name} at offset {offset!r}"))
            continue
        if offset % align:
            out.append(Violation("misaligned", (name,), f"block {name} at {offset}, not a multiple of {align}"))
        if offset + size > plan.arena_bytes:
            out.append(Violation("outside", (name,),
                                 f"block {name} [{offset}, {offset + size}) exceeds arena {plan.arena_bytes}"))
        if size > 0:
            extents.append((offset, offset + size, name))
    if _any_overlap(problem, {name: (start, end) for start, end, name in extents}):
        out.extend(_overlapping_pairs(problem, extents))
    return out


def _any_overlap(problem: Problem, extent: Mapping[str, tuple[int, int]]) -> bool:
    """True when two conflicting blocks of ``extent`` (block id → its bytes ``[start, end)``) share a byte.

    The conflict of Algorithm 8, lines 7-18, checked where it can happen rather than pair by pair:

    - line 17 (one timeline, overlapping steps): on each timeline, a sweep over steps keeps the byte ranges of
      the blocks live at the current step in order (``_timeline_overlap``), ``O(L log L)`` for ``L`` Lives there;
    - lines 9-11 (two timelines of one concurrent set ``J_r``): every block on the set's timelines is given a
      colour, its timeline when it is live on one of them, a colour of its own when on several; two blocks
      conflict through the set exactly when their colours differ, so the plan is safe there exactly when the
      byte ranges of different colours are disjoint (``_group_overlap``: one merge of sorted, per-colour unions).
    """
    on_timeline: dict[str, dict[str, list[tuple[int, int]]]] = {}  # timeline → block → its Lives there
    for block in problem.blocks:
        if block.id in extent:
            for live in block.lives:
                on_timeline.setdefault(live.timeline, {}).setdefault(block.id, []).append((live.first, live.last))
    if any(_timeline_overlap(lives, extent) for lives in on_timeline.values()):
        return True
    unions: dict[str, list[tuple[int, int]]] = {}  # timeline → the union of its blocks' bytes (cached)
    return any(_group_overlap(group, on_timeline, extent, unions) for group in problem.concurrent)


def _timeline_overlap(lives: Mapping[str, list[tuple[int, int]]], extent: Mapping[str, tuple[int, int]]) -> bool:
    """Two different blocks of one timeline live at one step and sharing a byte.

    A block's own Lives on the timeline are merged first, so two rectangles (steps × bytes) active at once are
    always of different blocks. Rectangles enter in order of their first step and leave after their last; while
    no two active ones share a byte their byte ranges are disjoint, kept sorted by start, and a new range
    overlaps one of them exactly when it overlaps the last one starting before its end (one bisection).
    Intervals ``[first, last]`` overlap exactly when one contains the other's first step, so the first overlap
    of the timeline is found when the later of its two rectangles enters.
    """
    rectangles = [(first, last, *extent[name]) for name, spans in lives.items() for first, last in _merged(spans)]
    rectangles.sort()
    starts: list[int] = []  # byte ranges of the active rectangles, sorted (disjoint until an overlap is found)
    ends: list[int] = []
    leaving: list[tuple[int, int]] = []  # heap of (last step, byte start)
    for first, last, start, end in rectangles:
        while leaving and leaving[0][0] < first:
            k = bisect.bisect_left(starts, heapq.heappop(leaving)[1])
            del starts[k], ends[k]
        k = bisect.bisect_left(starts, end)
        if k and ends[k - 1] > start:
            return True
        k = bisect.bisect_left(starts, start)
        starts.insert(k, start)
        ends.insert(k, end)
        heapq.heappush(leaving, (last, start))
    return False


def _group_overlap(group: frozenset[str], on_timeline: Mapping[str, Mapping[str, list[tuple[int, int]]]],
                   extent: Mapping[str, tuple[int, int]], unions: dict[str, list[tuple[int, int]]]) -> bool:
    """Two blocks that conflict through the concurrent set ``group`` sharing a byte (``_any_overlap``'s colours).

    Each timeline's union of byte ranges is computed once and kept in ``unions``; a set with blocks live on
    several of its timelines (rare) recomputes the unions of those timelines without them."""
    members = [t for t in sorted(group) if t in on_timeline]
    if len(members) < 2:
        return False
    seen: set[str] = set()
    several: set[str] = set()  # blocks live on two or more of the set's timelines: a colour of their own each
    for t in members:
        names = on_timeline[t].keys()
        several |= seen & names
        seen |= names
    ranges: list[tuple[int, int]] = [extent[name] for name in several]
    for t in members:
        if several.isdisjoint(on_timeline[t]):
            if t not in unions:
                unions[t] = _union(extent[name] for name in on_timeline[t])
            ranges.extend(unions[t])
        else:
            ranges.extend(_union(extent[name] for name in on_timeline[t] if name not in several))
    ranges.sort()
    reach = -1
    for start, end in ranges:  # ranges of one colour are disjoint: any overlap is between two colours
        if start < reach:
            return True
        reach = max(reach, end)
    return False


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Step intervals ``[first, last]`` with the overlapping ones joined."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if out and first <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def _union(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Byte ranges ``[start, end)`` as the sorted, disjoint ranges covering the same bytes."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


class _Conflicts:
    """The conflict of two blocks (Algorithm 8, lines 7-18) from each block's Lives by timeline and the
    timelines each timeline is concurrent with: the same answer as :func:`lives_conflict` without going over
    every concurrent set for every pair of Lives. Built from the problem's blocks and ``J`` only (nothing the
    planners computed); used to name every conflicting pair once ``_any_overlap`` found one."""

    def __init__(self, problem: Problem) -> None:
        partners: dict[str, set[str]] = {}
        for group in problem.concurrent:
            for t in group:
                partners.setdefault(t, set()).update(group - {t})
        self._partners = partners
        self._problem = problem
        self._spans: dict[str, dict[str, list[tuple[int, int]]]] = {}
        self._concurrent: dict[str, set[str]] = {}

    def _of(self, name: str) -> tuple[dict[str, list[tuple[int, int]]], set[str]]:
        if name not in self._spans:
            spans: dict[str, list[tuple[int, int]]] = {}
            for live in self._problem.block(name).lives:
                spans.setdefault(live.timeline, []).append((live.first, live.last))
            self._spans[name] = spans
            self._concurrent[name] = set().union(*(self._partners.get(t, ()) for t in spans))
        return self._spans[name], self._concurrent[name]

    def __call__(self, a: str, b: str) -> bool:
        if a == b:
            return False
        spans_a, concurrent_a = self._of(a)
        spans_b, _ = self._of(b)
        if not concurrent_a.isdisjoint(spans_b):  # lines 9-11: Lives on two timelines of one set J_r
            return True
        return any(f1 <= l2 and f2 <= l1 for t in spans_a.keys() & spans_b.keys()  # line 17
                   for f1, l1 in spans_a[t] for f2, l2 in spans_b[t])


def _overlapping_pairs(problem: Problem, extents: list[tuple[int, int, str]]) -> list[Violation]:
    """Sweep byte extents by start; every pair sharing bytes is tested for a conflict (an unsafe plan only)."""
    out: list[Violation] = []
    conflicts = _Conflicts(problem)
    extents.sort()
    active: list[tuple[int, str, int]] = []  # heap of (end, name, start)
    for start, end, name in extents:
        while active and active[0][0] <= start:
            heapq.heappop(active)
        for other_end, other, other_start in active:
            if conflicts(name, other):
                out.append(Violation(
                    "overlap", tuple(sorted((name, other))),
                    f"conflicting blocks {other} [{other_start}, {other_end}) and {name} [{start}, {end}) "
                    "share bytes"))
        heapq.heappush(active, (end, name, start))
    return out


def check_reuse(problem: Problem, plan: ReusePlan) -> list[Violation]:
    """Every rule an Algorithm 8 plan must keep; an empty list means the plan is valid.

    Kinds: ``unknown`` / ``missing`` / ``duplicate`` (each block in exactly one buffer), ``conflict`` (two
    conflicting blocks in one buffer, Algorithm 8 lines 5-18), ``undersized`` (a buffer smaller than a
    member, rounded up to ``plan.alignment``), ``total`` (``total != Σ sizes``).
    """
    out: list[Violation] = []
    known = set(problem.ids)
    home: dict[str, str] = {}
    for buf in plan.buffers:
        for member in buf.members:
            if member not in known:
                out.append(Violation("unknown", (buf.id, member), f"buffer {buf.id} holds unknown block {member}"))
            elif member in home:
                out.append(Violation("duplicate", (home[member], buf.id, member),
                                     f"block {member} is in buffers {home[member]} and {buf.id}"))
            else:
                home[member] = buf.id
    out.extend(Violation("missing", (b,), f"block {b} is in no buffer") for b in problem.ids if b not in home)
    # one byte per buffer: members conflict in a buffer as blocks sharing bytes do in an arena; a block in two
    # buffers (already a violation) has no one place, so such a plan is gone through pair by pair
    memberships = [(k, m) for k, buf in enumerate(plan.buffers) for m in dict.fromkeys(buf.members) if m in known]
    slots = {m: (k, k + 1) for k, m in memberships}
    pairwise = len(slots) != len(memberships) or _any_overlap(problem, slots)
    conflicts = _Conflicts(problem)
    for buf in plan.buffers:
        members = [problem.block(m) for m in dict.fromkeys(buf.members) if m in known]
        for k, a in enumerate(members):
            need = align_up(a.size, plan.alignment)
            if buf.size < need:
                out.append(Violation("undersized", (buf.id, a.id),
                                     f"buffer {buf.id} of size {buf.size} holds {a.id} of size {need}"))
            if not pairwise:
                continue
            for b in members[k + 1:]:
                if conflicts(a.id, b.id):
                    out.append(Violation("conflict", (buf.id, a.id, b.id),
                                         f"conflicting blocks {a.id} and {b.id} share buffer {buf.id}"))
    total = sum(b.size for b in plan.buffers)
    if total != plan.total:
        out.append(Violation("total", (), f"total {plan.total} != sum of buffer sizes {total}"))
    return out
