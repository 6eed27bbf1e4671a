"""Validity checkers for memory plans (DESIGN.md invariant 3, "Arena safety").

The checkers do not trust the planners' precomputed conflict masks: they find candidate pairs by geometry
(blocks sharing bytes, blocks sharing a buffer) and decide each pair with :func:`lives_conflict`, the plain
definition of Algorithm 8, lines 7-18.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from sbrs.memory.arena import ArenaPlan
from sbrs.memory.problem import Problem, align_up, lives_conflict
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
    found by a sweep over offsets (``O(n log n)`` plus one exact conflict test per pair of blocks that
    share bytes).
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
    out.extend(_overlaps(problem, extents))
    return out


def _overlaps(problem: Problem, extents: list[tuple[int, int, str]]) -> list[Violation]:
    """Sweep byte extents by start; every pair sharing bytes is tested for a conflict."""
    out: list[Violation] = []
    extents.sort()
    active: list[tuple[int, str, int]] = []  # heap of (end, name, start)
    for start, end, name in extents:
        while active and active[0][0] <= start:
            heapq.heappop(active)
        block = problem.block(name)
        for other_end, other, other_start in active:
            if lives_conflict(block, problem.block(other), problem.concurrent):
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
    for buf in plan.buffers:
        members = [problem.block(m) for m in dict.fromkeys(buf.members) if m in known]
        for k, a in enumerate(members):
            need = align_up(a.size, plan.alignment)
            if buf.size < need:
                out.append(Violation("undersized", (buf.id, a.id),
                                     f"buffer {buf.id} of size {buf.size} holds {a.id} of size {need}"))
            for b in members[k + 1:]:
                if lives_conflict(a, b, problem.concurrent):
                    out.append(Violation("conflict", (buf.id, a.id, b.id),
                                         f"conflicting blocks {a.id} and {b.id} share buffer {buf.id}"))
    total = sum(b.size for b in plan.buffers)
    if total != plan.total:
        out.append(Violation("total", (), f"total {plan.total} != sum of buffer sizes {total}"))
    return out
