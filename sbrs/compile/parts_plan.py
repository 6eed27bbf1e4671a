"""Processing by parts as plain data: what ``sbrs.compile.parts`` compiles, a build stores and the runtime runs.

One type per idea, shared by the compiler, the build and the runtime: a :class:`LineBuffer` is the arena slot
of one tensor of one scenario, a :class:`BandCall` one ONNX Runtime call (or one feed of a streamed frame),
:class:`ScenarioParts` one scenario's calls and buffers, and :class:`PartsPlan` every scenario's, in ONE arena,
with the SBRS-TP transition tables. This module imports nothing heavier than the standard library, so a run
of a build by parts loads neither onnx nor the compiler nor the reduction search; the compiler
(``sbrs.compile.parts``), the fit to a memory limit (``sbrs.compile.fit``) and the tables
(``sbrs.compile.transitions.parts_transitions``) produce these values, ``sbrs.artifact`` stores them
(``PartsPlan.to_dict``) and ``sbrs.runtime`` binds them.

Steps and their bytes
    A step is one call: the line-buffer compactions it needs (``BandCall.moves``, numpy copies inside the
    arena) then one ``run_with_iobinding``. It reads the rows its inputs are bound to and the rows it moves
    from, and writes the rows its outputs are bound to and the rows it moves to. Copying the frame in belongs
    to step 1 (it writes the whole input buffer), copying the outputs out to the last step (it reads them).
    With a streamed input, *feed* steps write the rows of the caller's frame they copy (:func:`parts_accesses`).

Streamed input
    With a band on the graph input the frame is not copied in whole: the input has a line buffer like any
    other tensor, and feed steps (``BandCall.feed``, no session) copy each band's rows of the caller's frame,
    transposed to the rows layout, into it just before the calls that read them. The frame's copy-in then only
    takes the caller's array (no arena byte), and a feed writes the rows it copies (and moves the rows kept,
    as any line buffer), so the transition tables order feeds against the other frame's steps like any call.
    The feeds read the caller's array until the frame's last feed: a caller must not write into a frame's
    array before its result is out (``process`` may fetch the next frame while one is in flight).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # compile-time values, kept beside a plan compiled in memory, never in a build
    from sbrs.compile.tables import StepAccess, TransitionPlan
    from sbrs.memory import ArenaPlan, Problem

__all__ = ["FEED", "GRANULARITY", "MODELS_APP", "NCHW", "ROWS", "TO_NCHW", "TO_ROWS", "BandCall", "LineBuffer",
           "PartsPlan", "ScenarioParts", "call_file", "edge_operands", "parts_accesses"]

#: The granularity a runtime by parts reports (its steps are band calls, not execution units).
GRANULARITY = "parts"
#: The app name (and scenario ``model_kind``) of a runtime made from models, without an app YAML.
MODELS_APP = "models"
#: Layouts of a buffer: ``[H, N, C, W]``, one row contiguous, for tensors a band call touches
#: (``sbrs.compile.parts``, "Storage layout"), or NCHW, bound whole.
ROWS = "rows"
NCHW = "nchw"
#: ``[H, N, C, W]`` rows layout ↔ NCHW.
TO_ROWS = (2, 0, 1, 3)
TO_NCHW = (1, 2, 0, 3)
#: The key of a feed (no session: the runtime copies frame rows).
FEED = "feed"

Rows = tuple[str, int, int, int]


def call_file(key: str) -> str:
    """The build's file name of the ONNX model of calls with digest ``key`` (one file per distinct model)."""
    return f"c{key}.onnx"


@dataclass(frozen=True)
class LineBuffer:
    """The arena slot of one tensor of one scenario: ``capacity`` rows of ``row_bytes`` at ``offset``.

    ``layout`` is ``rows`` (``[H, N, C, W]``, row-major, for tensors a band call touches) or ``nchw``.
    ``first_call``/``last_call``: its life on the scenario's timeline of calls (the arena problem's).
    """

    tensor: str
    shape: tuple[int, ...]
    dtype: str
    layout: str
    capacity: int
    row_bytes: int
    first_call: int
    last_call: int
    offset: int = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the line buffer (the whole tensor when ``capacity`` is its height)."""
        return self.capacity * self.row_bytes

    @property
    def full_rows(self) -> int:
        """Rows of the whole tensor (its height; 1 for a tensor without one)."""
        return int(self.shape[2]) if len(self.shape) == 4 else 1

    def to_list(self) -> list[Any]:
        return [self.tensor, list(self.shape), self.dtype, self.layout, self.capacity, self.row_bytes,
                self.first_call, self.last_call, self.offset]

    @classmethod
    def from_list(cls, item: Sequence[Any]) -> LineBuffer:
        tensor, shape, dtype, layout, capacity, row, first, last, offset = item
        return cls(_name(tensor), tuple(map(int, shape)), _name(dtype), _name(layout), int(capacity), int(row),
                   int(first), int(last), int(offset))


@dataclass(frozen=True)
class BandCall:
    """One ``run_with_iobinding`` of the session ``key``: ``layers`` fused into one ONNX model, at band
    ``phase`` (0: whole).

    ``inputs``/``outputs``: ``(tensor, lo, hi, slot)``, rows ``[lo, hi)`` bound at buffer slot ``slot``.
    ``moves``: ``(tensor, src_slot, dst_slot, rows)``, the line-buffer compactions done before the call.
    ``pads``: per window-reading layer, the top/bottom padding of this band (its model variant). ``key``: the
    digest of the call's ONNX model (calls with equal keys share one session). ``feed``: no session (``key`` is
    ``FEED``); rows ``[lo, hi)`` of the caller's frame are copied, in the rows layout, into the input's line
    buffer at the slot of its one output (module docstring, "Streamed input"). ``slices``: ``(layer, tensor,
    start, stop)``, rows a member of a tiled group reads out of those the call holds of ``tensor``. ``edge``:
    the call runs its group's *edge model*, whose slice rows and the band pads of the layers ``edge_pads`` (those
    whose pads differ within the group) are inputs (:func:`edge_operands`) rather than constants, so that the
    rare variants of a group (its first and last bands) share one session (``sbrs.compile.parts``, "Calls").
    """

    layers: tuple[str, ...]
    phase: int
    inputs: tuple[Rows, ...]
    outputs: tuple[Rows, ...]
    pads: tuple[tuple[str, int, int], ...] = ()
    moves: tuple[Rows, ...] = ()
    key: str = ""
    feed: bool = False
    slices: tuple[tuple[str, str, int, int], ...] = ()
    edge: bool = False
    edge_pads: tuple[str, ...] = ()

    @property
    def banded(self) -> bool:
        """Whether the call computes a band of rows (else its layers whole)."""
        return self.phase > 0

    def to_list(self) -> list[Any]:
        return [self.key, list(self.layers), self.phase, [list(i) for i in self.inputs],
                [list(o) for o in self.outputs], [list(p) for p in self.pads], [list(m) for m in self.moves],
                self.feed, [list(s) for s in self.slices], self.edge, list(self.edge_pads)]

    @classmethod
    def from_list(cls, item: Sequence[Any]) -> BandCall:
        key, layers, phase, inputs, outputs, pads, moves, feed, slices, edge, edge_pads = item
        return cls(tuple(map(_name, layers)), int(phase), _rows(inputs), _rows(outputs),
                   tuple((_name(n), int(t), int(b)) for n, t, b in pads), _rows(moves), _name(key), bool(feed),
                   tuple((_name(n), _name(t), int(a), int(b)) for n, t, a, b in slices), bool(edge),
                   tuple(map(_name, edge_pads)))


def edge_operands(call: BandCall) -> list[tuple[str, tuple[int, ...]]]:
    """The inputs of an edge model (``BandCall.edge``) and their int64 values for ``call``: per layer of
    ``edge_pads``, the ONNX ``Pad`` pads of its band (``[0, 0, top, 0, 0, 0, bottom, 0]``, NCHW begins then ends;
    its left and right pads stay the layer's own), per slice its start and stop row. The compiler names the edge
    model's inputs with them and the runtime binds their values, so both sides read this one function."""
    operands: list[tuple[str, tuple[int, ...]]] = []
    for layer, top, bottom in call.pads:
        if layer in call.edge_pads:
            operands.append((f"{layer}::band_pads", (0, 0, top, 0, 0, 0, bottom, 0)))
    for index, (_, _, start, stop) in enumerate(call.slices):
        operands.append((f"slice{index}.starts", (start,)))
        operands.append((f"slice{index}.ends", (stop,)))
    return operands


def _name(value: Any) -> str:
    """A layer, tensor or key name read from a build, interned: a plan by parts names the same few tensors in
    hundreds of calls, and JSON gives each occurrence a string of its own (MobileNetV2 at 14.9 MB: 567 calls)."""
    return sys.intern(str(value))


def _rows(items: Sequence[Sequence[Any]]) -> tuple[Rows, ...]:
    return tuple((_name(t), int(a), int(b), int(c)) for t, a, b, c in items)


@dataclass(frozen=True)
class ScenarioParts:
    """One scenario by parts: its band heights, its calls in order, its buffers, its frame input and outputs.

    ``band_rows``: the layers run by bands and their heights (the others whole); ``schedule_buffer_bytes``:
    the buffers of the CSDF schedule the calls were compiled from (Algorithm 10, line 5).
    """

    scenario: str
    band_rows: Mapping[str, int]
    calls: tuple[BandCall, ...]
    buffers: tuple[LineBuffer, ...]
    input: str
    outputs: tuple[str, ...]
    schedule_buffer_bytes: int = 0

    def buffer(self, tensor: str) -> LineBuffer:
        for buffer in self.buffers:
            if buffer.tensor == tensor:
                return buffer
        raise KeyError(tensor)

    @property
    def band_calls(self) -> int:
        """Calls that compute bands of rows."""
        return sum(1 for call in self.calls if call.banded)

    @property
    def streamed(self) -> bool:
        """Whether the frame is fed by rows (a band on the graph input) instead of copied in whole."""
        return any(call.feed for call in self.calls)

    @property
    def sessions(self) -> int:
        """Distinct call models (one session each) the scenario runs; feeds run none."""
        return len({call.key for call in self.calls if not call.feed})

    def summary(self) -> dict[str, Any]:
        """Plain JSON-ready summary (calls counted, not listed)."""
        return {"scenario": self.scenario, "calls": len(self.calls), "band_calls": self.band_calls,
                "sessions": self.sessions, "moves": sum(len(c.moves) for c in self.calls),
                "buffer_bytes": sum(b.nbytes for b in self.buffers), "banded_layers": dict(self.band_rows),
                "buffers": [{"tensor": b.tensor, "layout": b.layout, "rows": b.capacity, "full_rows": b.full_rows,
                             "bytes": b.nbytes, "offset": b.offset} for b in self.buffers]}

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "input": self.input, "outputs": list(self.outputs),
                "band_rows": dict(self.band_rows), "schedule_buffer_bytes": self.schedule_buffer_bytes,
                "calls": [call.to_list() for call in self.calls],
                "buffers": [buffer.to_list() for buffer in self.buffers]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScenarioParts:
        return cls(str(data["scenario"]), {str(k): int(v) for k, v in data["band_rows"].items()},
                   tuple(BandCall.from_list(c) for c in data["calls"]),
                   tuple(LineBuffer.from_list(b) for b in data["buffers"]), str(data["input"]),
                   tuple(map(str, data["outputs"])), int(data["schedule_buffer_bytes"]))


@dataclass(frozen=True)
class PartsPlan:
    """Every scenario by parts, all their buffers in one arena (Algorithm 10, line 9): what an app with a
    memory limit that reuse alone misses runs, kept in the build manifest.

    ``arena_bytes`` (``lower_bound_bytes``: the most bytes live at once), placed by ``strategy``;
    ``transitions``: the tables of every ordered pair (``sbrs.compile.transitions.parts_transitions``; None
    before they are computed); ``reduction``: where the band heights came from (the memory limit, the search's
    planned figures, the chosen point, the transition cut); ``model_bytes``: the models' parameter and naive
    buffer bytes (thesis Eq. 2.6-2.7), kept because the models are not. ``problem`` and ``arena``: the arena
    problem and its placement, in memory only (a plan read from a build has neither).
    """

    app: str
    scenarios: Mapping[str, ScenarioParts]
    arena_bytes: int
    lower_bound_bytes: int
    alignment: int
    strategy: str
    transitions: TransitionPlan | None = None
    reduction: Mapping[str, Any] = field(default_factory=dict)
    model_bytes: Mapping[str, int] = field(default_factory=dict)
    problem: Problem | None = field(default=None, compare=False, repr=False)
    arena: ArenaPlan | None = field(default=None, compare=False, repr=False)
    #: How a runtime executes the plan (``UnitPlan.execution`` is ``units``).
    execution: ClassVar[str] = "parts"

    @property
    def granularity(self) -> str:
        """What a step is: a band call (``UnitPlan.granularity`` is ``auto`` or ``layer``)."""
        return GRANULARITY

    @property
    def memory_limit_bytes(self) -> int | None:
        limit = self.reduction.get("memory_limit_bytes")
        return None if limit is None else int(limit)

    @property
    def streams(self) -> int:
        """Band streams the runtime runs (``sbrs.reduction.ga.with_streams``): frames in flight at once, each in
        an arena of ``arena_bytes`` of its own, every stream on the same sessions."""
        return int(self.reduction.get("streams", 1))

    @property
    def call_keys(self) -> tuple[str, ...]:
        """Every distinct call model (one session each), in order of first use; feeds have none."""
        return tuple(dict.fromkeys(c.key for p in self.scenarios.values() for c in p.calls if not c.feed))

    def summary(self) -> dict[str, Any]:
        """Plain JSON-ready summary of the arena and every scenario (``ScenarioParts.summary``)."""
        return {"arena_bytes": self.arena_bytes, "lower_bound_bytes": self.lower_bound_bytes,
                "alignment": self.alignment, "strategy": self.strategy,
                "scenarios": {s: p.summary() for s, p in self.scenarios.items()}}

    def to_dict(self) -> dict[str, Any]:
        return {"app": self.app, "arena_bytes": self.arena_bytes, "lower_bound_bytes": self.lower_bound_bytes,
                "alignment": self.alignment, "strategy": self.strategy,
                "scenarios": {s: p.to_dict() for s, p in self.scenarios.items()},
                "transitions": None if self.transitions is None else self.transitions.to_dict(),
                "reduction": dict(self.reduction), "model_bytes": dict(self.model_bytes)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PartsPlan:
        from sbrs.compile.tables import TransitionPlan

        transitions = data["transitions"]
        return cls(str(data["app"]), {str(s): ScenarioParts.from_dict(p) for s, p in data["scenarios"].items()},
                   int(data["arena_bytes"]), int(data["lower_bound_bytes"]), int(data["alignment"]),
                   str(data["strategy"]), None if transitions is None else TransitionPlan.from_dict(transitions),
                   dict(data["reduction"]), {str(k): int(v) for k, v in data["model_bytes"].items()})


def parts_accesses(parts: ScenarioParts) -> tuple[StepAccess, ...]:
    """The arena bytes each call of ``parts`` touches, from its buffers' offsets (module docstring).

    Range names are ``scenario/tensor``; ``StepAccess.unit`` is the call's model key (calls with one key
    share one session). A feed writes the input rows it copies (its frame rows come from the caller's array,
    outside the arena); with a streamed input step 1 does not write the whole input buffer.
    """
    from sbrs.compile.tables import StepAccess

    buffers = {b.tensor: b for b in parts.buffers}

    def span(tensor: str, slot: int = 0, rows: int | None = None) -> tuple[str, int, int]:
        buffer = buffers[tensor]
        if buffer.layout != ROWS:
            return (f"{parts.scenario}/{tensor}", buffer.offset, buffer.offset + buffer.nbytes)
        start = buffer.offset + slot * buffer.row_bytes
        return (f"{parts.scenario}/{tensor}", start, start + (buffer.capacity - slot if rows is None else rows)
                * buffer.row_bytes)

    result: list[StepAccess] = []
    last = len(parts.calls) - 1
    for index, call in enumerate(parts.calls):
        reads = [span(t, slot, hi - lo) for t, lo, hi, slot in call.inputs]
        writes = [span(t, slot, o1 - o0) for t, o0, o1, slot in call.outputs]
        reads.extend(span(t, src, rows) for t, src, _, rows in call.moves)
        writes.extend(span(t, dst, rows) for t, _, dst, rows in call.moves)
        if index == 0 and not parts.streamed:
            writes.append(span(parts.input))
        if index == last:
            reads.extend(span(t) for t in parts.outputs)
        result.append(StepAccess(call.key, tuple(reads), tuple(writes)))
    return tuple(result)

