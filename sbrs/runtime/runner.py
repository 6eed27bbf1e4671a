"""The frame runner: what every frame of a runtime does, shared by the engine's loop, switching and streams.

A ``Runtime`` (``sbrs.runtime.engine``) loads sessions, binds its plan to the arena and offers the API; the
bound plan and the work every frame does on it are a ``FrameRunner``: check a frame (``checked_frame``), take
the pending switch request and copy the frame in (``start_frame``, ``take_request``), call the bound steps
(``calls``, and ``new_calls`` for a transition's new frame in its shadow slots), copy the outputs out and
record the result (``old_frame_result``, ``new_frame_result``, ``frame_result``), and, once the caller holds
the result, its bookkeeping (``settle``). The engine's frame loop, the switch paths (``sbrs.runtime.switching``)
and the band streams (``sbrs.runtime.streams``) all run frames through one runner, under its ``lock``; none of
them reaches into another's state.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.outputs.postprocess import FrameMeta, PostProcessor, value_of

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from sbrs.compile.tables import ResumeTable, StepAccess, TransitionPlan
    from sbrs.runtime.binding import Bound, Range, Step
    from sbrs.runtime.control_node import ControlNode, SwitchRecord, SwitchRequest

Frame = np.ndarray | Mapping[str, np.ndarray]
#: A frame computed but not yet copied out, as ``FrameRunner.old_frame_result`` takes it: scenario, stream index,
#: start time, the switch request it was the first frame of and the scenario before it, the transition mode.
OldFrame = tuple[str, int, float, "SwitchRequest | None", str, str]
#: Frames whose bookkeeping may wait while switch requests keep coming (``FrameRunner.settle``).
MAX_UNSETTLED = 8

#: ``FrameResult._value`` before its first read.
_NOT_COMPUTED: Any = object()


def frames_never_wait(frames: Iterable[Frame]) -> bool:
    """Whether taking the next of ``frames`` returns at once, never waiting for the world: frames held in memory (a
    list, a tuple, ``itertools.repeat``) or a source that does not deliver them at its own pace (``live`` false, as
    ``sbrs.run.sources.FrameSource`` has it for files, folders and synthetic frames). Anything else (a generator, a
    camera) may wait, and is taken as such."""
    return isinstance(frames, (list, tuple, itertools.repeat)) or getattr(frames, "live", None) is False


@dataclass(slots=True)  # not frozen: it is built on the switch's critical path, and frozen costs 3x
class FrameResult:
    """One processed frame: its index in the stream, the scenario that processed it, its outputs, its latency
    (from copying it in to its outputs copied out) and, on the first frame of a new scenario, the switch.

    ``value``: the outputs as the scenario's ``postprocess:`` makes them (top-k classes, detections, lists, or
    what the user's function returns), computed when first read, by the reader: the runtime hands over only its
    table of post-processors (``postprocessors``), so no switch waits for post-processing.
    """

    index: int
    scenario: str
    outputs: dict[str, np.ndarray]
    latency_s: float
    switch: SwitchRecord | None = None
    postprocessors: Mapping[str, PostProcessor] | None = field(default=None, repr=False, compare=False)
    _value: Any = field(default=_NOT_COMPUTED, init=False, repr=False, compare=False)

    @property
    def value(self) -> Any:
        """The post-processed outputs (computed on first read; a failing user function raises
        ``sbrs.outputs.PostprocessError``, one line, each time it is read)."""
        if self._value is _NOT_COMPUTED:
            self._value = value_of(self.postprocessors, self.outputs,
                                   FrameMeta(self.index, self.scenario, self.latency_s, self.switch))
        return self._value


class FrameRunner:
    """A runtime's bound plan and the work of every frame on it (module docstring).

    ``bound``: the plan bound to the arena (``calls``, ``copy_in``, ``copy_out``, ``copy_out_reads`` are its
    tables); ``new_bound``: the bindings a transition's new frame uses (the shadow slots under arena
    ``shadow``; ``bound`` otherwise), with ``new_calls``, ``new_copy_in``, ``new_copy_out``. ``node``: the
    control node; ``transitions``: the transition tables and ``transition_schedule`` (``priority`` or
    ``threads``, ``sbrs.runtime.switching.Transition``); ``postprocessors``: each scenario's, handed to its
    results; ``input_specs``: input name → (shape, dtype) of the app's frames.

    State the switch paths share, each written under ``lock`` (or by the thread running the frame):
    ``closed`` (the runtime was closed), ``worker`` (the ``threads`` schedule's worker thread, made on first
    use), ``cancellable`` (whether a request may cancel the frame in flight, ``switching.cancelling``),
    ``in_flight`` (under ``resume``: the step whose call runs now, 1-based; 0: none), ``transition_starts``
    (``switching.transition_starts``), ``resume`` and ``resume_keep`` (under ``resume``: where a frame stopped on
    o continues on n, ``sbrs.compile.tables.ResumeTable``, and which steps of o a request for n lets finish),
    ``preempt_from`` (under ``finish``: the first old step of o whose call a request for n stops,
    ``Runtime._interrupt_step``).
    """

    def __init__(self, node: ControlNode, bound: Bound, new_bound: Bound, *, transitions: TransitionPlan,
                 transition_schedule: str, postprocessors: Mapping[str, PostProcessor],
                 input_specs: Mapping[str, tuple[tuple[int, ...], np.dtype]]) -> None:
        self.node = node
        self.transitions = transitions
        self.transition_schedule = transition_schedule
        self.postprocessors = postprocessors
        self.input_specs = dict(input_specs)
        name = next(iter(self.input_specs))
        self._input_spec = (name, *self.input_specs[name])  # the one input, checked fast
        self.bound, self.new_bound = bound, new_bound
        self.calls: dict[str, tuple[Step, ...]] = bound.calls
        self.copy_in: dict[str, Callable[[np.ndarray], None]] = bound.copy_in
        self.copy_out: dict[str, dict[str, Callable[[], np.ndarray]]] = bound.copy_out
        self.copy_out_reads: dict[str, list[Range]] = bound.copy_out_reads
        self.new_calls: dict[str, tuple[Step, ...]] = new_bound.calls
        self.new_copy_in: dict[str, Callable[[np.ndarray], None]] = new_bound.copy_in
        self.new_copy_out: dict[str, dict[str, Callable[[], np.ndarray]]] = new_bound.copy_out
        self.lock = threading.Lock()
        #: The thread holding a switch's first result of a ``process`` generator, which keeps ``lock`` until it is
        #: asked for its next result (``Runtime.process``); None: none. That thread waiting for ``lock`` would wait
        #: for itself (``not_held_here``).
        self.held_by: int | None = None
        self.closed = False
        self.worker: ThreadPoolExecutor | None = None
        self.cancellable = True
        self.in_flight = 0
        self.transition_starts: dict[tuple[str, str], tuple[bool, bool]] = {}
        self.resume: dict[tuple[str, str], ResumeTable] = {}
        self.resume_keep: dict[tuple[str, str], tuple[bool, ...]] = {}
        self.preempt_from: dict[tuple[str, str], int] = {}
        # bookkeeping of frames already handed to the caller: (scenario, seconds, switch request, its record)
        self._unsettled: list[tuple[str, float, SwitchRequest | None, SwitchRecord | None]] = []

    def bound_accesses(self, *, new_frame: bool = False) -> dict[str, tuple[StepAccess, ...]]:
        """Each scenario's steps as the bytes really bound (``StepAccess``, offsets from the arena's base): what
        ``sbrs.compile.transitions.check_schedule`` checks against the transition tables. ``new_frame``: the
        bindings a transition's new frame uses (the shadow slots under arena ``shadow``; the same bindings
        otherwise)."""
        return (self.new_bound if new_frame else self.bound).step_accesses()

    def checked_frame(self, frame: Frame) -> dict[str, np.ndarray]:
        """``frame`` as input name → array, checked against the app's input (an ``InputError`` otherwise)."""
        name, shape, dtype = self._input_spec
        if type(frame) is np.ndarray and frame.shape == shape and (frame.dtype is dtype or frame.dtype == dtype):
            return {name: frame}  # the usual case, checked with the least work (it is in a switch's Δ)
        names = tuple(self.input_specs)
        if isinstance(frame, Mapping):
            if set(frame) != set(names):
                raise InputError(f"expected inputs {list(names)}, got {sorted(map(str, frame))}",
                                 field="frame")
            arrays = dict(frame)
        else:
            arrays = {names[0]: frame}
        for name, array in arrays.items():
            shape, dtype = self.input_specs[name]
            if not isinstance(array, np.ndarray):
                raise InputError(f"input '{name}': expected a numpy array, got {type(array).__name__}", field="frame")
            if array.shape != shape or array.dtype != dtype:
                raise InputError(f"input '{name}': got shape {list(array.shape)} {array.dtype}, the app's input is "
                                 f"{list(shape)} {dtype}", field="frame")
        return arrays

    def start_frame(self, arrays: Mapping[str, np.ndarray]) -> tuple[str, SwitchRequest | None, str, float]:
        """What every frame does first, whatever ``on_switch``: the bookkeeping of earlier frames unless a switch
        waits (then the switch goes first; the bookkeeping waits, bounded, as requests may never stop), the
        pending request taken, and the frame copied into the arena of the scenario now active. Returns the
        scenario before the take, the request, the scenario now active and the frame's start time."""
        previous, request, scenario = self.take_request()
        begin = time.perf_counter()
        for array in arrays.values():  # one app input (checked at load); a dict keeps the contract general
            self.copy_in[scenario](array)
        return previous, request, scenario, begin

    def take_request(self) -> tuple[str, SwitchRequest | None, str]:
        """``start_frame`` before the copy-in (band streams copy in on their own thread): the scenario before
        the take, the request and the scenario now active."""
        node = self.node
        if node.pending is None or len(self._unsettled) >= MAX_UNSETTLED:
            self.settle()
        previous = node.scenario
        request = node.take()  # under cancel and resume: clears ``terminate`` under the node's lock
        return previous, request, node.scenario

    def old_frame_result(self, scenario: str, index: int, begin: float, request: SwitchRequest | None,
                         previous: str, mode: str, cancelled_steps: int | None = None,
                         resumed_steps: int | None = None) -> FrameResult:
        """A frame computed on ``scenario`` from ``begin``, copied out now: its result, with the record of the
        switch it was the first frame of (``request`` from ``previous``, at a frame boundary, or stopped and
        run again or resumed: ``cancelled_steps``, ``resumed_steps``) if any."""
        outputs = {name: copy() for name, copy in self.copy_out[scenario].items()}
        return self.frame_result(scenario, index, outputs, begin, time.perf_counter(), request, previous, mode,
                                 cancelled_steps, resumed_steps)

    def frame_result(self, scenario: str, index: int, outputs: dict[str, np.ndarray], begin: float, done: float,
                     request: SwitchRequest | None, previous: str, mode: str | None = None,
                     cancelled_steps: int | None = None, resumed_steps: int | None = None) -> FrameResult:
        """A frame computed on ``scenario`` from ``begin`` to ``done``, its ``outputs`` copied out (here, or by a
        stream, ``sbrs.runtime.streams``): its result, with the switch record, and its bookkeeping queued."""
        record = None
        if request is not None:
            record = self.node.record(request, previous, done, ssr_step=None, overlapped_steps=0, mode=mode,
                                      cancelled_steps=cancelled_steps, resumed_steps=resumed_steps)
        self._unsettled.append((scenario, done - begin, request, record))
        return FrameResult(index, scenario, outputs, done - begin, record, self.postprocessors)

    def new_frame_result(self, request: SwitchRequest, old: str, index: int, begin: float, ssr_step: int,
                         overlapped_steps: int) -> FrameResult:
        """The first frame of ``request``'s SBRS-TP switch from ``old``, computed in the new frame's slots from
        ``begin``, copied out now: its result with the switch's record (``new_first``, ``Transition``)."""
        new = request.scenario
        outputs = {name: copy() for name, copy in self.new_copy_out[new].items()}
        end = time.perf_counter()
        record = self.node.record(request, old, end, ssr_step=ssr_step, overlapped_steps=overlapped_steps,
                                  mode="sbrs-tp")
        self._unsettled.append((new, end - begin, request, record))
        return FrameResult(index, new, outputs, end - begin, record, self.postprocessors)

    def settle_before_waiting(self) -> None:
        """``settle`` where results went out and no switch request waits, before a frame loop waits for its
        caller's next frame or a stream's result: a camera's next frame comes a frame period later, a stream being
        reopened's seconds later, and until then the metrics and ``frame_done`` observers lagged the outputs by a
        frame (the active scenario's gauge said the old one for the whole stall). Takes the lock."""
        if self._unsettled and self.node.pending is None and self.held_by != threading.get_ident():
            with self.lock:  # (not where this thread's own suspended generator holds it: ``not_held_here``)
                if self.node.pending is None:
                    self.settle()

    def not_held_here(self) -> None:
        """Raise ``SbrsRuntimeError`` where the calling thread holds a switch's first result of a ``process``
        generator of this runtime (``held_by``): taking ``lock`` would wait for that generator, which only this
        thread asks for its next result, for ever. Other threads wait, as documented."""
        if self.held_by == threading.get_ident():
            raise SbrsRuntimeError("this thread holds a switch's first result of a process() generator of this "
                                   "runtime, whose other frame is still to finish: ask that generator for its next "
                                   "result, or close it, first")

    def abandon_failed(self, before: tuple[SwitchRequest, ...]) -> None:
        """A frame failed (an error of ONNX Runtime, a ``KeyboardInterrupt`` on the caller's thread, ...): the switch
        requests it took that have no result (none of ``before``, the requests under way when it started, and
        none recorded for the caller) end without an output (``ControlNode.abandon``); else the node would show
        the switch under way for good, ``switching`` ever after. The caller holds the lock, so no other frame took
        a request meanwhile."""
        recorded = [request for _, _, request, _ in self._unsettled]
        self.abandon_unanswered([request for request in self.node.under_way
                                 if request not in before and request not in recorded])

    def abandon_unanswered(self, requests: Iterable[SwitchRequest]) -> None:
        """Each of ``requests`` still under way ends without an output (``ControlNode.abandon``): the frames that
        took them failed. The caller holds the lock."""
        under_way = self.node.under_way
        for request in requests:
            if request in under_way:
                self.node.abandon(request)

    def settle(self) -> None:
        """The bookkeeping of frames whose results went out (observers' ``frame_done``, the control node's end
        of a switch), done after the caller has them so that Δ does not include it. The caller holds the lock;
        every entry point settles before running a frame (unless a switch request is pending and fewer than
        ``MAX_UNSETTLED`` frames wait: then later), ``infer`` before it returns and ``process`` when it ends."""
        if not self._unsettled:
            return
        node = self.node
        for scenario, seconds, request, record in self._unsettled:
            node.frame_done(scenario, seconds)
            if request is not None and record is not None:
                node.settle(request, record)
        self._unsettled.clear()
