"""Algorithm 8 of the thesis (Section 6.5.1): schedule-aware buffers reuse among and within CNNs.

A greedy pass over the blocks (edges) in problem order: each block joins the existing shared buffer none of
whose members it conflicts with and whose size grows least, or opens a new buffer of its own size. The result
is the set ``B`` of shared buffers (Table 6.2); its memory cost is ``Σ B_k.size`` (Equation 2.7).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sbrs.memory.problem import Problem, ProblemError, align_up

__all__ = ["ReusePlan", "SharedBuffer", "buffers_reuse"]


@dataclass(frozen=True)
class SharedBuffer:
    """One shared buffer ``B_k``: its size and the blocks (edges) that store their data in it."""

    id: str
    size: int
    members: tuple[str, ...]


@dataclass(frozen=True)
class ReusePlan:
    """Output of Algorithm 8: shared buffers ``B`` and their total size ``Σ B_k.size`` (Equation 2.7).

    ``alignment`` is 1 when buffer sizes are the raw block sizes (the thesis counts tokens), or the problem's
    alignment when block sizes were rounded up before the algorithm ran.
    """

    buffers: tuple[SharedBuffer, ...]
    total: int
    alignment: int = 1

    def buffer_of(self, block_id: str) -> SharedBuffer:
        """The shared buffer holding ``block_id``."""
        for buf in self.buffers:
            if block_id in buf.members:
                return buf
        raise ProblemError(f"reuse plan: block {block_id!r} is in no buffer")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dictionary."""
        return {
            "alignment": self.alignment,
            "total": self.total,
            "buffers": [{"id": b.id, "size": b.size, "members": list(b.members)} for b in self.buffers],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReusePlan:
        """Inverse of :meth:`to_dict`."""
        buffers = tuple(SharedBuffer(str(b["id"]), int(b["size"]), tuple(str(m) for m in b["members"]))
                        for b in data["buffers"])
        return cls(buffers, int(data["total"]), int(data.get("alignment", 1)))

    def to_json(self) -> str:
        """JSON text of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ReusePlan:
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))


@dataclass
class _OpenBuffer:
    """A buffer while Algorithm 8 runs: members, their bitmask and the current size."""

    members: list[int]
    mask: int
    size: int


def buffers_reuse(problem: Problem, *, aligned: bool = False, order: Sequence[str] | None = None) -> ReusePlan:
    """Algorithm 8, lines 1-36: assign every block to a shared buffer, reusing buffers where possible.

    Blocks are visited in ``order`` (default: problem order, which the caller lists partition by partition
    and edge by edge, as in lines 2-3). With ``aligned`` the block sizes are rounded up to the problem's
    alignment first (the sizes an arena would use); otherwise the raw sizes are used, as in the thesis.
    """
    ids = problem.ids if order is None else tuple(order)
    if sorted(ids) != sorted(problem.ids):
        raise ProblemError("buffers reuse: order must list every block exactly once")
    alignment = problem.alignment if aligned else 1
    buffers: list[_OpenBuffer] = []  # line 1: B <- {}
    for block_id in ids:  # lines 2-3: every edge of every partition
        i = problem.index(block_id)
        size = align_up(problem.blocks[i].size, alignment)
        reusable = _reusable_buffers(problem, i, buffers)  # lines 4-20
        if not reusable:  # lines 21-25
            buffers.append(_OpenBuffer([i], 1 << i, size))
            continue
        best, cost_min = _cheapest_buffer(reusable, size)  # lines 27-33
        best.members.append(i)  # line 34
        best.mask |= 1 << i
        best.size += cost_min  # line 35
    shared = tuple(
        SharedBuffer(f"B{k + 1}", b.size, tuple(problem.blocks[m].id for m in b.members))
        for k, b in enumerate(buffers)
    )
    return ReusePlan(shared, sum(b.size for b in shared), alignment)  # line 36


def _reusable_buffers(problem: Problem, i: int, buffers: Sequence[_OpenBuffer]) -> list[_OpenBuffer]:
    """Algorithm 8, lines 4-20: the buffers ``B_reuse`` none of whose members conflicts with block ``i``.

    Lines 7-18 test every member ``e_zq^r`` of ``B_k`` against the edge: a member on a pipeline-parallel
    partition (lines 9-11) or with an overlapping step interval on the same partition (lines 13-17) makes
    the buffer unsuitable. The block's precomputed conflict mask holds exactly those members, so the test is
    one AND of two bitmasks.
    """
    conflicts = problem.conflict_mask(i)
    return [b for b in buffers if not (b.mask & conflicts)]


def _cheapest_buffer(reusable: Sequence[_OpenBuffer], size: int) -> tuple[_OpenBuffer, int]:
    """Algorithm 8, lines 27-33: the first buffer with minimal ``cost = max(size - B_k.size, 0)``."""
    best = reusable[0]
    cost_min = max(size - best.size, 0)
    for buf in reusable[1:]:
        cost = max(size - buf.size, 0)
        if cost < cost_min:  # strict: ties keep the earlier buffer
            best, cost_min = buf, cost
    return best, cost_min
