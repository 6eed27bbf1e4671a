"""The runtime: one session per execution unit, one arena, bindings made once, a frame is a list of calls.

    >>> with runtime_for(load_app("apps/tiny.yaml")) as rt:          # doctest: +SKIP
    ...     outputs = rt.infer(frame)                             # {"output": array of shape (1, 10)}
    ...     rt.switch("skip")

Building (``Runtime.__init__``): derive the MoC (Algorithm 5) with the app's adaptive set A, cut it into
execution units (``sbrs.runtime.compile.units``), plan the boundary tensors into one arena and check the plan
(``sbrs.runtime.compile.arena``), then load every unit once, whatever the number of scenarios using it, and bind its
inputs and outputs to their arena slots once per (scenario, unit). The app's models are not kept: after
building, the runtime holds only sessions, bindings, the arena and the (small) ``UnitPlan``. Drop the
``App`` afterwards and call ``sbrs.ort_env.release_free_memory()`` to give the parsed weights' memory
back to the system (``sbrs run`` and ``sbrs bench`` do).

Per frame (``infer``): check the frame, copy it into the arena, call ``run_with_iobinding`` for each unit of
the current scenario, copy the graph outputs out (the caller owns the copies). A rejected frame or switch
raises ``InputError`` before anything is touched, so the runtime stays usable.

Switching (thesis 5.7.4, 5.9): ``switch(name)`` only hands a switch request (SSR) to the control node
(``sbrs.runtime.switch.control_node``), from any thread; it never waits for inference. The frame in flight
always finishes on the old scenario with its own output; the next frame runs on the new one; no frame is
dropped or run twice. ``infer`` (one frame at a time) applies a request between frames. ``process(frames)``
is the pipelined entry point ``sbrs run`` uses: it sees the next frame while one is in flight, so under
SBRS-TP (app.yaml ``runtime.transition: sbrs-tp``) a request noticed after old step j starts the next frame
on the new scenario at once: before the old frame's remaining steps (``_Transition``, schedule ``priority``)
or beside them on a worker thread (``threads``), or, after its last step, before its copy-out
(``_new_first``); new step i waits for old step ``wait_i`` of the transition table
(``sbrs.runtime.switch.transition``: Algorithm 6 with arena-byte hazards, Algorithm 7 event-driven). Results
are yielded as their outputs exist, so the caller holds the new scenario's output as soon as it is computed,
and the old frame's result right after (``order="stream"`` keeps stream order). Under ``naive`` the request
waits for the frame boundary. Under ``runtime.on_switch: cancel`` the frame in flight is given up instead
and runs again from its start on the new scenario (``_cancelling``). Either way the response delay Δ (request
arrival → first output of the new scenario) is recorded for every switch (``SwitchRecord`` on the frame's
result, the node's status, the observers' ``switch_done``).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.ort_env import ThreadPool, create_session, release_free_memory, resolve_providers, use_global_thread_pool
from sbrs.outputs.postprocess import FrameMeta, PostProcessor, postprocessors_for, value_of
from sbrs.runtime.events import Observers, RunObserver
from sbrs.runtime.execute.device import ArenaMemory, copy_model, device_of, iobinding_runner
from sbrs.runtime.switch.control_node import ControlNode, SwitchRecord, SwitchRequest
from sbrs.runtime.switch.transition import (
    TRANSITION_MODES,
    PairTable,
    TransitionPlan,
    build_transition_plan,
    plan_shadow,
)

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from sbrs.app.app import App
    from sbrs.app.config import AppConfig
    from sbrs.build.artifact import LoadedBuild

Frame = np.ndarray | Mapping[str, np.ndarray]
#: A frame computed but not yet copied out, as ``Runtime._old_frame_result`` takes it: scenario, stream index,
#: start time, the switch request it was the first frame of and the scenario before it, the transition mode.
_OldFrame = tuple[str, int, float, SwitchRequest | None, str, str]
TRANSITION_ARENAS: tuple[str, ...] = ("shared", "shadow")
TRANSITION_SCHEDULES: tuple[str, ...] = ("priority", "threads")
#: Frames whose bookkeeping may wait while switch requests keep coming (``Runtime._settle``).
MAX_UNSETTLED = 8
#: The order ``Runtime.process`` yields results in: as their outputs exist, or as the frames came.
RESULT_ORDERS: tuple[str, ...] = ("completion", "stream")
#: What a switch request does to the frame in flight (app.yaml ``runtime.on_switch``): let it finish on the old
#: scenario, or cancel it and run that frame again from its start on the new one (``Runtime._cancelling``).
ON_SWITCH: tuple[str, ...] = ("finish", "cancel")
#: How ONNX Runtime's error reads when a call stopped because its ``RunOptions.terminate`` was set.
_TERMINATED = "terminate flag"
#: ``FrameResult._value`` before its first read.
_NOT_COMPUTED: Any = object()


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


def runtime_options(config: AppConfig, transition: str | None, transition_arena: str | None,
                    transition_schedule: str) -> tuple[str, str]:
    """The transition mode and transition arena a runtime of ``config`` runs with (``Runtime``'s options,
    checked: an unknown value is an ``InputError``; ``on_switch`` is checked by ``Runtime._start``)."""
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
    return mode, transition_arena


class Runtime:
    """An app's scenarios, ready to run frames (Python API of DESIGN.md, "Interfaces").

    ``granularity`` overrides app.yaml's ``runtime.granularity`` (``auto`` or ``layer``), ``transition`` its
    ``runtime.transition`` (``sbrs-tp`` or ``naive``). ``transition_arena``: ``shared`` keeps the minimal
    arena and the hazard analysis serialises the new steps that would touch the old frame's bytes; ``shadow``
    (default under SBRS-TP) runs a transition's new frame in shadow slots planned apart from the old frame
    (about twice the arena of boundary tensors; new steps wait for little or nothing,
    ``sbrs.runtime.switch.transition.plan_shadow``). ``transition_schedule``: ``priority``
    (default) runs both frames on the calling thread, a new step as soon as its wait allows, an old step
    otherwise; ``threads`` runs the new frame on a worker thread concurrently with the old one (Algorithm 7's
    parallelism; pays off only with cores to spare, see ``_Transition``). ``on_switch`` overrides app.yaml's
    ``runtime.on_switch``: ``finish`` (default) lets the frame in flight finish on the old scenario, ``cancel``
    abandons it and runs it again on the new one (``_cancelling``; no SBRS-TP transition then). ``observers`` get
    the run events.
    """

    def __init__(self, app: App | None = None, *, build: LoadedBuild | None = None, granularity: str | None = None,
                 transition: str | None = None, transition_arena: str | None = None,
                 transition_schedule: str = "priority", on_switch: str | None = None,
                 observers: Iterable[RunObserver] = ()) -> None:
        """From an ``App`` (derives and compiles everything here) or from a verified ``sbrs build`` artifact
        (``build``: ``sbrs.build.artifact.load_build``; its plan, tables and unit files are used as they are)."""
        if (app is None) == (build is None):
            raise TypeError("Runtime needs exactly one of app and build")
        config: AppConfig = app.config if app is not None else build.config  # type: ignore[union-attr]
        mode, transition_arena = runtime_options(config, transition, transition_arena, transition_schedule)
        if build is not None and build.reduced is not None:
            raise InputError("the build runs by parts (band calls, not units): open it with "
                             "sbrs.runtime.execute.open.runtime_of_build or sbrs.runtime_for(app)", field="build")
        if build is not None and not build.matches(granularity, mode, transition_arena):
            raise InputError(f"the build was compiled for granularity {build.granularity}, transition "
                             f"{build.transition}, arena {build.transition_arena}; run `sbrs build` with the "
                             f"options wanted or load the app", field="build")
        self._start(config, mode, transition_schedule, observers, on_switch)
        shadow: Mapping[str, int] | None
        self.transitions: TransitionPlan
        if build is not None:
            self.plan, shadow, self.transitions = build.plan, build.shadow, build.transitions
            self._model_bytes = dict(build.model_bytes)
        else:
            assert app is not None
            from sbrs.moc import derive_moc
            from sbrs.model import naive_buffer_bytes, params_bytes
            from sbrs.runtime.compile.plan import build_unit_plan

            moc = derive_moc(app.models, config.adaptive)
            self.plan = build_unit_plan(app, granularity, moc, transition=mode)
            # The model's figures (thesis Eq. 2.6-2.7), kept because the models themselves are not.
            self._model_bytes = {"params_bytes": params_bytes(app.models.values()),
                                 "naive_bytes": sum(naive_buffer_bytes(m) for m in app.models.values())}
            shadow = None
            if transition_arena == "shadow":
                self.plan, shadow = plan_shadow(self.plan)
            self.transitions = build_transition_plan(self.plan, arena=transition_arena, shadow=shadow)
        specs = {t.id: t.spec for t in self.plan.tensors} if build is None else {}
        for unit in self.plan.units:
            if build is not None:  # ONNX Runtime reads the unit file and the shared weights file itself
                self._sessions[unit.id] = create_session(build.unit_path(unit.id), self.providers,
                                                         optimized=build.optimized_here)
                # ONNX Runtime frees its load-time copies (weights read, then prepacked) when the session is
                # ready; handing them back before the next unit loads keeps the process's peak near one unit's
                # copies (multi-cnn: 325-335 -> 307-309 MB peak RSS, the steady state unchanged)
                release_free_memory()
            else:
                from sbrs.runtime.compile.layout import unit_model

                assert app is not None
                self._sessions[unit.id] = create_session(unit_model(app.models, moc, unit, specs, app.name),
                                                         self.providers)
        self._arena = ArenaMemory(self.plan.arena_bytes, self.device, self.plan.alignment)
        self._calls = {
            scenario: tuple(self._bound_call(scenario, unit_id, step) for step, unit_id in enumerate(calls, 1))
            for scenario, calls in self.plan.sequences.items()}
        self._bind_frame_io(config.input.name)
        # a transition's new frame: the same calls, or calls bound to the shadow slots
        self._new_calls, self._new_copy_in, self._new_copy_out = self._calls, self._copy_in, self._copy_out
        if shadow is not None:
            self._bind_shadow(shadow, config.input.name)
        self._transition_starts = self._transition_start_table()
        self.node.loaded(self.facts())

    def _start(self, config: AppConfig, mode: str, transition_schedule: str,
               observers: Iterable[RunObserver], on_switch: str | None) -> None:
        """What every way of executing a plan shares: the control node, providers, the thread pool, the lock and
        the (empty) tables of calls and frame I/O that the engine (``_execute``, ``_Transition``) runs."""
        self.on_switch = on_switch or config.runtime.on_switch
        if self.on_switch not in ON_SWITCH:
            raise InputError(f"unknown on_switch '{self.on_switch}' (allowed: {', '.join(ON_SWITCH)})",
                             field="runtime.on_switch")
        self.transition_schedule = transition_schedule
        self.observers = observers if isinstance(observers, Observers) else Observers(observers)
        # every call runs with these options; under ``cancel`` the control node sets ``terminate`` while a switch
        # to another scenario is pending, and ONNX Runtime stops the call in flight at its next node
        self._run_options = ort.RunOptions()
        self._cancellable = True  # whether a request may cancel the frame in flight (``_cancelling``)
        self.node = ControlNode(tuple(s.name for s in config.scenarios), config.initial, mode=mode,
                                observers=self.observers,
                                interrupt=self._interrupt if self.on_switch == "cancel" else None)
        # each scenario's post-processor, for its results' ``value`` (a user function is imported here, once)
        self.postprocessors: dict[str, PostProcessor] = postprocessors_for(
            {s.name: s.postprocess for s in config.scenarios}, config.input.shape, config.path,
            {s.name: s.defined_in for s in config.scenarios})
        self.providers = resolve_providers(tuple(config.runtime.providers), where=config.path)
        self.device = device_of(self.providers)
        self.thread_pool: ThreadPool = use_global_thread_pool(config.runtime.threads)
        self.memory_limit_bytes: int | None = (None if config.memory_limit_mb is None
                                               else int(config.memory_limit_mb * 1e6))
        self.input_specs = {config.input.name: (tuple(config.input.shape), np.dtype(config.input.dtype))}
        self._input_spec = (config.input.name, *self.input_specs[config.input.name])  # the one input, checked fast
        self._lock = threading.Lock()
        self._closed = False
        self._worker: ThreadPoolExecutor | None = None
        # bookkeeping of frames already handed to the caller: (scenario, seconds, switch request, its record)
        self._unsettled: list[tuple[str, float, SwitchRequest | None, SwitchRecord | None]] = []
        self._bindings: dict[tuple[str, int], tuple[list[tuple[str, int, int]], list[tuple[str, int, int]]]] = {}
        self._bound_ranges: list[tuple[str, int, int]] = []  # (tensor, start, end) of every binding, from base
        self._sessions: dict[str, ort.InferenceSession] = {}
        self._calls: dict[str, tuple[Callable[[], Any], ...]] = {}
        self._copy_in: dict[str, Callable[[np.ndarray], None]] = {}
        self._copy_out: dict[str, dict[str, Callable[[], np.ndarray]]] = {}
        self._copy_out_reads: dict[str, list[tuple[str, int, int]]] = {}  # arena bytes each copy-out reads
        self._transition_starts: dict[tuple[str, str], tuple[bool, bool]] = {}  # _transition_start_table

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

        return iobinding_runner(session, binding, self._run_options)

    def _interrupt(self, cancel: bool) -> None:
        """The control node's ``interrupt`` under ``on_switch: cancel`` (called under its lock): cancel the frame
        in flight unless it is already one run again after a cancellation (``_cancelling``)."""
        self._run_options.terminate = cancel and self._cancellable

    def _bind_shadow(self, shadow: Mapping[str, int], input_name: str) -> None:
        """Bindings of every (scenario, unit) and frame I/O to the shadow slots (``plan_shadow``; CPU arena)."""
        if self.device != "cpu":
            raise SbrsRuntimeError("transition arena 'shadow' needs the CPU arena (device arenas: use 'shared')")
        normal = {t.id: t.offset for t in self.plan.tensors}
        saved = (self._bindings, self._copy_in, self._copy_out, self._copy_out_reads)
        tensors = tuple(replace(t, offset=shadow[t.id]) for t in self.plan.tensors)
        plan = self.plan
        try:
            self.plan = replace(plan, tensors=tensors)
            self._bindings, self._copy_in, self._copy_out, self._copy_out_reads = {}, {}, {}, {}
            self._new_calls = {scenario: tuple(self._bound_call(scenario, unit_id, step)
                                               for step, unit_id in enumerate(calls, 1))
                               for scenario, calls in plan.sequences.items()}
            self._bind_frame_io(input_name)
            self._shadow_bindings = self._bindings
            self._new_copy_in, self._new_copy_out = self._copy_in, self._copy_out
        finally:
            self.plan = plan
            self._bindings, self._copy_in, self._copy_out, self._copy_out_reads = saved
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
                # ``view[...] = array``, bound: 0.2 µs less than ``np.copyto`` per frame (the frame's dtype is checked)
                self._copy_in[scenario] = functools.partial(input_view.__setitem__, Ellipsis)
                self._copy_out[scenario] = {}
                for name, tensor_id in self.plan.outputs[scenario].items():
                    self._slot(tensor_id)
                    self._bindings.setdefault((scenario, last), ([], []))[0].append(self._bound_ranges[-1])
                    self._copy_out_reads.setdefault(scenario, []).append(self._bound_ranges[-1])
                    output = self.plan.tensor(tensor_id)
                    self._copy_out[scenario][name] = self._arena.view(output.offset, output.shape, output.dtype).copy
            else:
                self._copy_in[scenario] = self._device_copy(tensor.id, to_device=True)
                self._copy_out[scenario] = {name: self._device_copy(tensor_id, to_device=False)
                                            for name, tensor_id in self.plan.outputs[scenario].items()}

    def _pairs_apart_from_copy_out(self) -> frozenset[tuple[str, str]]:
        """Ordered pairs (o, n) whose transition's new frame writes no byte that the copy-out of o's outputs
        reads (from the bindings really made). For those, a request seen after o's last step lets the new
        frame run before that copy-out, so its result reaches the caller first (``_new_first``), also when a
        frame is one step. A scenario whose copy-out reads no recorded bytes (a device arena's copy
        sessions): not apart."""
        writes = {scenario: [(start, end) for step in steps for _, start, end in step.writes]
                  for scenario, steps in self.bound_accesses(new_frame=True).items()}
        return frozenset((old, new) for old, reads in self._copy_out_reads.items() for new in writes if new != old
                         and not any(a < d and c < b for _, a, b in reads for c, d in writes[new]))

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
                "steps": {s: len(seq) for s, seq in self.plan.sequences.items()}, **self._memory_facts()}

    #: How this runtime executes its plan (``memory_report``): whole execution units, or band calls by parts.
    execution = "units"

    def memory_report(self) -> dict[str, Any]:
        """What this runtime holds, in bytes (DESIGN.md, "Interfaces"; thesis Eq. 2.5: m = m_par + m_buf).

        ``params_bytes``: the unique parameter bytes of the scenarios it runs (Eq. 2.6; a tensor shared by
        scenarios counts once); ``arena_bytes``: the arena it really allocated; ``total_bytes``: their sum;
        ``limit_bytes``: the app's ``memory_limit_mb`` (None without one) and ``within_limit``. Planned figures
        carry ``planned`` in their names: ``planned_arena_bytes`` (the arena the plan asked for) and
        ``planned_lower_bound_bytes`` (its lower bound). ``arena_holds`` says which tensors the arena holds:
        tensors inside one ONNX Runtime call are ONNX Runtime's own memory, and so are its copies of the
        weights (``sbrs bench`` measures the process).
        """
        params = int(self._model_bytes["params_bytes"])
        arena = int(self._arena.nbytes)
        limit = self.memory_limit_bytes
        return {"execution": self.execution, "params_bytes": params, "arena_bytes": arena,
                "total_bytes": params + arena, "limit_bytes": limit,
                "within_limit": None if limit is None else params + arena <= limit,
                **self._planned_memory(), "transition": self.node.mode, "transition_arena": self.transitions.arena,
                "arena_holds": self._arena_holds()}

    def _planned_memory(self) -> dict[str, int | None]:
        return {"planned_arena_bytes": self.plan.arena_bytes, "planned_lower_bound_bytes": self.plan.arena_lower_bound}

    def _arena_holds(self) -> str:
        return "tensors between execution units (tensors inside a unit are ONNX Runtime's)"

    def _memory_facts(self) -> dict[str, Any]:
        """``memory_report`` figures as ``memory_*`` facts (the ``sbrs_memory_*`` gauges)."""
        report = self.memory_report()
        return {f"memory_{key}": report[key] for key in
                ("params_bytes", "arena_bytes", "total_bytes", "limit_bytes", "planned_arena_bytes")}

    def bound_accesses(self, *, new_frame: bool = False) -> dict[str, tuple[Any, ...]]:
        """Each scenario's steps as the bytes really bound (``StepAccess``, offsets from the arena's base):
        what ``sbrs.runtime.switch.transition.check_schedule`` checks against the transition tables. ``new_frame``:
        the bindings a transition's new frame uses (the shadow slots under arena ``shadow``)."""
        from sbrs.runtime.switch.transition import StepAccess

        bindings = getattr(self, "_shadow_bindings", self._bindings) if new_frame else self._bindings
        return {scenario: tuple(StepAccess(unit_id, tuple(bindings[(scenario, step)][0]),
                                           tuple(bindings[(scenario, step)][1]))
                                for step, unit_id in enumerate(calls, 1))
                for scenario, calls in self.plan.sequences.items()}

    def switch(self, scenario: str, source: str = "api") -> None:
        """Ask for ``scenario`` from the next frame on (an SSR; returns at once, from any thread).

        An unknown name is an ``InputError`` and changes nothing. The frame in flight finishes on the old
        scenario; under SBRS-TP and ``process`` the next frame may start before it ends (module docstring).
        Under ``on_switch: cancel`` the frame in flight is given up and run again on ``scenario`` instead.
        """
        if scenario not in self._calls:
            raise InputError(f"unknown scenario '{scenario}' (scenarios: {', '.join(self.scenarios)})",
                             field="switch")
        self.node.request(scenario, source)

    def postprocess(self, outputs: Mapping[str, np.ndarray], scenario: str | None = None) -> Any:
        """``outputs`` (``infer``'s) as ``scenario``'s ``postprocess:`` makes them (default: the scenario of
        the last frame run); what ``FrameResult.value`` is for ``process``'s results."""
        name = self.node.scenario if scenario is None else scenario
        if name not in self.postprocessors:
            raise InputError(f"unknown scenario '{name}' (scenarios: {', '.join(self.scenarios)})", field="scenario")
        return value_of(self.postprocessors, outputs, FrameMeta(0, name, 0.0))

    def status(self) -> dict[str, Any]:
        """The control node's snapshot (state, scenario, pending request, Δ of the last switch, ...)."""
        return self.node.status()

    def infer(self, frame: Frame) -> dict[str, np.ndarray]:
        """Run one frame on the current scenario: output name → array (copies owned by the caller).

        A pending switch request applies to this frame (nothing is in flight between ``infer`` calls).
        """
        arrays = self._checked_frame(frame)
        with self._lock:
            result = self._execute(arrays, 0, None, mode="naive")
            self._settle()
        assert isinstance(result, FrameResult)  # no look-ahead, no transition
        return result.outputs

    def process(self, frames: Iterable[Frame], *, order: str = "completion") -> Iterator[FrameResult]:
        """Run ``frames`` (the pipelined entry point of ``sbrs run``): one result per frame, each carrying its
        index in the stream; no frame is lost or run twice.

        ``order``: ``completion`` (default) yields each result the moment its outputs exist. Outside switches
        that is stream order. During an SBRS-TP transition the next frame, on the new scenario, may finish
        before the frame in flight (which finishes on the old scenario): its result then comes first, so
        the caller holds the new scenario's output as early as it exists; the old frame's result follows.
        ``stream`` yields in stream order (the new frame's result waits for the old one).
        While a transition's first result is with the caller, the old frame's rest is still to run: the
        runtime stays locked (``infer`` from another thread waits) until the caller asks for the next result.
        A malformed frame raises ``InputError`` when its turn comes; the frames before it were all yielded.
        """
        if order not in RESULT_ORDERS:  # checked at the call, not at the first result
            raise InputError(f"unknown result order '{order}' (allowed: {', '.join(RESULT_ORDERS)})", field="order")
        return self._process(frames, order=order)

    def _process(self, frames: Iterable[Frame], *, order: str = "completion", inject: tuple[int, str] | None = None,
                 mode: str | None = None) -> Iterator[FrameResult]:
        """``process`` with a test/bench hook: ``inject = (s, name)`` makes an SSR for ``name`` arrive just
        as step s of the first frame starts (thesis step^o_SSR = s); ``mode`` overrides the transition mode."""
        lookahead = _Lookahead(iter(frames), self._checked_frame)
        index = 0
        try:
            while True:
                arrays = lookahead.take()
                if arrays is None:
                    return
                with self._lock:
                    outcome = self._execute(arrays, index, lookahead, mode=mode or self.node.mode, inject=inject)
                    # Two frames at once (a switch): while one result is with the caller, the other frame's rest
                    # or outputs are still in the arena, so both are yielded under the lock.
                    if type(outcome) is tuple:  # ``_new_first``: the new frame ran, the old one awaits copy-out
                        new_result, old_frame = outcome
                        if order == "completion":
                            try:
                                yield new_result
                            finally:  # also when the caller stops here: the old frame is counted
                                old_result = self._old_frame_result(*old_frame)
                            yield old_result
                        else:
                            yield self._old_frame_result(*old_frame)
                            yield new_result
                    elif isinstance(outcome, _Transition):
                        yield from outcome.deliver(order)
                inject = None
                if type(outcome) is FrameResult:
                    index += 1
                    yield outcome
                else:
                    index += 2
        finally:
            with self._lock:
                self._settle()

    # -- the engine -------------------------------------------------------------------------------------

    def _execute(self, arrays: Mapping[str, np.ndarray], index: int, lookahead: _Lookahead | None, *, mode: str,
                 inject: tuple[int, str] | None = None) -> FrameResult | _Transition | tuple[FrameResult, _OldFrame]:
        """Run frame ``index``, or hand it and the next frame to an SBRS-TP transition. The caller holds the lock.

        A request pending at the frame boundary sends this frame to the new scenario (nothing is in flight).
        In SBRS-TP mode the pending request is checked after every old step j (Algorithm 7, line 2: the step the
        SSR arrived in finishes first); when some new step may start before the old frame ends and the next
        frame is at hand, a ``_Transition`` takes over the rest of this frame and the next one. After the last
        step, j = |φ^o|, the old frame is computed but not yet copied out: when the new frame writes nothing
        that copy-out reads (the shadow arena keeps them apart, ``plan_shadow``), the new frame runs first
        (``_new_first``; every switch of a one-step app, such as tiny and pamap2, goes this way): its result
        comes back with what the old frame's result needs (``_old_frame_result``).
        """
        if self._closed:
            raise SbrsRuntimeError("the runtime is closed")
        if self.on_switch == "cancel":
            return self._cancelling(arrays, index, inject)
        node = self.node
        if node.pending is None or len(self._unsettled) >= MAX_UNSETTLED:
            self._settle()  # else the switch goes first; the bookkeeping waits (bounded, requests may never stop)
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
            if step == 1 and request is not None and last > 1:
                node.begin(request)  # after the new scenario's first step (ControlNode docstring)
            if mode == "sbrs-tp" and lookahead is not None:
                pending = node.pending  # one read: another thread may replace or clear it at any time
                if pending is not None and pending.scenario != scenario:
                    if step == last:
                        new_first = self._new_first(scenario, pending, lookahead, index + 1)
                        if new_first is not None:
                            return new_first, (scenario, index, begin, request, previous, mode)
                    else:
                        transition = self._start_transition(scenario, step, pending, lookahead)
                        if transition is not None:
                            transition.old_frame(index, begin, request, previous)
                            return transition
        return self._old_frame_result(scenario, index, begin, request, previous, mode)

    def _old_frame_result(self, scenario: str, index: int, begin: float, request: SwitchRequest | None,
                          previous: str, mode: str, cancelled_steps: int | None = None) -> FrameResult:
        """A frame computed on ``scenario`` from ``begin``, copied out now: its result, with the record of the
        switch it was the first frame of (``request`` from ``previous``, at a frame boundary) if any."""
        outputs = {name: copy() for name, copy in self._copy_out[scenario].items()}
        done = time.perf_counter()
        record = None
        if request is not None:
            record = self.node.record(request, previous, done, ssr_step=None, overlapped_steps=0, mode=mode,
                                      cancelled_steps=cancelled_steps)
        self._unsettled.append((scenario, done - begin, request, record))
        return FrameResult(index, scenario, outputs, done - begin, record, self.postprocessors)

    def _cancelling(self, arrays: Mapping[str, np.ndarray], index: int,
                    inject: tuple[int, str] | None) -> FrameResult:
        """Run frame ``index`` under ``on_switch: cancel``. The caller holds the lock.

        A switch request for another scenario abandons the frame in flight: ONNX Runtime stops the call under
        way at its next node (the control node sets the calls' ``RunOptions.terminate`` while such a request is
        pending), or the loop stops between two steps; then the same frame runs again from its start on the new
        scenario. So Δ is the rest of one node plus the new frame, where finishing costs the rest of the old
        frame; the old scenario's work on that frame is lost, the frame is not: its one result comes from the new
        scenario, and its record's ``cancelled_steps`` says how many old steps had run (observers get
        ``frame_cancelled``). A request seen after the last step finds the frame complete: it is delivered, and
        the switch happens at the frame boundary. A frame is cancelled at most once: requests arriving while
        it runs again wait for its end (the frame boundary), so that requests coming faster than frames can
        never keep every frame from finishing. No SBRS-TP transition runs in this mode: abandoning the old frame
        leaves it nothing to overlap.
        """
        node = self.node
        cancelled: int | None = None
        self._cancellable = True  # (a request arriving now is taken by ``take`` below, which clears terminate)
        while True:
            if node.pending is None or len(self._unsettled) >= MAX_UNSETTLED:
                self._settle()
            previous = node.scenario
            request = node.take()  # clears ``terminate`` under the node's lock when it takes a request
            scenario = node.scenario
            calls = self._calls[scenario]
            last = len(calls)
            begin = time.perf_counter()
            for array in arrays.values():
                self._copy_in[scenario](array)
            done = 0
            try:
                for call in calls:
                    if inject is not None and inject[0] == done + 1:
                        node.request(inject[1], "bench")
                    call()
                    done += 1
                    if done == 1 and request is not None and last > 1:
                        node.begin(request)
                    pending = node.pending
                    if done < last and pending is not None and pending.scenario != scenario and cancelled is None:
                        break
                else:
                    mode = node.mode if cancelled is None else "cancel"
                    return self._old_frame_result(scenario, index, begin, request, previous, mode, cancelled)
            except Exception as error:  # onnxruntime raises RuntimeError (IOBinding) or its own Fail for it
                if _TERMINATED not in str(error):
                    raise
            inject = None
            self._cancellable = False  # before ``take`` clears terminate: later requests leave it cleared
            node.frame_cancelled(scenario, done)
            if request is not None:  # this frame was the first of a switch that now ends without an output
                node.abandon(request)
            cancelled = done

    def _settle(self) -> None:
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

    def _start_transition(self, old: str, step: int, pending: SwitchRequest,
                          lookahead: _Lookahead) -> _Transition | None:
        """The transition old → ``pending``'s scenario after old step ``step`` < |φ^o| (Algorithm 7), if it
        helps: when new step 1 need not wait for the whole old frame (else the frame boundary does the same,
        ``_transition_starts``). Only that very request is taken (``ControlNode.take``): another thread may
        replace it while this waits for the next frame; the replacement is seen after the next old step."""
        ok = self._transition_starts.get((old, pending.scenario))
        if ok is None or not ok[0]:
            return None
        arrays = lookahead.peek()
        if arrays is None:
            return None
        request = self.node.take(pending)
        if request is None:
            return None
        lookahead.take()
        return _Transition(self, request, old, self.transitions.table(old, request.scenario), step, arrays)

    def _new_first(self, old: str, pending: SwitchRequest, lookahead: _Lookahead, index: int) -> FrameResult | None:
        """After old's last step, before its copy-out: run the next frame (``index``) on ``pending``'s scenario
        now and return its result, when the new frame writes nothing that copy-out reads (``_transition_starts``)
        and the next frame is at hand; else None (the switch waits for the frame boundary).

        SBRS-TP's transition with no old step left (Algorithm 7 with step^o_SSR = |φ^o|): no new step waits,
        so there is nothing to schedule, and this path does without ``_Transition``'s objects and generator,
        because everything run here is in Δ: on tiny (0.1-0.3 ms frames) the general path spent 14-19 µs
        between the old frame's last call and the new frame's first, this one 8-12 µs.
        """
        ok = self._transition_starts.get((old, pending.scenario))
        if ok is None or not ok[1]:
            return None
        arrays = lookahead.peek()
        if arrays is None:
            return None
        node = self.node
        request = node.take(pending)
        if request is None:
            return None
        lookahead.take()
        new = request.scenario
        calls = self._new_calls[new]
        old_steps = len(self._calls[old])
        begin = time.perf_counter()
        for array in arrays.values():
            self._new_copy_in[new](array)
        calls[0]()
        if len(calls) > 1:  # the switch is under way until the new frame's last step (state, progress)
            node.begin(request)
            for step in range(1, len(calls)):
                node.step_done(old_steps, step)
                calls[step]()
        return self._new_frame_result(request, old, index, begin, old_steps, 0)

    def _new_frame_result(self, request: SwitchRequest, old: str, index: int, begin: float, ssr_step: int,
                          overlapped_steps: int) -> FrameResult:
        """The first frame of ``request``'s SBRS-TP switch from ``old``, computed in the new frame's slots from
        ``begin``, copied out now: its result with the switch's record (``_new_first``, ``_Transition``)."""
        new = request.scenario
        outputs = {name: copy() for name, copy in self._new_copy_out[new].items()}
        end = time.perf_counter()
        record = self.node.record(request, old, end, ssr_step=ssr_step, overlapped_steps=overlapped_steps,
                                  mode="sbrs-tp")
        self._unsettled.append((new, end - begin, request, record))
        return FrameResult(index, new, outputs, end - begin, record, self.postprocessors)

    def _transition_start_table(self) -> dict[tuple[str, str], tuple[bool, bool]]:
        """(o, n) → (whether a transition helps after an old step before the last, after the last one), from
        the tables and the bindings, once at load (the test sits in a switch's critical path).

        Before the last step: new step 1 need not wait for the whole old frame (``wait_1 < |φ^o|``). After
        it: the old frame is computed but not copied out, and the new frame may go first when it writes
        nothing that copy-out reads (``_pairs_apart_from_copy_out``, or no new step waits for the old frame
        at all).
        """
        apart = self._pairs_apart_from_copy_out()
        starts: dict[tuple[str, str], tuple[bool, bool]] = {}
        for table in self.transitions.pairs.values():
            waits, last = table.wait, table.old_steps
            starts[(table.old, table.new)] = (not waits or waits[0] < last,
                                              (table.old, table.new) in apart or not waits or max(waits) < last)
        return starts

    def _transition_worker(self) -> ThreadPoolExecutor:
        if self._worker is None:
            from concurrent.futures import ThreadPoolExecutor  # only the ``threads`` schedule has a worker

            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sbrs-transition")
        return self._worker

    def _checked_frame(self, frame: Frame) -> dict[str, np.ndarray]:
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
        arrays, self._next = self._next, None
        if arrays is None:
            frame = next(self._frames, None)
            return None if frame is None else self._check(frame)
        return arrays


class _Transition:
    """One SBRS-TP transition: the rest of the old frame and the whole next frame on the new scenario.

    Constraints (Algorithm 7 with the tables of ``sbrs.runtime.switch.transition``): old steps run in order, new
    steps run in order, new step i starts only once old steps 1..wait_i have finished. The SSR was acted on
    after old step ``ssr_step`` (Algorithm 7, line 2). ``deliver`` runs both frames and yields each result as
    its outputs exist (``completion``) or old first (``stream``). Two schedules keep the constraints:

    ``priority`` (default): one thread. Whenever the next new step's wait is met it runs, else the next old
    step runs. Deviation from Algorithm 7, which runs old and new steps side by side: on the 2-core machine
    this was built on, ONNX Runtime already spreads each step over both cores (the global thread pool), and
    two whole models run concurrently took 1.06x (cifar10), 1.24x (tiny), 1.35x (drone) the time of running
    them one after the other (0.80x only for pamap2's tiny 1-D convolutions) — so overlap cannot shorten the
    critical path, but putting the new frame first does: Δ becomes the new frame's own time plus the old steps
    it must wait for. The old frame still finishes on the old scenario with its own output, right after.

    ``threads``: the old frame's rest on a worker thread, the new frame on the caller's (ONNX Runtime releases
    the GIL); new step i waits on a condition for old step wait_i. Algorithm 7's lock-step barrier is relaxed
    to these per-step waits (every constraint of X that stems from a hazard is kept, ``transition`` module
    docstring).
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
        self._done = ssr_step  # old steps finished
        # the ``threads`` schedule's: made there, as each object made here delays the new frame's first step
        self._condition: threading.Condition | None = None
        self._old_calls = runtime._calls[old]
        self._old_index, self._old_begin, self._old_request, self._previous = 0, 0.0, None, old

    def old_frame(self, index: int, begin: float, request: SwitchRequest | None, previous: str) -> None:
        """The frame in flight: its stream index, start time, and the switch it is itself the first frame of
        (``request`` from ``previous``, decided at its frame boundary), if any."""
        self._old_index, self._old_begin, self._old_request, self._previous = index, begin, request, previous

    def deliver(self, order: str) -> Iterator[FrameResult]:
        """Run both frames; yield their results in ``order`` (``Runtime.process``). If the caller stops asking
        after the first result, the old frame still finishes (its result is dropped with the generator)."""
        finish_old: Callable[[], FrameResult]
        if self.runtime.transition_schedule == "threads":
            self._condition = threading.Condition()
            future = self.runtime._transition_worker().submit(self._old_rest)
            try:
                new_result = self._new_frame_threaded()
            except BaseException:
                future.result()
                raise
            finish_old = future.result
        else:
            old_result, new_result = self._priority()
            if old_result is not None:  # the new frame had to wait for the whole old one: it came first
                order = "stream"
            finish_old = self._old_rest if old_result is None else lambda: old_result
        if order == "completion":
            try:
                yield new_result
            finally:
                old_done = finish_old()
            yield old_done
        else:
            yield finish_old()
            yield new_result

    def _priority(self) -> tuple[FrameResult | None, FrameResult]:
        """Until the new frame is done: a new step whenever its wait is met, else the next old step. Returns
        the old frame's result if it finished meanwhile (else None), and the new frame's."""
        runtime, node = self.runtime, self.runtime.node
        new_calls = runtime._new_calls[self.new]
        waits, old_steps = self.table.wait, len(self._old_calls)
        old_result: FrameResult | None = None
        new_begin = 0.0
        for step, call in enumerate(new_calls):
            while waits[step] > self._done:
                self._old_calls[self._done]()
                self._done += 1
                if self._done == old_steps:
                    old_result = self._old_result()
                node.step_done(self._done, step)
            if step == 0:
                new_begin = time.perf_counter()
                for array in self.arrays.values():
                    runtime._new_copy_in[self.new](array)
            if self._done < old_steps:
                self.overlapped += 1
            call()
            if step == 0 and len(new_calls) > 1:
                node.begin(self.request)
            node.step_done(self._done, step + 1)
        return old_result, self._new_result(new_begin)

    def _old_rest(self) -> FrameResult:
        """The old frame's remaining steps and its result (caller's thread, or the worker under ``threads``)."""
        old_steps = len(self._old_calls)
        try:
            for step in range(self._done + 1, old_steps + 1):
                self._old_calls[step - 1]()
                if step < old_steps:
                    self._old_done(step)
            return self._old_result()
        finally:
            self._old_done(old_steps)  # after the copy-out (it belongs to the last old step)

    def _old_result(self) -> FrameResult:
        return self.runtime._old_frame_result(self.old, self._old_index, self._old_begin, self._old_request,
                                              self._previous, "sbrs-tp")

    def _new_result(self, begin: float) -> FrameResult:
        return self.runtime._new_frame_result(self.request, self.old, self._old_index + 1, begin, self.ssr_step,
                                              self.overlapped)

    def _old_done(self, step: int) -> None:
        if self._condition is None:  # priority: one thread
            self._done = step
        else:
            with self._condition:
                self._done = step
                self._condition.notify_all()
        self.runtime.node.step_done(step, 0)

    def _new_frame_threaded(self) -> FrameResult:
        runtime, new = self.runtime, self.new
        old_steps = self.table.old_steps
        begin = time.perf_counter()
        for step, (call, wait) in enumerate(zip(runtime._new_calls[new], self.table.wait, strict=True), 1):
            if self._done < wait:
                assert self._condition is not None
                with self._condition:
                    while self._done < wait:
                        self._condition.wait()
            if self._done < old_steps:
                self.overlapped += 1
            if step == 1:
                for array in self.arrays.values():
                    runtime._new_copy_in[new](array)
            call()
            if step == 1 and len(self.table.wait) > 1:
                runtime.node.begin(self.request)
        return self._new_result(begin)
