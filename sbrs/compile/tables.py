"""The transition tables as data: what a build stores and a runtime reads (``sbrs.compile.transitions`` makes them).

Kept apart from the analysis that computes them, so that ``sbrs run`` imports these few dataclasses and nothing
of the compile stage's algorithms (tests/conftest.py, ``FORBIDDEN``): the module of the analysis alone cost a
run's start 8-16 ms (its dataclasses made at import, measured with ``-X importtime``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TRANSITION_MODES: tuple[str, ...] = ("sbrs-tp", "naive")

#: One arena byte range a step touches: (tensor id, start, end), end exclusive.
Range = tuple[str, int, int]


@dataclass(frozen=True)
class StepAccess:
    """The arena bytes step φ^s_i touches: the unit it calls, what it reads and what it writes."""

    unit: str
    reads: tuple[Range, ...]
    writes: tuple[Range, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "reads": [list(r) for r in self.reads], "writes": [list(r) for r in self.writes]}


@dataclass(frozen=True)
class PairTable:
    """The transition tables of one ordered pair o → n (all 1-based old step indices, one entry per new step).

    ``x``: Algorithm 6 with byte hazards (what the lock-step Algorithm 7 would use); ``wait``: the hazard-only
    waits the runtime executes (module docstring); ``thesis_x``: Algorithm 6 verbatim (same unit), unsafe.
    """

    old: str
    new: str
    old_steps: int
    x: tuple[int, ...]
    wait: tuple[int, ...]
    thesis_x: tuple[int, ...]

    @property
    def key(self) -> str:
        return f"{self.old}->{self.new}"

    def overlap_steps(self, ssr_step: int = 1) -> int:
        """New steps that may start before the old frame ends when the SSR arrives at old step ``ssr_step``.

        New steps run in order, so step i waits for every earlier new step's wait as well (the running
        maximum of ``wait``): one that must wait for the whole old frame holds back all after it."""
        count, waited = 0, ssr_step
        for wait in self.wait:
            waited = max(waited, wait)
            count += waited < self.old_steps
        return count

    def to_dict(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, "old_steps": self.old_steps, "x": list(self.x),
                "wait": list(self.wait), "thesis_x": list(self.thesis_x)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairTable:
        return cls(str(data["old"]), str(data["new"]), int(data["old_steps"]), tuple(map(int, data["x"])),
                   tuple(map(int, data["wait"])), tuple(map(int, data["thesis_x"])))


@dataclass(frozen=True)
class TransitionPlan:
    """X^{o→n} for every ordered pair of a ``UnitPlan`` (thesis: stored in the control node), JSON-able.

    ``arena`` says how the plan's arena was laid out: ``shared`` (scenario timelines only, the normal plan) or
    ``apart`` (``plan_apart``: tensors that overlap during transitions kept apart).
    """

    app: str
    granularity: str
    arena: str
    arena_bytes: int
    pairs: Mapping[str, PairTable]
    shadow: Mapping[str, int] | None = None  # tensor id → offset of its shadow slot (arena ``shadow``)

    def table(self, old: str, new: str) -> PairTable:
        return self.pairs[f"{old}->{new}"]

    def to_dict(self) -> dict[str, Any]:
        return {"app": self.app, "granularity": self.granularity, "arena": self.arena,
                "arena_bytes": self.arena_bytes, "pairs": {key: t.to_dict() for key, t in self.pairs.items()},
                "shadow": None if self.shadow is None else dict(self.shadow)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TransitionPlan:
        shadow = data.get("shadow")
        return cls(str(data["app"]), str(data["granularity"]), str(data["arena"]), int(data["arena_bytes"]),
                   {key: PairTable.from_dict(t) for key, t in data["pairs"].items()},
                   None if shadow is None else {str(k): int(v) for k, v in shadow.items()})


@dataclass(frozen=True)
class ResumeTable:
    """Where the frame in flight on ``old`` may continue on ``new`` (``runtime.on_switch: resume``).

    Beyond the thesis: Algorithms 6 and 7 let the frame in flight finish on the old scenario and start the next
    frame on the new one; SBRS-TP's transition never hands a frame from one scenario to the other. Here a switch
    request stops the old frame after ``c`` finished steps and the *same* frame continues on ``new`` from new
    step ``r + 1``: the new scenario's steps 1..r are the old scenario's steps 1..r (the same execution unit,
    bound to the same tensors: the shared prefix of φ^o and φ^n the supergraph gives, ``common_prefix``), so
    their outputs already sit in the arena with the values ``new`` would compute, provided no old step after r
    overwrote a byte that ``new``'s remaining steps still read (its *live-in* tensors at r).

    ``after[c]`` (c = 0..|φ^o|): the deepest such r ≤ c when the old frame stopped between steps c and c + 1;
    ``during[c]`` (c = 0..|φ^o| - 1): the same when it stopped inside step c + 1 (``RunOptions.terminate``:
    that call may have written part of its outputs, so they count as written). 0 means nothing can be taken
    over: the frame runs again from its start on ``new`` (copy-in included), as under ``cancel``.
    ``prefix``: the length of the shared prefix.
    """

    old: str
    new: str
    prefix: int
    after: tuple[int, ...]
    during: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, "prefix": self.prefix, "after": list(self.after),
                "during": list(self.during)}
