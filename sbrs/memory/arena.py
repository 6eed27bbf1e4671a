"""Offset planning: every block gets a byte offset in one arena; conflicting blocks never share bytes.

The baseline is the greedy planner of TFLite Micro (``GreedyMemoryPlanner``) and ExecuTorch
(``exir/memory_planning.py``, greedy with best fit): visit blocks by decreasing size and put each one in the
best-fitting gap between the already placed blocks it conflicts with. Beyond the baseline, :func:`plan_arena`

1. runs the greedy pass under several orderings and two fit rules and keeps the smallest arena;
2. adds the shared buffers of Algorithm 8 (thesis Section 6.5.1) laid end to end as a candidate, so the arena
   is never larger than Algorithm 8's total computed with aligned sizes;
3. for small problems (or while a node budget lasts) runs an exact branch-and-bound search over the
   canonical "sorted by offset" placements, stopping as soon as the lower bound is reached.

Every pass is deterministic: ties are broken by block index, the search is limited by a node count, not
by a clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sbrs.memory.bounds import lower_bound, timeline_points
from sbrs.memory.problem import Problem, ProblemError, align_up
from sbrs.memory.reuse import ReusePlan, buffers_reuse

__all__ = ["FITS", "ORDERINGS", "ArenaPlan", "exact_arena", "greedy_arena", "plan_arena", "reuse_layout"]


@dataclass(frozen=True)
class ArenaPlan:
    """Byte offsets of every block in one arena of ``arena_bytes`` (a multiple of ``alignment``).

    Block ``b`` occupies ``[offset, offset + align_up(b.size, alignment))``. ``strategy`` names the pass
    that produced the plan; ``optimal`` is true when the plan is proven minimal (it meets the lower bound,
    or the exact search finished). ``lower_bound_bytes``: the most bytes live at once, which no plan can go
    below (set by :func:`sbrs.memory.place`; None for a bare planner's result).
    """

    offsets: tuple[tuple[str, int], ...]
    arena_bytes: int
    alignment: int
    strategy: str
    optimal: bool = False
    lower_bound_bytes: int | None = None

    def offset_of(self, block_id: str) -> int:
        """The offset of ``block_id``."""
        for name, offset in self.offsets:
            if name == block_id:
                return offset
        raise ProblemError(f"arena plan: no offset for block {block_id!r}")

    def as_dict(self) -> dict[str, int]:
        """Offsets as a dictionary block id -> offset."""
        return dict(self.offsets)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dictionary."""
        return {
            "arena_bytes": self.arena_bytes,
            "alignment": self.alignment,
            "strategy": self.strategy,
            "optimal": self.optimal,
            "offsets": [[name, offset] for name, offset in self.offsets],
        } | ({} if self.lower_bound_bytes is None else {"lower_bound_bytes": self.lower_bound_bytes})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ArenaPlan:
        """Inverse of :meth:`to_dict`."""
        offsets = tuple((str(name), int(offset)) for name, offset in data["offsets"])
        bound = data.get("lower_bound_bytes")
        return cls(offsets, int(data["arena_bytes"]), int(data["alignment"]), str(data["strategy"]),
                   bool(data.get("optimal", False)), None if bound is None else int(bound))

    def to_json(self) -> str:
        """JSON text of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ArenaPlan:
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))

    def chart(self, problem: Problem, *, width: int = 64, title: str = "") -> str:
        """The plan as text, one line per step of every timeline and one column per ``arena_bytes / width``
        bytes (as TensorFlow Lite Micro prints its arena plan): each block live at that step is drawn with
        its letter over the columns it occupies (``.`` free, ``*`` where several blocks share one column),
        then the step's live bytes. A legend names the blocks by letter (at most 62 letters, then ``#``)."""
        width = max(8, width)
        scale = max(1, -(-self.arena_bytes // width))
        symbols = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        offsets = self.as_dict()
        letters = {block.id: symbols[i] if i < len(symbols) else "#" for i, block in enumerate(problem.blocks)}
        lines = [f"{title or 'arena'}: {self.arena_bytes} bytes ({self.strategy}"
                 + ("" if self.lower_bound_bytes is None else f", lower bound {self.lower_bound_bytes}")
                 + f"), one column = {scale} bytes"]
        steps: dict[str, int] = {}
        for block in problem.blocks:
            for live in block.lives:
                steps[live.timeline] = max(steps.get(live.timeline, 0), live.last + 1)
        for timeline, count in steps.items():
            for step in range(count):
                row = ["."] * width
                live_bytes = 0
                for block in problem.blocks:
                    if not any(v.timeline == timeline and v.first <= step <= v.last for v in block.lives):
                        continue
                    start = offsets[block.id]
                    end = start + align_up(block.size, self.alignment)
                    live_bytes += end - start
                    for column in range(start // scale, min(width, -(-end // scale))):
                        row[column] = letters[block.id] if row[column] == "." else "*"
                lines.append(f"{timeline[:16]:>16} {step:>4} |{''.join(row)}| {live_bytes}")
        legend = [f"{letters[block.id]}={block.id}" for block in problem.blocks[:len(symbols)]]
        lines.append("blocks: " + " ".join(legend) + (f" (and {len(problem.blocks) - len(symbols)} more as #)"
                                                      if len(problem.blocks) > len(symbols) else ""))
        return "\n".join(lines)


# -- the problem as arrays (pass 0) --------------------------------------------------------------------


@dataclass(frozen=True)
class _Arrays:
    """Aligned sizes, a dense conflict matrix and ordering keys, computed once per problem."""

    sizes: np.ndarray  # int64, aligned sizes
    conflict: np.ndarray  # bool (n, n)
    first: np.ndarray  # int64, earliest first step over all Lives
    length: np.ndarray  # int64, total number of live steps over all Lives
    degree: np.ndarray  # int64, number of conflicting blocks


def _arrays(problem: Problem) -> _Arrays:
    n = len(problem.blocks)
    sizes = np.array([align_up(b.size, problem.alignment) for b in problem.blocks], dtype=np.int64)
    conflict = np.zeros((n, n), dtype=bool)
    nbytes = max(1, (n + 7) // 8)
    for i in range(n):
        raw = np.frombuffer(problem.conflict_mask(i).to_bytes(nbytes, "little"), dtype=np.uint8)
        conflict[i] = np.unpackbits(raw, bitorder="little")[:n].astype(bool)
    first = np.array([min(lv.first for lv in b.lives) for b in problem.blocks], dtype=np.int64)
    length = np.array([sum(lv.last - lv.first + 1 for lv in b.lives) for b in problem.blocks], dtype=np.int64)
    degree = conflict.sum(axis=1).astype(np.int64)
    return _Arrays(sizes, conflict, first, length, degree)


# -- orderings (pass 1) -------------------------------------------------------------------------------

_Key = Callable[[_Arrays, int], tuple[int, ...]]

ORDERINGS: dict[str, _Key] = {
    "size": lambda a, i: (-int(a.sizes[i]), int(a.first[i]), i),
    "lifetime": lambda a, i: (-int(a.length[i]), -int(a.sizes[i]), i),
    "first-use": lambda a, i: (int(a.first[i]), -int(a.sizes[i]), i),
    "size-x-lifetime": lambda a, i: (-int(a.sizes[i]) * int(a.length[i]), -int(a.sizes[i]), i),
    "degree": lambda a, i: (-int(a.degree[i]), -int(a.sizes[i]), i),
    "conflict-weight": lambda a, i: (-int(a.sizes[a.conflict[i]].sum()), -int(a.sizes[i]), i),
    "given": lambda a, i: (i,),
}
"""Block orderings tried by :func:`plan_arena`; ``size`` is the TFLite Micro / ExecuTorch baseline."""

FITS: tuple[str, ...] = ("best", "first")
"""Gap rules: ``best`` = smallest gap that fits (ExecuTorch), ``first`` = lowest offset that fits (TFLM)."""


def _order(arrays: _Arrays, ordering: str) -> list[int]:
    try:
        key = ORDERINGS[ordering]
    except KeyError:
        raise ProblemError(f"arena: unknown ordering {ordering!r}; known: {', '.join(ORDERINGS)}") from None
    return sorted(range(len(arrays.sizes)), key=lambda i: key(arrays, i))


# -- greedy placement (pass 2) ------------------------------------------------------------------------


def _place_greedy(arrays: _Arrays, order: Sequence[int], fit: str) -> np.ndarray:
    """Place blocks one by one in ``order`` into a gap between the placed blocks they conflict with.

    Gaps are the free ranges below the top of the placed conflicting blocks; the top is an unbounded gap.
    ``fit == "best"`` takes the smallest gap that is large enough (ties: lowest offset), ``"first"`` the
    lowest. Offsets stay multiples of the alignment because every size is.
    """
    n = len(arrays.sizes)
    offsets = np.zeros(n, dtype=np.int64)
    placed = np.zeros(n, dtype=bool)
    for i in order:
        size = int(arrays.sizes[i])
        sel = placed & arrays.conflict[i]
        if size == 0 or not sel.any():
            offsets[i] = 0
            placed[i] = True
            continue
        offs = offsets[sel]
        ends = offs + arrays.sizes[sel]
        rank = np.argsort(offs, kind="stable")
        offs, ends = offs[rank], ends[rank]
        prev_end = np.concatenate(([0], np.maximum.accumulate(ends)[:-1]))
        gaps = offs - prev_end
        fits = np.flatnonzero(gaps >= size)
        top = int(ends.max())
        if fits.size == 0:
            offsets[i] = top
        elif fit == "first":
            offsets[i] = int(prev_end[fits[0]])
        else:
            k = fits[int(np.argmin(gaps[fits]))]
            offsets[i] = int(prev_end[k])
        placed[i] = True
    return offsets


def _plan(problem: Problem, offsets: Sequence[int] | np.ndarray, arrays: _Arrays, strategy: str,
          optimal: bool = False) -> ArenaPlan:
    offs = [int(o) for o in offsets]
    arena = max((o + int(s) for o, s in zip(offs, arrays.sizes, strict=True)), default=0)
    return ArenaPlan(tuple(zip(problem.ids, offs, strict=True)), arena, problem.alignment, strategy, optimal)


def greedy_arena(problem: Problem, ordering: str = "size", fit: str = "best") -> ArenaPlan:
    """One greedy pass (baseline: ``ordering="size"``, ``fit="best"``, TFLite Micro / ExecuTorch style)."""
    if fit not in FITS:
        raise ProblemError(f"arena: unknown fit {fit!r}; known: {', '.join(FITS)}")
    arrays = _arrays(problem)
    return _plan(problem, _place_greedy(arrays, _order(arrays, ordering), fit), arrays, f"greedy:{ordering}/{fit}")


# -- Algorithm 8 buffers end to end (pass 3) ----------------------------------------------------------


def reuse_layout(problem: Problem, reuse: ReusePlan) -> ArenaPlan:
    """The shared buffers of Algorithm 8 laid end to end, each rounded up to the alignment.

    Members of one buffer never conflict (Algorithm 8, lines 5-20), and distinct buffers get disjoint byte
    ranges, so the layout is valid; its arena is ``Σ align_up(B_k.size)``, i.e. Algorithm 8's total when it
    ran on aligned sizes.
    """
    position: dict[str, int] = {}
    top = 0
    for buf in reuse.buffers:
        need = max([align_up(buf.size, problem.alignment)]
                   + [align_up(problem.block(m).size, problem.alignment) for m in buf.members])
        for member in buf.members:
            position[member] = top
        top += need
    missing = [b for b in problem.ids if b not in position]
    if missing:
        raise ProblemError(f"reuse layout: blocks in no buffer: {', '.join(missing[:5])}")
    return ArenaPlan(tuple((b, position[b]) for b in problem.ids), top, problem.alignment, "alg8-layout")


# -- exact search (pass 4) ----------------------------------------------------------------------------


def exact_arena(problem: Problem, *, upper: int | None = None, node_budget: int = 20_000,
                target: int | None = None) -> tuple[ArenaPlan | None, bool]:
    """Branch and bound over canonical placements; returns (best plan below ``upper`` or None, finished).

    Canonical form: push every block down until it rests on a conflicting block or on 0 (this never grows
    the arena). Listing the blocks by (offset, index), each block's offset equals the highest end of the
    conflicting blocks listed before it. So it suffices to enumerate sequences in which every next block,
    stacked on the conflicting blocks already placed, has an (offset, index) larger than its predecessor's.

    Bounds at a node with last placed offset ``o``: every remaining block ``i`` ends at least at
    ``max(stack_i, o) + size_i``; the remaining members ``R`` of a clique (blocks live at one step of one
    timeline) end at least at ``min_{i∈R} max(stack_i, o) + Σ_{i∈R} size_i``. A node whose bound reaches the
    incumbent is cut; the search stops at ``target`` (the lower bound) or after ``node_budget`` nodes.
    ``finished`` is true when the space was exhausted, i.e. the returned (or ``upper``) arena is optimal.
    """
    arrays = _arrays(problem)
    search = _BranchAndBound(problem, arrays, upper, target, node_budget)
    search.run()
    if search.best_offsets is None:
        return None, search.finished
    optimal = search.finished or search.best <= search.goal
    return _plan(problem, search.best_offsets, arrays, "exact", optimal), search.finished


class _BranchAndBound:
    """State of :func:`exact_arena`: blocks that conflict with something, renumbered ``0..m-1``."""

    def __init__(self, problem: Problem, arrays: _Arrays, upper: int | None, target: int | None,
                 node_budget: int) -> None:
        n = len(arrays.sizes)
        active = [i for i in range(n) if arrays.sizes[i] > 0 and arrays.conflict[i].any()]
        active.sort(key=lambda i: (-int(arrays.sizes[i]), i))
        local = {i: k for k, i in enumerate(active)}
        self.n = n
        self.active = active
        self.size = [int(arrays.sizes[i]) for i in active]
        self.neighbours = [[local[j] for j in active if arrays.conflict[i, j]] for i in active]
        self.cliques = _local_cliques(problem, local)
        # the cliques each block is in: the bound walks the remaining blocks once, not every clique's members
        self.cliques_of = [[c for c, clique in enumerate(self.cliques) if clique >> k & 1]
                           for k in range(len(active))]
        # twins (same size, same conflicts) are interchangeable: place them in index order only
        self.earlier_twins = [
            _mask_bits(t for t in range(k) if self.size[t] == self.size[k]
                       and set(self.neighbours[t]) - {k} == set(self.neighbours[k]) - {t})
            for k in range(len(active))
        ]
        self.best = upper if upper is not None else int(arrays.sizes.sum()) + 1
        self.goal = target if target is not None else 0
        self.budget = node_budget
        self.nodes = 0
        self.finished = True
        self.best_offsets: list[int] | None = None
        self.offset = [0] * len(active)
        self.stack = [0] * len(active)

    def run(self) -> None:
        self._search((1 << len(self.active)) - 1, (-1, -1), 0)

    def _bound(self, remaining: int, last: int, arena: int) -> int:
        """The lower bound of the class docstring, in one walk over the remaining blocks: each adds its own end
        and its start and size to the cliques it is in; a clique with two remaining members or more bounds
        by its earliest start plus their sizes."""
        bound = arena
        clique_start: dict[int, int] = {}
        clique_size: dict[int, int] = {}
        clique_members: dict[int, int] = {}
        stack, size = self.stack, self.size
        while remaining:
            low = remaining & -remaining
            remaining ^= low
            k = low.bit_length() - 1
            start = stack[k] if stack[k] > last else last
            if start + size[k] > bound:
                bound = start + size[k]
            for c in self.cliques_of[k]:
                if c in clique_members:
                    if start < clique_start[c]:
                        clique_start[c] = start
                    clique_size[c] += size[k]
                    clique_members[c] += 1
                else:
                    clique_start[c], clique_size[c], clique_members[c] = start, size[k], 1
        for c, members in clique_members.items():
            if members > 1 and clique_start[c] + clique_size[c] > bound:
                bound = clique_start[c] + clique_size[c]
        return bound

    def _search(self, remaining: int, last: tuple[int, int], arena: int) -> bool:
        """Returns True to stop the whole search (target reached or budget spent)."""
        self.nodes += 1
        if self.nodes > self.budget:
            self.finished = False
            return True
        if not remaining:
            if arena < self.best:
                self.best = arena
                self.best_offsets = [0] * self.n
                for k, i in enumerate(self.active):
                    self.best_offsets[i] = self.offset[k]
            return self.best <= self.goal
        if self._bound(remaining, last[0], arena) >= self.best:
            return False
        options = sorted(((self.stack[k], k) for k in _bits(remaining)
                          if (self.stack[k], k) > last and not self.earlier_twins[k] & remaining),
                         key=lambda o: (o[0] + self.size[o[1]], o))
        for off, k in options:
            end = off + self.size[k]
            saved = [(j, self.stack[j]) for j in self.neighbours[k] if self.stack[j] < end]
            for j, _ in saved:
                self.stack[j] = end
            self.offset[k] = off
            stop = self._search(remaining & ~(1 << k), (off, k), max(arena, end))
            for j, old in saved:
                self.stack[j] = old
            if stop:
                return True
        return False


def _mask_bits(indices: Iterable[int]) -> int:
    mask = 0
    for i in indices:
        mask |= 1 << i
    return mask


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _local_cliques(problem: Problem, local: Mapping[int, int]) -> list[int]:
    """Live sets at every first step of every timeline, renumbered, deduplicated, maximal ones only."""
    masks: set[int] = set()
    for tp in timeline_points(problem):
        for mask in tp.masks:
            m = 0
            for i in _bits(mask):
                if i in local:
                    m |= 1 << local[i]
            if m & (m - 1):
                masks.add(m)
    ordered = sorted(masks, key=lambda m: (-m.bit_count(), m))
    return [m for k, m in enumerate(ordered) if not any(m & o == m for o in ordered[:k])]


# -- driver -------------------------------------------------------------------------------------------


def plan_arena(problem: Problem, *, exact_limit: int = 14, node_budget: int = 20_000,
               orderings: Sequence[str] | None = None, bound: int | None = None) -> ArenaPlan:
    """The smallest arena found by the passes above (greedy orderings x fits, Algorithm 8 layout, exact).

    Candidates are compared by arena size; ties keep the earlier candidate (the baseline comes first). The
    exact search runs when some candidate misses the lower bound and the problem has at most
    ``exact_limit`` blocks that conflict with something. The result is never larger than
    ``buffers_reuse(problem, aligned=True).total``. ``bound``: ``lower_bound(problem)`` when the caller has it.
    """
    arrays = _arrays(problem)
    bound = lower_bound(problem) if bound is None else bound
    candidates: list[ArenaPlan] = []
    for ordering in orderings or tuple(ORDERINGS):
        order = _order(arrays, ordering)
        for fit in FITS:
            plan = _plan(problem, _place_greedy(arrays, order, fit), arrays, f"greedy:{ordering}/{fit}")
            candidates.append(plan)
            if plan.arena_bytes <= bound:
                return _proven(plan)
    candidates.append(reuse_layout(problem, buffers_reuse(problem, aligned=True)))
    candidates.append(reuse_layout(problem, buffers_reuse(problem, aligned=False)))
    best = min(candidates, key=lambda p: p.arena_bytes)
    if best.arena_bytes <= bound:
        return _proven(best)
    searchable = int(sum(1 for i in range(len(arrays.sizes)) if arrays.sizes[i] > 0 and arrays.conflict[i].any()))
    if searchable <= exact_limit:
        exact, finished = exact_arena(problem, upper=best.arena_bytes, node_budget=node_budget, target=bound)
        if exact is not None:
            return exact
        if finished:
            return ArenaPlan(best.offsets, best.arena_bytes, best.alignment, best.strategy, True)
    return best


def _proven(plan: ArenaPlan) -> ArenaPlan:
    return ArenaPlan(plan.offsets, plan.arena_bytes, plan.alignment, plan.strategy, True)
