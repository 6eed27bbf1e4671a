"""One summary of the memory figures of a problem: naive, Algorithm 8 reuse, arena and the lower bound."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from sbrs.memory.arena import ArenaPlan, plan_arena
from sbrs.memory.bounds import lower_bound, naive_bytes
from sbrs.memory.problem import Problem
from sbrs.memory.reuse import ReusePlan, buffers_reuse

__all__ = ["MemorySummary", "summarize"]


@dataclass(frozen=True)
class MemorySummary:
    """DESIGN.md "Memory" buffer figures in bytes (``*_aligned``: sizes rounded up to ``alignment``).

    ``naive`` is Table 6.1's allocation, ``reuse`` Algorithm 8's total (Table 6.2), ``arena`` the offset
    plan, ``lower_bound`` the proven bound of :func:`sbrs.memory.bounds.lower_bound`.
    """

    blocks: int
    alignment: int
    naive: int
    naive_aligned: int
    reuse: int
    reuse_aligned: int
    arena: int
    lower_bound: int
    arena_strategy: str
    arena_optimal: bool

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dictionary."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemorySummary:
        """Inverse of :meth:`to_dict`."""
        return cls(**dict(data))

    def to_json(self) -> str:
        """JSON text of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), sort_keys=True)


def summarize(problem: Problem, *, arena: ArenaPlan | None = None, reuse: ReusePlan | None = None) -> MemorySummary:
    """Compute (or take) the plans and collect the figures of :class:`MemorySummary`."""
    reuse = reuse if reuse is not None else buffers_reuse(problem)
    reuse_aligned = buffers_reuse(problem, aligned=True)
    arena = arena if arena is not None else plan_arena(problem)
    return MemorySummary(
        blocks=len(problem.blocks),
        alignment=problem.alignment,
        naive=naive_bytes(problem),
        naive_aligned=naive_bytes(problem, aligned=True),
        reuse=reuse.total,
        reuse_aligned=reuse_aligned.total,
        arena=arena.arena_bytes,
        lower_bound=lower_bound(problem),
        arena_strategy=arena.strategy,
        arena_optimal=arena.optimal,
    )
