"""The memory-planning problem: blocks of bytes, their lifetimes on timelines, and which of them conflict.

This is the model-independent input of every planner in :mod:`sbrs.memory`. It generalises the CNN-based
application tuple ``(CNNs, B, P, J, {schedule_1..schedule_|P|})`` of thesis Section 6.4:

- a *block* is one tensor that needs memory (an edge ``e_ij^n`` with its naive buffer ``B_z`` of Table 6.1);
- a *timeline* is one schedule (``schedule_m`` of partition ``P_m``, or one scenario's steps ``φ^s``);
- a :class:`Live` is the inclusive step interval ``[start_i, end_j]`` of Algorithm 8, lines 13-16, on one
  timeline; a block may be live on several timelines (a supergraph edge shared by two scenarios, or an edge
  crossing from partition ``P_2`` to ``P_3``);
- ``concurrent`` is the pipeline-parallel set ``J`` (Algorithm 8, line 10).

Two blocks *conflict* (may not share bytes) exactly when Algorithm 8, lines 7-18, would refuse to put them in
one buffer: they have Lives on one timeline whose intervals overlap (line 17), or Lives on two different
timelines of one concurrent set (lines 9-11). Timelines that are not declared concurrent never conflict:
only one scenario (one non-parallel partition) runs at a time.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sbrs.errors import SbrsError

__all__ = [
    "Block",
    "Live",
    "Problem",
    "ProblemError",
    "align_up",
    "lifetimes_from_schedule",
    "lives_conflict",
    "merge_blocks",
]


class ProblemError(SbrsError, ValueError):
    """A malformed memory-planning problem or plan (an internal contract broken, CLI exit status 1)."""


def align_up(size: int, alignment: int) -> int:
    """``size`` rounded up to a multiple of ``alignment`` (``alignment >= 1``)."""
    return -(-size // alignment) * alignment


@dataclass(frozen=True)
class Live:
    """A block is live on ``timeline`` from step ``first`` to step ``last``, both inclusive.

    The interval ``[start_i, end_j]`` of Algorithm 8, lines 13-16: from the first step of the producer to the
    last step of the consumer in the timeline's schedule.
    """

    timeline: str
    first: int
    last: int

    def __post_init__(self) -> None:
        if not isinstance(self.timeline, str) or not self.timeline:
            raise ProblemError(f"live: timeline must be a non-empty string, got {self.timeline!r}")
        if self.first > self.last:
            raise ProblemError(f"live on {self.timeline}: first step {self.first} > last step {self.last}")

    def overlaps(self, other: Live) -> bool:
        """Algorithm 8, line 17: same timeline and ``[first, last]`` intervals intersect."""
        return self.timeline == other.timeline and self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class Block:
    """One tensor that needs ``size`` bytes (or tokens) while it is live (a naive buffer of Table 6.1)."""

    id: str
    size: int
    lives: tuple[Live, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ProblemError(f"block: id must be a non-empty string, got {self.id!r}")
        if not isinstance(self.size, int) or self.size < 0:
            raise ProblemError(f"block {self.id}: size must be an integer >= 0, got {self.size!r}")
        if not self.lives:
            raise ProblemError(f"block {self.id}: needs at least one live interval")
        object.__setattr__(self, "lives", tuple(self.lives))

    @property
    def timelines(self) -> frozenset[str]:
        """The timelines this block is live on."""
        return frozenset(live.timeline for live in self.lives)


def lives_conflict(a: Block, b: Block, concurrent: Iterable[frozenset[str]]) -> bool:
    """The plain definition of a conflict, straight from Algorithm 8, lines 7-18 (no precomputation).

    ``a`` and ``b`` conflict when a Live of ``a`` and a Live of ``b`` are on one timeline and overlap (line 17),
    or are on two different timelines that belong to one concurrent set ``J_r`` (lines 9-11). A block never
    conflicts with itself. :meth:`Problem.conflicts` is the fast equivalent; the checker uses this one so
    that it does not share code with the planners.
    """
    if a.id == b.id:
        return False
    groups = list(concurrent)
    for la in a.lives:
        for lb in b.lives:
            if la.timeline == lb.timeline:
                if la.first <= lb.last and lb.first <= la.last:
                    return True
            elif any(la.timeline in g and lb.timeline in g for g in groups):
                return True
    return False


@dataclass(frozen=True)
class Problem:
    """Blocks to place, the concurrent timeline sets ``J`` and the byte alignment of offsets and sizes.

    The order of ``blocks`` is meaningful: Algorithm 8 visits blocks in this order (thesis: partition by
    partition, edge by edge, Algorithm 8, lines 2-3). Conflicts are precomputed once as one bitmask per
    block (bit ``j`` of ``conflict_mask(i)`` set when blocks ``i`` and ``j`` conflict), in time proportional to
    the number of Lives times the number of distinct start steps they span, plus one big-integer OR per
    block and pair of concurrent timelines.
    """

    blocks: tuple[Block, ...]
    concurrent: frozenset[frozenset[str]] = frozenset()
    alignment: int = 64

    if TYPE_CHECKING:  # derived in __post_init__; not dataclass fields, so not in repr, eq or asdict
        _index: dict[str, int]
        _masks: tuple[int, ...]

    def __post_init__(self) -> None:
        blocks = tuple(self.blocks)
        object.__setattr__(self, "blocks", blocks)
        object.__setattr__(self, "concurrent", frozenset(frozenset(g) for g in self.concurrent))
        if not isinstance(self.alignment, int) or self.alignment < 1:
            raise ProblemError(f"problem: alignment must be an integer >= 1, got {self.alignment!r}")
        index: dict[str, int] = {}
        for i, block in enumerate(blocks):
            if block.id in index:
                raise ProblemError(f"problem: duplicate block id {block.id!r}")
            index[block.id] = i
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_masks", _conflict_masks(blocks, self.concurrent))

    # -- queries ---------------------------------------------------------------------------------------

    @property
    def ids(self) -> tuple[str, ...]:
        """Block ids in problem order."""
        return tuple(b.id for b in self.blocks)

    @property
    def timelines(self) -> tuple[str, ...]:
        """Every timeline that some block is live on, in order of first appearance."""
        seen: dict[str, None] = {}
        for block in self.blocks:
            for live in block.lives:
                seen.setdefault(live.timeline, None)
        return tuple(seen)

    def index(self, block_id: str) -> int:
        """Position of ``block_id`` in :attr:`blocks`."""
        try:
            return self._index[block_id]
        except KeyError:
            raise ProblemError(f"problem: unknown block {block_id!r}") from None

    def block(self, block_id: str) -> Block:
        """The block called ``block_id``."""
        return self.blocks[self.index(block_id)]

    def aligned_size(self, block_id: str) -> int:
        """The block's size rounded up to :attr:`alignment`."""
        return align_up(self.block(block_id).size, self.alignment)

    def conflict_mask(self, i: int) -> int:
        """Bitmask over block indices of the blocks that conflict with block ``i``."""
        return self._masks[i]

    def conflicts(self, a: str, b: str) -> bool:
        """True when blocks ``a`` and ``b`` may not share bytes (Algorithm 8, lines 7-18)."""
        return bool((self._masks[self.index(a)] >> self.index(b)) & 1)

    def degree(self, i: int) -> int:
        """Number of blocks that conflict with block ``i``."""
        return self._masks[i].bit_count()

    def with_blocks(self, blocks: Iterable[Block]) -> Problem:
        """The same problem (concurrent sets, alignment) with other blocks."""
        return Problem(tuple(blocks), self.concurrent, self.alignment)

    # -- JSON ----------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dictionary."""
        return {
            "alignment": self.alignment,
            "concurrent": sorted(sorted(g) for g in self.concurrent),
            "blocks": [
                {"id": b.id, "size": b.size, "lives": [[lv.timeline, lv.first, lv.last] for lv in b.lives]}
                for b in self.blocks
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Problem:
        """Inverse of :meth:`to_dict`."""
        blocks = tuple(
            Block(str(b["id"]), int(b["size"]), tuple(Live(str(t), int(f), int(la)) for t, f, la in b["lives"]))
            for b in data["blocks"]
        )
        concurrent = frozenset(frozenset(str(t) for t in g) for g in data.get("concurrent", ()))
        return cls(blocks, concurrent, int(data.get("alignment", 64)))

    def to_json(self) -> str:
        """JSON text of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Problem:
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))


# -- conflict precomputation (pass) ----------------------------------------------------------------------


def _conflict_masks(blocks: Sequence[Block], concurrent: frozenset[frozenset[str]]) -> tuple[int, ...]:
    """One conflict bitmask per block: same-timeline overlaps plus concurrent-timeline pairs."""
    masks = [0] * len(blocks)
    on_timeline: dict[str, list[tuple[int, Live]]] = {}
    for i, block in enumerate(blocks):
        for live in block.lives:
            on_timeline.setdefault(live.timeline, []).append((i, live))
    for lives in on_timeline.values():
        _same_timeline_pass(lives, masks)
    for group in concurrent:
        _concurrent_group_pass(group, on_timeline, masks)
    for i in range(len(masks)):
        masks[i] &= ~(1 << i)
    return tuple(masks)


def _same_timeline_pass(lives: list[tuple[int, Live]], masks: list[int]) -> None:
    """Intervals on one timeline overlap iff one contains the other's first step (Algorithm 8, line 17).

    For every distinct first step ``p`` we collect the mask of Lives containing ``p``; a Live conflicts with
    every Live containing one of the first steps inside it.
    """
    points = sorted({live.first for _, live in lives})
    at_point = [0] * len(points)
    spans: list[tuple[int, int, int]] = []
    for i, live in lives:
        lo = bisect.bisect_left(points, live.first)
        hi = bisect.bisect_right(points, live.last)
        spans.append((i, lo, hi))
        bit = 1 << i
        for k in range(lo, hi):
            at_point[k] |= bit
    for i, lo, hi in spans:
        acc = 0
        for k in range(lo, hi):
            acc |= at_point[k]
        masks[i] |= acc


def _concurrent_group_pass(group: frozenset[str], on_timeline: Mapping[str, list[tuple[int, Live]]],
                           masks: list[int]) -> None:
    """Blocks on two different timelines of one set ``J_r`` always conflict (Algorithm 8, lines 9-11)."""
    members = sorted(t for t in group if t in on_timeline)
    tl_mask = {t: _mask_of(i for i, _ in on_timeline[t]) for t in members}
    for t in members:
        others = 0
        for u in members:
            if u != t:
                others |= tl_mask[u]
        for i, _ in on_timeline[t]:
            masks[i] |= others


def _mask_of(indices: Iterable[int]) -> int:
    mask = 0
    for i in indices:
        mask |= 1 << i
    return mask


# -- building problems from schedules ------------------------------------------------------------------


def lifetimes_from_schedule(timeline: str, steps: Sequence[tuple[str, Sequence[str], Sequence[str]]],
                            sizes: Mapping[str, int], *, keep: Iterable[str] = ()) -> list[Block]:
    """Blocks of one timeline from its schedule ``[(layer, inputs, outputs), ...]`` (steps numbered from 0).

    A tensor is live from the step that produces it to the last step that reads it (the interval
    ``[start_z, end_q]`` of Algorithm 8, lines 13-14). A tensor read but never produced (a graph or
    partition input) is live from step 0; a tensor never read (a graph or partition output), or named in
    ``keep``, stays live until the last step. Blocks come in order of first appearance in the schedule
    (the thesis' edge order). Combine timelines with :func:`merge_blocks`.
    """
    produced: dict[str, int] = {}
    first_read: dict[str, int] = {}
    last_read: dict[str, int] = {}
    order: dict[str, None] = {}
    for step, (layer, inputs, outputs) in enumerate(steps):
        for name in inputs:
            order.setdefault(name, None)
            first_read.setdefault(name, step)
            last_read[name] = step
        for name in outputs:
            order.setdefault(name, None)
            if name in produced:
                raise ProblemError(f"timeline {timeline}: tensor {name!r} produced twice (layer {layer})")
            produced[name] = step
    end = len(steps) - 1
    kept = set(keep)
    blocks: list[Block] = []
    for name in order:
        if name not in sizes:
            raise ProblemError(f"timeline {timeline}: no size for tensor {name!r}")
        first = produced.get(name, 0)
        if name in first_read and first_read[name] < first:
            raise ProblemError(f"timeline {timeline}: tensor {name!r} read at step {first_read[name]} "
                               f"before it is produced at step {first}")
        last = end if (name in kept or name not in last_read) else last_read[name]
        blocks.append(Block(name, int(sizes[name]), (Live(timeline, first, last),)))
    return blocks


def merge_blocks(blocks: Iterable[Block]) -> list[Block]:
    """Merge blocks with one id (one tensor live on several timelines) into one block, keeping first order."""
    merged: dict[str, Block] = {}
    for block in blocks:
        prev = merged.get(block.id)
        if prev is None:
            merged[block.id] = block
            continue
        if prev.size != block.size:
            raise ProblemError(f"block {block.id}: sizes differ between timelines ({prev.size} vs {block.size})")
        merged[block.id] = Block(block.id, block.size, prev.lives + block.lives)
    return list(merged.values())
