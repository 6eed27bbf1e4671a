"""The runtime: one session per execution unit, one arena, bindings made once, a frame is a list of calls.

    >>> with load_app("apps/tiny.yaml").runtime() as rt:          # doctest: +SKIP
    ...     outputs = rt.infer(frame)                             # {"output": array of shape (1, 10)}
    ...     rt.switch("skip")

Building (``Runtime.__init__``): derive the MoC (Algorithm 5) with the app's adaptive set A, cut it into
execution units (``sbrs.runtime.units``), plan the boundary tensors into one arena and check the plan
(``sbrs.runtime.arena``), then load every unit once, whatever the number of scenarios using it, and bind its
inputs and outputs to their arena slots once per (scenario, unit). The app's models are not kept: after
building, the runtime holds only sessions, bindings, the arena and the (small) ``UnitPlan``. Drop the
``App`` afterwards and call ``sbrs.runtime.device.release_free_memory()`` to give the parsed weights' memory
back to the system (``sbrs run`` and ``sbrs bench`` do).

Per frame (``infer``): check the frame, copy it into the arena, call ``run_with_iobinding`` for each unit of
the current scenario, copy the graph outputs out (the caller owns the copies). A rejected frame or switch
raises ``InputError`` before anything is touched, so the runtime stays usable.

Switching (thesis 5.7.4, 5.9): ``switch(name)`` only hands a switch request (SSR) to the control node
(``sbrs.runtime.control_node``), from any thread; it never waits for inference. The frame in flight always
finishes on the old scenario with its own output; the next frame runs on the new one; no frame is dropped or
run twice. ``infer`` (one frame at a time) applies a request between frames. ``process(frames)`` is the
pipelined entry point ``sbrs run`` uses: it sees the next frame while one is in flight, so under SBRS-TP
(app.yaml ``runtime.transition: sbrs-tp``) a request noticed after old step j starts the next frame on the new
scenario at once, on a worker thread, while the old frame's remaining steps run on the calling thread; new
step i waits for old step ``wait_i`` of the transition table (``sbrs.runtime.transition``: Algorithm 6 with
arena-byte hazards, Algorithm 7 event-driven). ONNX Runtime releases the GIL, so both run at once. Under
``naive`` the request waits for the frame boundary. Either way the response delay Δ (request arrival → first
output of the new scenario) is recorded for every switch (``SwitchRecord`` on the frame's result, the node's
status, the observers' ``switch_done``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from sbrs.control.events import Observers, RunObserver
from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.runtime.control_node import ControlNode, SwitchRecord, SwitchRequest
from sbrs.runtime.device import (
    ArenaMemory,
    ThreadPool,
    copy_model,
    create_session,
    device_of,
    resolve_providers,
    use_global_thread_pool,
)
from sbrs.runtime.transition import TRANSITION_MODES, PairTable, TransitionPlan, build_transition_plan, plan_shadow
from sbrs.runtime.units import MIN_SWITCH_STEP_WORK, UnitPlan

if TYPE_CHECKING:
    import onnxruntime as ort

    from sbrs.app.app import App
    from sbrs.app.config import AppConfig
    from sbrs.build.artifact import LoadedBuild
    from sbrs.moc import Moc

Frame = np.ndarray | Mapping[str, np.ndarray]
TRANSITION_ARENAS: tuple[str, ...] = ("shared", "shadow")
TRANSITION_SCHEDULES: tuple[str, ...] = ("priority", "threads")


@dataclass(frozen=True)
class FrameResult:
    """One processed frame: its index in the stream, the scenario that processed it, its outputs, its latency
    (from copying it in to its outputs copied out) and, on the first frame of a new scenario, the switch."""

    index: int
    scenario: str
    outputs: dict[str, np.ndarray]
    latency_s: float
    switch: SwitchRecord | None = None


def build_unit_plan(app: App, granularity: str | None = None, moc: Moc | None = None,
                    transition: str | None = None) -> UnitPlan:
    """The ``UnitPlan`` of ``app`` (units, sequences, arena offsets), checked, without loading anything.

    Under SBRS-TP (``transition``, default the app's) units are also cut at up to ``runtime.switch_steps``
    switch points per frame (``sbrs.runtime.units``): the old step in flight is what a switch waits for.
    """
    from sbrs.moc import derive_moc
    from sbrs.runtime.arena import plan_layout
    from sbrs.runtime.units import layout_units

    moc = moc or derive_moc(app.models, app.config.adaptive)
    options = app.config.runtime
    chosen = granularity or options.granularity
    switch_steps = options.switch_steps if (transition or options.transition) == "sbrs-tp" else 1
    layout = layout_units(app.models, moc, chosen, share_min_bytes=int(options.share_min_mb * 1e6),
                          switch_steps=switch_steps, min_step_work=MIN_SWITCH_STEP_WORK)
    return plan_layout(layout, app=app.name, granularity=chosen, adaptive=tuple(app.config.adaptive))


class Runtime:
    """An app's scenarios, ready to run frames (Python API of DESIGN.md, "Interfaces").

    ``granularity`` overrides app.yaml's ``runtime.granularity`` (``auto`` or ``layer``), ``transition`` its
    ``runtime.transition`` (``sbrs-tp`` or ``naive``). ``transition_arena``: ``shared`` keeps the minimal
    arena and the hazard analysis serialises the new steps that would touch the old frame's bytes; ``shadow``
    (default under SBRS-TP) runs a transition's new frame in shadow slots planned apart from the old frame
    (about twice the arena of boundary tensors; new steps wait for little or nothing,
    ``sbrs.runtime.transition.plan_shadow``). ``transition_schedule``: ``priority``
    (default) runs both frames on the calling thread, a new step as soon as its wait allows, an old step
    otherwise; ``threads`` runs the new frame on a worker thread concurrently with the old one (Algorithm 7's
    parallelism; pays off only with cores to spare, see ``_Transition``). ``observers`` get the run events.
    """

    def __init__(self, app: App | None = None, *, build: LoadedBuild | None = None, granularity: str | None = None,
                 transition: str | None = None, transition_arena: str | None = None,
                 transition_schedule: str = "priority", observers: Iterable[RunObserver] = ()) -> None:
        """From an ``App`` (derives and compiles everything here) or from a verified ``sbrs build`` artifact
        (``build``: ``sbrs.build.artifact.load_build``; its plan, tables and unit files are used as they are)."""
        if (app is None) == (build is None):
            raise TypeError("Runtime needs exactly one of app and build")
        config: AppConfig = app.config if app is not None else build.config  # type: ignore[union-attr]
        mode = transition or config.runtime.transition
        if mode not in TRANSITION_MODES:
            raise InputError(f"unknown transition '{mode}' (allowed: {', '.join(TRANSITION_MODES)})",
                             field="runtime.transition")
        transition_arena = transition_arena or ("shadow" if mode == "sbrs-tp" else "shared")
        if transition_arena not in TRANSITION_ARENAS:
            raise InputError(f"unknown transition arena '{transition_arena}' (allowed: "
                             f"{', '.join(TRANSITION_ARENAS)})", field="transition_arena")
        if transition_schedule not in TRANSITION_SCHEDULES:
            raise InputError(f"unknown transition schedule '{transition_schedule}' (allowed: "
                             f"{', '.join(TRANSITION_SCHEDULES)})", field="transition_schedule")
        if build is not None and not build.matches(granularity, mode, transition_arena):
            raise InputError(f"the build was compiled for granularity {build.granularity}, transition "
                             f"{build.transition}, arena {build.transition_arena}; run `sbrs build` with the "
                             f"options wanted or load the app", field="build")
        self.transition_schedule = transition_schedule
        self.observers = observers if isinstance(observers, Observers) else Observers(observers)
        self.node = ControlNode(tuple(s.name for s in config.scenarios), config.initial, mode=mode,
                                observers=self.observers)
        self.providers = resolve_providers(tuple(config.runtime.providers), where=config.path)
        self.device = device_of(self.providers)
        self.thread_pool: ThreadPool = use_global_thread_pool(config.runtime.threads)
        shadow: Mapping[str, int] | None
        self.transitions: TransitionPlan
        if build is not None:
            self.plan, shadow, self.transitions = build.plan, build.shadow, build.transitions
            self._model_bytes = dict(build.model_bytes)
        else:
            assert app is not None
            from sbrs.moc import derive_moc
            from sbrs.model import naive_buffer_bytes, params_bytes

            moc = derive_moc(app.models, config.adaptive)
            self.plan = build_unit_plan(app, granularity, moc, transition=mode)
            # The model's figures (thesis Eq. 2.6-2.7), kept because the models themselves are not.
            self._model_bytes = {"params_bytes": params_bytes(app.models.values()),
                                 "naive_bytes": sum(naive_buffer_bytes(m) for m in app.models.values())}
            shadow = None
            if transition_arena == "shadow":
                self.plan, shadow = plan_shadow(self.plan)
            self.transitions = build_transition_plan(self.plan, arena=transition_arena, shadow=shadow)
        self.input_specs = {config.input.name: (tuple(config.input.shape), np.dtype(config.input.dtype))}
        self._lock = threading.Lock()
        self._closed = False
        self._worker: ThreadPoolExecutor | None = None
        self._bindings: dict[tuple[str, int], tuple[list[tuple[str, int, int]], list[tuple[str, int, int]]]] = {}

        specs = {t.id: t.spec for t in self.plan.tensors}
        self._bound_ranges: list[tuple[str, int, int]] = []  # (tensor, start, end) of every binding, from base
        self._sessions: dict[str, ort.InferenceSession] = {}
        for unit in self.plan.units:
            if build is not None:  # ONNX Runtime reads the unit file and the shared weights file itself
                self._sessions[unit.id] = create_session(build.unit_path(unit.id), self.providers)
            else:
                from sbrs.runtime.units import unit_model

                assert app is not None
                self._sessions[unit.id] = create_session(unit_model(app.models, moc, unit, specs, app.name),
                                                         self.providers)
        self._arena = ArenaMemory(self.plan.arena_bytes, self.device, self.plan.alignment)
        self._calls: dict[str, tuple[Callable[[], Any], ...]] = {
            scenario: tuple(self._bound_call(scenario, unit_id, step) for step, unit_id in enumerate(calls, 1))
            for scenario, calls in self.plan.sequences.items()}
        self._copy_in: dict[str, Callable[[np.ndarray], None]] = {}
        self._copy_out: dict[str, dict[str, Callable[[], np.ndarray]]] = {}
        self._bind_frame_io(config.input.name)
        # a transition's new frame: the same calls, or calls bound to the shadow slots
        self._new_calls, self._new_copy_in, self._new_copy_out = self._calls, self._copy_in, self._copy_out
        if shadow is not None:
            self._bind_shadow(shadow, config.input.name)
        self.node.loaded(self.facts())

    # -- building ---------------------------------------------------------------------------------------

    def _slot(self, tensor_id: str) -> tuple[int, tuple[int, ...], np.dtype]:
        """The address, shape and dtype to bind ``tensor_id`` to (recorded for ``arena_view_bounds``)."""
        tensor = self.plan.tensor(tensor_id)
        pointer = self._arena.pointer(tensor.offset)
        self._bound_ranges.append((tensor_id, pointer - self._arena.base, pointer - self._arena.base + tensor.nbytes))
        return pointer, tensor.shape, np.dtype(tensor.dtype)

    def _bound_call(self, scenario: str, unit_id: str, step: int = 0) -> Callable[[], Any]:
        """``run_with_iobinding`` of one unit with its inputs and outputs bound to ``scenario``'s arena slots.

        The byte ranges really bound are recorded per (scenario, step) for ``bound_accesses``.
        """
        session = self._sessions[unit_id]
        unit = self.plan.unit(unit_id)
        binding = session.io_binding()
        reads, writes = self._bindings.setdefault((scenario, step), ([], []))
        for name, tensor in zip(unit.inputs, unit.input_tensors[scenario], strict=True):
            pointer, shape, dtype = self._slot(tensor)
            binding.bind_input(name, self.device, 0, dtype, list(shape), pointer)
            reads.append(self._bound_ranges[-1])
        for name in unit.outputs:
            pointer, shape, dtype = self._slot(name)
            binding.bind_output(name, self.device, 0, dtype, list(shape), pointer)
            writes.append(self._bound_ranges[-1])

        def call() -> None:
            session.run_with_iobinding(binding)

        return call

    def _bind_shadow(self, shadow: Mapping[str, int], input_name: str) -> None:
        """Bindings of every (scenario, unit) and frame I/O to the shadow slots (``plan_shadow``; CPU arena)."""
        if self.device != "cpu":
            raise SbrsRuntimeError("transition arena 'shadow' needs the CPU arena (device arenas: use 'shared')")
        normal = {t.id: t.offset for t in self.plan.tensors}
        saved = (self._bindings, self._copy_in, self._copy_out)
        tensors = tuple(replace(t, offset=shadow[t.id]) for t in self.plan.tensors)
        plan = self.plan
        try:
            self.plan = replace(plan, tensors=tensors)
            self._bindings, self._copy_in, self._copy_out = {}, {}, {}
            self._new_calls = {scenario: tuple(self._bound_call(scenario, unit_id, step)
                                               for step, unit_id in enumerate(calls, 1))
                               for scenario, calls in plan.sequences.items()}
            self._bind_frame_io(input_name)
            self._shadow_bindings = self._bindings
            self._new_copy_in, self._new_copy_out = self._copy_in, self._copy_out
        finally:
            self.plan = plan
            self._bindings, self._copy_in, self._copy_out = saved
        assert all(t.offset == normal[t.id] for t in self.plan.tensors)

    def _bind_frame_io(self, input_name: str) -> None:
        """How a frame gets into the arena and the outputs out of it: numpy copies (CPU) or copy sessions (GPU)."""
        for scenario in self.plan.scenarios:
            tensor = self.plan.tensor(self.plan.inputs[scenario][input_name])
            last = len(self.plan.sequences[scenario])
            if self.device == "cpu":
                self._slot(tensor.id)
                self._bindings.setdefault((scenario, 1), ([], []))[1].append(self._bound_ranges[-1])
                input_view = self._arena.view(tensor.offset, tensor.shape, tensor.dtype)
                self._copy_in[scenario] = lambda array, view=input_view: np.copyto(view, array)
                self._copy_out[scenario] = {}
                for name, tensor_id in self.plan.outputs[scenario].items():
                    self._slot(tensor_id)
                    self._bindings.setdefault((scenario, last), ([], []))[0].append(self._bound_ranges[-1])
                    output = self.plan.tensor(tensor_id)
                    self._copy_out[scenario][name] = self._arena.view(output.offset, output.shape, output.dtype).copy
            else:
                self._copy_in[scenario] = self._device_copy(tensor.id, to_device=True)
                self._copy_out[scenario] = {name: self._device_copy(tensor_id, to_device=False)
                                            for name, tensor_id in self.plan.outputs[scenario].items()}

    def _device_copy(self, tensor_id: str, *, to_device: bool) -> Callable[..., Any]:
        """GPU arena only (untested here): an Identity session copying between a host buffer and a slot."""
        pointer, shape, dtype = self._slot(tensor_id)
        session = create_session(copy_model(shape, dtype.name), self.providers)
        self._sessions[f"copy:{tensor_id}:{'in' if to_device else 'out'}"] = session
        host = np.zeros(shape, dtype)
        binding = session.io_binding()
        host_side, device_side = ("x", "y") if to_device else ("y", "x")
        bind_host = binding.bind_input if to_device else binding.bind_output
        bind_device = binding.bind_output if to_device else binding.bind_input
        bind_host(host_side, "cpu", 0, dtype, list(shape), host.ctypes.data)
        bind_device(device_side, self.device, 0, dtype, list(shape), pointer)

        def copy_in(array: np.ndarray) -> None:
            np.copyto(host, array)
            session.run_with_iobinding(binding)

        def copy_out() -> np.ndarray:
            session.run_with_iobinding(binding)
            return host.copy()

        return copy_in if to_device else copy_out

    # -- the API ----------------------------------------------------------------------------------------

    @property
    def scenario(self) -> str:
        """The current scenario: the one the next frame runs on (a pending switch request included)."""
        return self.node.target

    @property
    def transition(self) -> str:
        """How switches run: ``sbrs-tp`` or ``naive``."""
        return self.node.mode

    @property
    def scenarios(self) -> tuple[str, ...]:
        return self.plan.scenarios

    @property
    def arena_bytes(self) -> int:
        """Bytes of the arena of boundary tensors (tensors inside units are ONNX Runtime's own memory)."""
        return self.plan.arena_bytes

    @property
    def session_count(self) -> int:
        """Sessions loaded for units (each unit once, however many scenarios use it)."""
        return sum(1 for unit in self.plan.units if unit.id in self._sessions)

    def arena_view_bounds(self) -> list[tuple[str, int, int]]:
        """(tensor, start, end) of every address bound to a unit or copied in/out, relative to the arena's base."""
        return list(self._bound_ranges)

    def facts(self) -> dict[str, Any]:
        """Plan figures for observers and status: the arena (boundary tensors) and its lower bound, the app's
        unique parameter bytes and thesis-naive buffer bytes, units, granularity, providers, transition mode."""
        return {"app": self.plan.app, "arena_bytes": self.plan.arena_bytes, "units": len(self.plan.units),
                "lower_bound_bytes": self.plan.arena_lower_bound, "providers": list(self.providers),
                **self._model_bytes,
                "granularity": self.plan.granularity, "transition": self.node.mode,
                "transition_arena": self.transitions.arena, "scenarios": list(self.plan.scenarios),
                "steps": {s: len(seq) for s, seq in self.plan.sequences.items()}}

    def bound_accesses(self, *, new_frame: bool = False) -> dict[str, tuple[Any, ...]]:
        """Each scenario's steps as the bytes really bound (``StepAccess``, offsets from the arena's base):
        what ``sbrs.runtime.transition.check_schedule`` checks against the transition tables. ``new_frame``:
        the bindings a transition's new frame uses (the shadow slots under arena ``shadow``)."""
        from sbrs.runtime.transition import StepAccess

        bindings = getattr(self, "_shadow_bindings", self._bindings) if new_frame else self._bindings
        return {scenario: tuple(StepAccess(unit_id, tuple(bindings[(scenario, step)][0]),
                                           tuple(bindings[(scenario, step)][1]))
                                for step, unit_id in enumerate(calls, 1))
                for scenario, calls in self.plan.sequences.items()}

    def switch(self, scenario: str, source: str = "api") -> None:
        """Ask for ``scenario`` from the next frame on (an SSR; returns at once, from any thread).

        An unknown name is an ``InputError`` and changes nothing. The frame in flight finishes on the old
        scenario; under SBRS-TP and ``process`` the next frame may start before it ends (module docstring).
        """
        if scenario not in self.plan.sequences:
            raise InputError(f"unknown scenario '{scenario}' (scenarios: {', '.join(self.plan.scenarios)})",
                             field="switch")
        self.node.request(scenario, source)

    def status(self) -> dict[str, Any]:
        """The control node's snapshot (state, scenario, pending request, Δ of the last switch, ...)."""
        return self.node.status()

    def infer(self, frame: Frame) -> dict[str, np.ndarray]:
        """Run one frame on the current scenario: output name → array (copies owned by the caller).

        A pending switch request applies to this frame (nothing is in flight between ``infer`` calls).
        """
        arrays = self._checked_frame(frame)
        with self._lock:
            return self._execute(arrays, None, mode="naive")[0].outputs

    def process(self, frames: Iterable[Frame]) -> Iterator[FrameResult]:
        """Run ``frames`` in order, one result per frame, in order (the pipelined entry point of ``sbrs run``).

        Under SBRS-TP a switch request lets the next frame start on the new scenario while the frame in flight
        finishes on the old one (module docstring); both results then come out together, old frame first.
        A malformed frame raises ``InputError`` when its turn comes; the frames before it were all yielded.
        """
        yield from self._process(frames)

    def _process(self, frames: Iterable[Frame], *, inject: tuple[int, str] | None = None,
                 mode: str | None = None) -> Iterator[FrameResult]:
        """``process`` with a test/bench hook: ``inject = (s, name)`` makes an SSR for ``name`` arrive just
        as step s of the first frame starts (thesis step^o_SSR = s); ``mode`` overrides the transition mode."""
        lookahead = _Lookahead(iter(frames), self._checked_frame)
        index = 0
        while True:
            arrays = lookahead.take()
            if arrays is None:
                return
            with self._lock:
                results = self._execute(arrays, lookahead, mode=mode or self.node.mode, inject=inject)
            inject = None
            for result in results:
                yield FrameResult(index, result.scenario, result.outputs, result.latency_s, result.switch)
                index += 1

    def measure_switch(self, old: str, new: str, frames: tuple[Frame, Frame], *, ssr_step: int = 1,
                       mode: str | None = None) -> SwitchRecord:
        """Δ of one switch old → new with the SSR arriving as old step ``ssr_step`` starts (``sbrs bench``).

        Runs ``frames[0]`` on ``old`` (after one frame to settle on it) and ``frames[1]``, which the switch
        sends to ``new``, through the same code as ``process``; returns the switch's record.
        """
        if old == new or old not in self.plan.sequences or new not in self.plan.sequences:
            raise InputError(f"measure_switch: need two different scenarios, got '{old}' and '{new}'")
        self.switch(old, "bench")
        self.infer(frames[0])
        results = list(self._process(frames, inject=(ssr_step, new), mode=mode))
        record = results[1].switch
        if record is None or results[0].scenario != old or results[1].scenario != new:
            raise SbrsRuntimeError(f"measure_switch {old}->{new}: the switch did not happen as planned")
        return record

    # -- the engine -------------------------------------------------------------------------------------

    def _execute(self, arrays: Mapping[str, np.ndarray], lookahead: _Lookahead | None, *, mode: str,
                 inject: tuple[int, str] | None = None) -> list[FrameResult]:
        """Run one frame, or one frame and the next during an SBRS-TP transition. The caller holds the lock.

        A request pending at the frame boundary sends this frame to the new scenario (nothing is in flight).
        In SBRS-TP mode the pending request is checked after every old step j < |φ^o| (Algorithm 7, line 2: the
        step the SSR arrived in finishes first); when some new step may start before the old frame ends and
        the next frame is at hand, the transition takes over the rest of the old frame (``_Transition``).
        """
        if self._closed:
            raise SbrsRuntimeError("the runtime is closed")
        node = self.node
        previous = node.scenario
        request = node.take()
        scenario = node.scenario
        calls = self._calls[scenario]
        last = len(calls)
        begin = time.perf_counter()
        for array in arrays.values():  # one app input (checked at load); a dict keeps the contract general
            self._copy_in[scenario](array)
        for step, call in enumerate(calls, 1):
            if inject is not None and inject[0] == step:
                node.request(inject[1], "bench")
            call()
            if (mode == "sbrs-tp" and step < last and node.pending is not None and lookahead is not None
                    and node.pending.scenario != scenario):
                transition = self._start_transition(scenario, step, lookahead)
                if transition is not None:
                    return transition.run(begin, request, previous)
        outputs = {name: copy() for name, copy in self._copy_out[scenario].items()}
        done = time.perf_counter()
        node.frame_done(scenario, done - begin)
        record = None
        if request is not None:
            record = node.finish(request, previous, done, ssr_step=None, overlapped_steps=0, mode=mode)
        return [FrameResult(0, scenario, outputs, done - begin, record)]

    def _start_transition(self, old: str, step: int, lookahead: _Lookahead) -> _Transition | None:
        """The transition old → pending scenario after old step ``step`` (Algorithm 7), if it can help."""
        pending = self.node.pending
        if pending is None:
            return None
        table = self.transitions.table(old, pending.scenario)
        if table.wait and max(table.wait[0], step) >= table.old_steps:
            return None  # new step 1 must wait for the whole old frame: the frame boundary does the same
        arrays = lookahead.peek()
        if arrays is None:
            return None
        request = self.node.take()
        if request is None:
            return None
        lookahead.take()
        return _Transition(self, request, old, table, step, arrays)

    def _transition_worker(self) -> ThreadPoolExecutor:
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sbrs-transition")
        return self._worker

    def _checked_frame(self, frame: Frame) -> dict[str, np.ndarray]:
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

    def close(self) -> None:
        """Release the sessions, bindings and arena; later ``infer`` calls raise ``SbrsRuntimeError``."""
        self.node.shutdown()
        with self._lock:
            self._closed = True
            if self._worker is not None:
                self._worker.shutdown(wait=True)
                self._worker = None
            self._calls.clear()
            self._copy_in.clear()
            self._copy_out.clear()
            self._sessions.clear()
        self.node.halt()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Runtime(app={self.plan.app!r}, scenario={self.scenario!r}, units={len(self.plan.units)}, "
                f"granularity={self.plan.granularity!r}, transition={self.node.mode!r}, "
                f"arena_bytes={self.plan.arena_bytes})")


class _Lookahead:
    """The frame stream with one frame of look-ahead (checked frames; None at the end)."""

    def __init__(self, frames: Iterator[Frame], check: Callable[[Frame], dict[str, np.ndarray]]) -> None:
        self._frames = frames
        self._check = check
        self._next: dict[str, np.ndarray] | None = None

    def peek(self) -> dict[str, np.ndarray] | None:
        if self._next is None:
            frame = next(self._frames, None)
            if frame is None:
                return None
            self._next = self._check(frame)
        return self._next

    def take(self) -> dict[str, np.ndarray] | None:
        arrays = self.peek()
        self._next = None
        return arrays


class _Transition:
    """One SBRS-TP transition: the rest of the old frame and the whole next frame on the new scenario.

    Constraints (Algorithm 7 with the tables of ``sbrs.runtime.transition``): old steps run in order, new
    steps run in order, new step i starts only once old steps 1..wait_i have finished. The SSR was acted on
    after old step ``ssr_step`` (Algorithm 7, line 2). Two schedules keep them:

    ``priority`` (default): one thread. Whenever the next new step's wait is met it runs, else the next old
    step runs. Deviation from Algorithm 7, which runs old and new steps side by side: on the 2-core machine
    this was built on, ONNX Runtime already spreads each step over both cores (the global thread pool), and
    two whole models run concurrently took 1.06x (cifar10), 1.24x (tiny), 1.35x (drone) the time of running
    them one after the other (0.80x only for pamap2's tiny 1-D convolutions) — so overlap cannot shorten the
    critical path, but putting the new frame first does: Δ becomes the new frame's own time plus the old steps
    it must wait for. The old frame still finishes on the old scenario with its own output, later.

    ``threads``: the new frame on a worker thread, the old frame on the caller (ONNX Runtime releases the GIL);
    new step i waits on a condition for old step wait_i. Algorithm 7's lock-step barrier is relaxed to these
    per-step waits (every constraint of X that stems from a hazard is kept, ``transition`` module docstring).
    """

    def __init__(self, runtime: Runtime, request: SwitchRequest, old: str, table: PairTable, ssr_step: int,
                 arrays: Mapping[str, np.ndarray]) -> None:
        self.runtime = runtime
        self.request = request
        self.old = old
        self.new = request.scenario
        self.table = table
        self.ssr_step = ssr_step
        self.arrays = arrays
        self.overlapped = 0
        self._done = ssr_step
        self._condition = threading.Condition()

    def run(self, begin: float, request: SwitchRequest | None, previous: str) -> list[FrameResult]:
        """Finish the old frame (started at ``begin``, maybe itself the first frame of ``request``) and run
        the new one; both results, old first, the new one carrying the switch record."""
        runtime, node = self.runtime, self.runtime.node
        old_calls = runtime._calls[self.old]
        if runtime.transition_schedule == "threads":
            future = runtime._transition_worker().submit(self._new_frame_threaded)
            try:
                for step in range(self.ssr_step + 1, len(old_calls) + 1):
                    old_calls[step - 1]()
                    if step < len(old_calls):
                        self._old_done(step)
                old_outputs = {name: copy() for name, copy in runtime._copy_out[self.old].items()}
            finally:
                self._old_done(len(old_calls))  # after the copy-out (it belongs to the last old step)
            old_end = time.perf_counter()
            new_outputs, new_begin, new_end = future.result()
        else:
            old_outputs, old_end, new_outputs, new_begin, new_end = self._priority(old_calls)
        mode = "sbrs-tp"
        node.frame_done(self.old, old_end - begin)
        node.frame_done(self.new, new_end - new_begin)
        first = None
        if request is not None:  # the old frame itself was the first of a switch decided at its boundary
            first = node.finish(request, previous, old_end, ssr_step=None, overlapped_steps=0, mode=mode)
        record = node.finish(self.request, self.old, new_end, ssr_step=self.ssr_step,
                             overlapped_steps=self.overlapped, mode=mode)
        return [FrameResult(0, self.old, old_outputs, old_end - begin, first),
                FrameResult(0, self.new, new_outputs, new_end - new_begin, record)]

    def _priority(self, old_calls: tuple[Callable[[], Any], ...]) -> tuple[
            dict[str, np.ndarray], float, dict[str, np.ndarray], float, float]:
        runtime, node = self.runtime, self.runtime.node
        new_calls = runtime._new_calls[self.new]
        waits = self.table.wait
        old_steps, new_steps = len(old_calls), len(new_calls)
        done_old, done_new = self.ssr_step, 0
        old_outputs: dict[str, np.ndarray] | None = None
        old_end = new_begin = new_end = 0.0
        while done_new < new_steps:
            if waits[done_new] <= done_old:
                if done_new == 0:
                    new_begin = time.perf_counter()
                    for array in self.arrays.values():
                        runtime._new_copy_in[self.new](array)
                if done_old < old_steps:
                    self.overlapped += 1
                new_calls[done_new]()
                done_new += 1
            else:
                old_calls[done_old]()
                done_old += 1
                if done_old == old_steps:
                    old_outputs = {name: copy() for name, copy in runtime._copy_out[self.old].items()}
                    old_end = time.perf_counter()
            node.step_done(done_old, done_new)
        new_outputs = {name: copy() for name, copy in runtime._new_copy_out[self.new].items()}
        new_end = time.perf_counter()
        while done_old < old_steps:
            old_calls[done_old]()
            done_old += 1
        if old_outputs is None:
            old_outputs = {name: copy() for name, copy in runtime._copy_out[self.old].items()}
            old_end = time.perf_counter()
        return old_outputs, old_end, new_outputs, new_begin, new_end

    def _old_done(self, step: int) -> None:
        with self._condition:
            self._done = step
            self._condition.notify_all()
        self.runtime.node.step_done(step, 0)

    def _new_frame_threaded(self) -> tuple[dict[str, np.ndarray], float, float]:
        runtime, new = self.runtime, self.new
        calls = runtime._new_calls[new]
        old_steps = self.table.old_steps
        begin = time.perf_counter()
        for step, (call, wait) in enumerate(zip(calls, self.table.wait, strict=True), 1):
            if self._done < wait:
                with self._condition:
                    while self._done < wait:
                        self._condition.wait()
            if self._done < old_steps:
                self.overlapped += 1
            if step == 1:
                for array in self.arrays.values():
                    runtime._new_copy_in[new](array)
            call()
        outputs = {name: copy() for name, copy in runtime._new_copy_out[new].items()}
        return outputs, begin, time.perf_counter()
