"""The engine: one runtime for every compiled plan, its public API and the frame loop.

    >>> with runtime_for("apps/tiny.yaml") as rt:   # doctest: +SKIP
    ...     outputs = rt.infer(frame)               # {"output": array of shape (1, 10)}
    ...     rt.switch("skip")

A ``Runtime`` executes a :class:`Program` (a ``UnitPlan`` of execution units, or a ``PartsPlan`` of band calls
under a memory limit, with its transition tables and where its sessions' models come from): one session per
unit or distinct call model, loaded once whatever the number of scenarios using it, one arena
(``sbrs.runtime.device.ArenaMemory``), every step bound to its arena bytes once (``sbrs.runtime.binding``).
There is one constructor; ``Runtime.from_app``, ``from_build`` and ``from_models`` make the program
(``sbrs.runtime.program``) and call it. The models are not kept: after loading, the runtime holds only sessions,
bindings, the arena and the (small) plan. Drop the ``App`` afterwards and call
``sbrs.ort_env.release_free_memory()`` to give the parsed weights' memory back to the system (``sbrs run``
and ``sbrs bench`` run from a build and never parse a model).

Per frame (``infer``): check the frame, copy it into the arena, call each bound step of the current scenario,
copy the graph outputs out (the caller owns the copies). A rejected frame or switch raises ``InputError``
before anything is touched, so the runtime stays usable.

Switching (thesis 5.7.4, 5.9): ``switch(name)`` only hands a switch request (SSR) to the control node
(``sbrs.runtime.control_node``), from any thread; it never waits for inference. The frame in flight
always finishes on the old scenario with its own output; the next frame runs on the new one; no frame is
dropped or run twice. ``infer`` (one frame at a time) applies a request between frames. ``process(frames)``
is the pipelined entry point ``sbrs run`` uses: it sees the next frame while one is in flight, so under
SBRS-TP (app.yaml ``runtime.transition: sbrs-tp``) a request noticed after old step j starts the next frame
on the new scenario at once: before the old frame's remaining steps (``Transition``, schedule ``priority``)
or beside them on a worker thread (``threads``), or, after its last step, before its copy-out
(``new_first``); new step i waits for old step ``wait_i`` of the transition table
(``sbrs.compile.transitions``: Algorithm 6 with arena-byte hazards, Algorithm 7 event-driven). Results
are yielded as their outputs exist, so the caller holds the new scenario's output as soon as it is computed,
and the old frame's result right after (``order="stream"`` keeps stream order). Under ``naive`` the request
waits for the frame boundary. Under ``runtime.on_switch: cancel`` the frame in flight is given up instead
and runs again from its start on the new scenario (``cancelling``); under ``resume`` (beyond the thesis) it
continues on the new scenario from the deepest step both share (``resuming``, docs/RESUME.md). The switch paths are in
``sbrs.runtime.switching``; either way the response delay Δ (request arrival → first output of the new
scenario) is recorded for every switch (``SwitchRecord`` on the frame's result, the node's status, the
observers' ``switch_done``). What every frame does on the bound plan (check, take the request, copy in, results
and their bookkeeping) is the runtime's ``FrameRunner`` (``runner``, ``sbrs.runtime.runner``), which the frame
loop, the switch paths and the streams share; what a runtime reports about itself (``facts``,
``memory_report``) is ``sbrs.runtime.reports``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

from sbrs.compile.unit_threads import whole_frame_units
from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.ort_env import (
    Threads,
    create_session,
    release_free_memory,
    resolve_providers,
    share_cuda_allocator,
    use_threads,
)
from sbrs.outputs.postprocess import FrameMeta, PostProcessor, postprocessors_for, value_of
from sbrs.runtime import reports
from sbrs.runtime.binding import Bound, bind_parts, bind_units
from sbrs.runtime.control_node import ControlNode, SwitchRequest
from sbrs.runtime.device import ArenaMemory, device_of
from sbrs.runtime.events import Observers, RunObserver
from sbrs.runtime.program import Program, app_program, build_program, models_program, runtime_options
from sbrs.runtime.runner import Frame, FrameResult, FrameRunner, OldFrame, frames_never_wait
from sbrs.runtime.switching import (
    TERMINATED,
    Lookahead,
    Transition,
    cancelling,
    new_first,
    resuming,
    start_transition,
    transition_starts,
)

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from sbrs.app.app import App
    from sbrs.app.config import AppConfig
    from sbrs.artifact.read import LoadedBuild
    from sbrs.compile.footprint import Footprint
    from sbrs.compile.parts import Tiles
    from sbrs.compile.parts_plan import PartsPlan
    from sbrs.compile.tables import TransitionPlan
    from sbrs.compile.units import UnitPlan
    from sbrs.model.cnn import CnnModel
    from sbrs.runtime.streams import Streams

#: The order ``Runtime.process`` yields results in: as their outputs exist, or as the frames came.
RESULT_ORDERS: tuple[str, ...] = ("completion", "stream")
#: What a switch request does to the frame in flight (app.yaml ``runtime.on_switch``): let it finish on the old
#: scenario, cancel it and run that frame again from its start on the new one (``switching.cancelling``), or
#: stop it and continue that frame on the new one from the layers both share (``switching.resuming``).
ON_SWITCH: tuple[str, ...] = ("finish", "cancel", "resume")
#: Units on two streams get sessions of the runtime's threads for a switch's frame on both cores where a
#: scenario's frame on one stream (the build's timing) takes at least this long (seconds).
BOTH_CORES_MIN_FRAME_S = 2e-3


class Runtime:
    """An app's scenarios, ready to run frames (Python API of DESIGN.md, "Interfaces").

    Made from an app (``Runtime.from_app``: compiled in memory), a verified build (``Runtime.from_build``) or
    bare models (``Runtime.from_models``, by parts); ``sbrs.runtime_for`` chooses. Options:
    ``granularity`` overrides app.yaml's ``runtime.granularity`` (``auto`` or ``layer``), ``transition`` its
    ``runtime.transition`` (``sbrs-tp`` or ``naive``). ``transition_arena``: ``shared`` keeps the minimal
    arena and the hazard analysis serialises the new steps that would touch the old frame's bytes; ``shadow``
    (default under SBRS-TP, units only) runs a transition's new frame in shadow slots planned apart from the old
    frame (about twice the arena of boundary tensors; new steps wait for little or nothing,
    ``sbrs.compile.transitions.plan_shadow``). ``transition_schedule``: ``priority``
    (default) runs both frames on the calling thread, a new step as soon as its wait allows, an old step
    otherwise; ``threads`` runs the new frame on a worker thread concurrently with the old one (Algorithm 7's
    parallelism; pays off only with cores to spare, see ``Transition``). ``on_switch`` overrides app.yaml's
    ``runtime.on_switch``: ``finish`` (default) lets the frame in flight finish on the old scenario, ``cancel``
    abandons it and runs it again on the new one (``cancelling``; no SBRS-TP transition then), ``resume`` stops it
    and continues it on the new one from the deepest step both share (``resuming``, beyond the thesis; units
    only: by parts no step is shared, and it runs as ``cancel``). ``observers`` get the run events.
    """

    def __init__(self, config: AppConfig, program: Program, *, transition: str | None = None,
                 transition_schedule: str = "priority", on_switch: str | None = None,
                 observers: Iterable[RunObserver] = ()) -> None:
        """The one constructor: ``program`` loaded and bound for ``config``'s app (the transition arena is the
        program's: shadow slots, or the one shared arena)."""
        plan = program.plan
        by_parts = plan.execution == "parts"
        arena_kind = "shadow" if program.shadow is not None else "shared"
        mode, _ = runtime_options(config, transition, arena_kind, transition_schedule)
        self.on_switch = on_switch or config.runtime.on_switch
        if self.on_switch not in ON_SWITCH:
            raise InputError(f"unknown on_switch '{self.on_switch}' (allowed: {', '.join(ON_SWITCH)})",
                             field="runtime.on_switch")
        self.transition_schedule = transition_schedule
        self.observers = observers if isinstance(observers, Observers) else Observers(observers)
        # every call runs with these options; under ``cancel`` the control node sets ``terminate`` while a switch
        # to another scenario is pending, and ONNX Runtime stops the call in flight at its next node
        self._run_options = ort.RunOptions()
        interrupt = {"cancel": self._interrupt, "resume": self._interrupt_resume,
                     "finish": self._interrupt_step}[self.on_switch]
        self.node = ControlNode(tuple(s.name for s in config.scenarios), config.initial, mode=mode,
                                observers=self.observers, interrupt=interrupt)
        # each scenario's post-processor, for its results' ``value`` (a user function is imported here, once)
        self.postprocessors: dict[str, PostProcessor] = postprocessors_for(
            {s.name: s.postprocess for s in config.scenarios}, config.input.shape, config.path,
            {s.name: s.defined_in for s in config.scenarios}, {s.name: s.input_size for s in config.scenarios})
        self.providers = resolve_providers(tuple(config.runtime.providers), where=config.path)
        self.device = device_of(self.providers)
        if by_parts and self.device != "cpu":
            raise InputError("processing by parts runs on the CPU provider only (line-buffer moves are numpy "
                             "copies)", field="runtime.providers")
        self.thread_pool: Threads = use_threads(config.runtime.threads, config.runtime.threads_scope,
                                                None if program.footprint is None else program.footprint.tensors_bytes)
        if "CUDAExecutionProvider" in self.providers:
            share_cuda_allocator()
        self.memory_limit_bytes: int | None = (None if config.memory_limit_mb is None
                                               else int(config.memory_limit_mb * 1e6))
        if by_parts and self.memory_limit_bytes is None:  # a build made with `--memory-limit`
            self.memory_limit_bytes = plan.memory_limit_bytes  # type: ignore[union-attr]
        self.input_specs = {config.input.name: (tuple(config.input.shape), np.dtype(config.input.dtype))}
        #: How this runtime executes its plan (``memory_report``): whole execution units, or band calls by parts.
        self.execution: str = plan.execution
        self.plan: UnitPlan | PartsPlan = plan
        self.transitions: TransitionPlan = program.transitions
        #: The models' figures (``params_bytes``, ``naive_bytes``: thesis Eq. 2.6-2.7), kept as the models are not.
        self.model_bytes: dict[str, int] = dict(program.model_bytes)
        #: The plan of what this runtime holds (``sbrs.compile.footprint``; None: made from the arena alone).
        self.footprint: Footprint | None = program.footprint
        self._session_keys: tuple[str, ...] = (plan.call_keys if by_parts  # type: ignore[union-attr]
                                               else tuple(u.id for u in plan.units))  # type: ignore[union-attr]
        self._sessions: dict[str, ort.InferenceSession] = {}
        # a unit runs on runtime.threads of its own; a band call on the calling thread alone: it is too small for a
        # pool's fork/join per node (sbrs.ort_env). Streams (sbrs.runtime.streams) run frames of their own on
        # one-thread sessions, on a GPU provider as on the CPU (each stream's arena on the device, the sessions
        # shared: ONNX Runtime runs concurrent calls of one session); cancel and resume give a frame in flight up,
        # which needs one frame at a time.
        streams = 1
        if self.on_switch == "finish":
            streams = (plan.streams if by_parts  # type: ignore[union-attr]
                       else config.runtime.max_streams(by_parts=False, measured=program.streams))
        elif config.runtime.streams == 2:  # said: the app file asked for two, and would not know why it has one
            logger.info("sbrs: runtime.streams: 2 runs one stream under on_switch: %s (a frame in flight given up "
                        "or resumed needs one frame at a time)", self.on_switch)
        threads = 1 if by_parts or streams > 1 else self.thread_pool.count
        # a unit that is a scenario's whole frame is called frame after frame: its pool stays warm (sbrs.ort_env)
        whole_frames = frozenset() if by_parts else whole_frame_units(plan.sequences)  # type: ignore[union-attr]
        # Units on two streams on the CPU: every unit has a second session on the runtime's threads, for a switch
        # that finds every stream busy. It stops their frames and runs its own on both cores (``Streams.stop_for``):
        # detect on two streams then switched at 0.81-0.95 of plain ONNX Runtime's Δ against 1.11-1.13 with the
        # streams' one-thread sessions, which ran it at one core's speed beside the other frame
        # (docs/MEASUREMENTS.md, "Two streams whose switch stops both frames").
        # Only where frames are long enough for it (``BOTH_CORES_MIN_FRAME_S``, by the build's timing of the
        # streams; an app that asks for two streams is not timed): on cifar10's frames of 0.5-0.8 ms the stops and
        # the second sessions' waking made switches slower (1.84 against 1.19-1.29 ms).
        self._switch_sessions: dict[str, ort.InferenceSession] = {}
        long_frames = program.longest_frame_s is None or program.longest_frame_s >= BOTH_CORES_MIN_FRAME_S
        both_cores = (streams > 1 and long_frames and plan.execution == "units" and self.device == "cpu"
                      and self.thread_pool.count > 1)
        for key in self._session_keys:
            self._sessions[key] = create_session(program.model(key), self.providers,
                                                 threads=min(threads, program.unit_threads.get(key, threads)),
                                                 scope=self.thread_pool.scope, optimized=program.optimized,
                                                 warm=key in whole_frames)
            if program.release:
                release_free_memory()
            if both_cores:
                count = self.thread_pool.count
                self._switch_sessions[key] = create_session(program.model(key), self.providers,
                                                            threads=min(count, program.unit_threads.get(key, count)),
                                                            scope=self.thread_pool.scope, optimized=program.optimized)
                if program.release:
                    release_free_memory()
        self._arena = ArenaMemory(plan.arena_bytes, self.device, plan.alignment)
        # the app as one graph (``runtime.session: one``) binds its one session per scenario; imported only then
        # (with the one graph's plan: 20 ms of a units app's start)
        bind_plan = bind_units
        if plan.execution == "one":
            from sbrs.runtime.one_session import bind_one as bind_plan
        if by_parts:
            bound = bind_parts(plan, self._sessions, self._arena, self._run_options)
        else:
            bound = bind_plan(plan, self._sessions, self._arena, self.device, config.input.name, self._run_options)
        new: Bound = bound
        if program.shadow is not None:  # a transition's new frame: the same sessions bound to the shadow slots
            new = bind_plan(plan, self._sessions, self._arena, self.device, config.input.name, self._run_options,
                            offsets=program.shadow)
        self._bound_ranges = [*bound.ranges, *(new.ranges if new is not bound else ())]
        #: The bound plan and what every frame does on it (``sbrs.runtime.runner``), shared with the switch paths
        #: and the streams.
        self.runner = FrameRunner(self.node, bound, new, transitions=self.transitions,
                                  transition_schedule=transition_schedule, postprocessors=self.postprocessors,
                                  input_specs=self.input_specs)
        # every stream after the first binds the plan again, to an arena of its own (``sbrs.runtime.streams``)
        self._streams: Streams | None = None
        self._frame_lock: threading.Lock | contextlib.nullcontext[None] = contextlib.nullcontext()
        if streams > 1:
            def bind(arena: ArenaMemory, run_options: ort.RunOptions) -> Bound:
                if by_parts:
                    return bind_parts(plan, self._sessions, arena, run_options,  # type: ignore[arg-type]
                                      record_accesses=False)
                return bind_plan(plan, self._sessions, arena, self.device,  # type: ignore[arg-type]
                                 config.input.name, run_options)

            def bind_on_both_cores(arena: ArenaMemory, run_options: ort.RunOptions) -> Bound:
                return bind_plan(plan, self._switch_sessions, arena, self.device,  # type: ignore[arg-type]
                                 config.input.name, run_options)

            from sbrs.runtime.streams import Streams  # only a runtime on band streams loads them

            self._streams = Streams(streams, bound, self._arena, self._run_options, plan.arena_bytes,
                                    plan.alignment, bind, self.device,
                                    bind_on_both_cores if self._switch_sessions else None)
            self._frame_lock = self._streams.locks[0]  # stream 0's arena is the runtime's own
        self.runner.transition_starts = transition_starts(self.runner)
        # under ``resume``: where a frame stopped on o continues on n (``sbrs.compile.transitions.ResumeTable``),
        # and which steps of o a request for n lets finish (``_interrupt_resume``)
        if self.on_switch == "resume" and not by_parts:
            from sbrs.compile.transitions import resume_tables  # the analysis, only where a run resumes

            self.runner.resume = resume_tables(plan)  # type: ignore[arg-type]
        self.runner.resume_keep = {pair: tuple(step > 0 and r >= step for step, r in enumerate(table.after))
                                   for pair, table in self.runner.resume.items()}
        # under ``finish`` with SBRS-TP on execution units: from which old step in flight a request for n stops
        # that step's call, so that the transition starts after the step before it (``_interrupt_step``)
        if self.on_switch == "finish" and plan.execution == "units":
            self.runner.preempt_from = {
                (table.old, table.new): max(2, table.wait[0] + 1) for table in self.transitions.pairs.values()
                if table.wait and self.runner.transition_starts[(table.old, table.new)][0]}
        self.node.loaded(self.facts())

    @classmethod
    def from_app(cls, app: App, *, granularity: str | None = None, parts: PartsPlan | None = None,
                 transition: str | None = None, transition_arena: str | None = None, **options: Any) -> Runtime:
        """The runtime of ``app`` compiled in memory: its execution units, or the band calls of ``parts``
        (``sbrs.compile.fit.app_parts``, ``fit_parts``). ``options`` as the constructor's."""
        program, mode = app_program(app, granularity=granularity, parts=parts, transition=transition,
                                    transition_arena=transition_arena,
                                    transition_schedule=options.get("transition_schedule", "priority"),
                                    on_switch=options.get("on_switch"))
        return cls(app.config, program, transition=mode, **options)

    @classmethod
    def from_build(cls, build: LoadedBuild, *, granularity: str | None = None, transition: str | None = None,
                   transition_arena: str | None = None, **options: Any) -> Runtime:
        """The runtime of a verified build (``sbrs.artifact.read.load_build``): ONNX Runtime reads its model
        files (their optimised form where it was made on this machine) and its one weights file. A build of
        units runs only with the options it was compiled for (``InputError`` otherwise); a build by parts runs
        either transition mode on its one arena, whatever the granularity."""
        program, mode = build_program(build, granularity=granularity, transition=transition,
                                      transition_arena=transition_arena,
                                      transition_schedule=options.get("transition_schedule", "priority"))
        return cls(build.config, program, transition=mode, **options)

    @classmethod
    def from_models(cls, models: Mapping[str, CnnModel], band_rows: Mapping[str, Mapping[str, int]] | None = None,
                    *, cuts: Mapping[str, Sequence[str]] | None = None, tiles: Tiles | None = None,
                    initial: str | None = None, threads: int | None = None, transition: str = "sbrs-tp",
                    transition_schedule: str = "priority", observers: Iterable[RunObserver] = ()) -> Runtime:
        """Scenarios given as models, without an app YAML (tests, benchmarks), by parts.

        ``band_rows[scenario][layer]``: band heights (a scenario or layer left out runs whole; a band on the
        graph input streams the frame); ``cuts[scenario]``: tensors partitioning the scenario;
        ``tiles[scenario]``: ``(layers, band_rows)`` groups run as one call per band. Their layer names may be
        those of ``models`` as given or folded (``sbrs.compile.parts.compile_parts`` folds both). ``threads``:
        the size of ONNX Runtime's global thread pool, if this creates it. The config is
        ``sbrs.compile.fit.models_config``'s (CPU provider, no memory limit, so the arena keeps no transition
        room)."""
        config, program = models_program(models, band_rows, cuts=cuts, tiles=tiles, initial=initial,
                                         threads=threads, transition=transition)
        return cls(config, program, transition=transition, transition_schedule=transition_schedule,
                   observers=observers)

    def _interrupt(self, cancel: bool) -> None:
        """The control node's ``interrupt`` under ``on_switch: cancel`` (called under its lock): cancel the frame
        in flight unless it is already one run again after a cancellation (``switching.cancelling``)."""
        self._run_options.terminate = cancel and self.runner.cancellable

    def _interrupt_step(self, cancel: bool) -> None:
        """The control node's ``interrupt`` under ``on_switch: finish`` (called under its lock): a request for
        another scenario stops the old frame's step whose call runs now (``runner.in_flight``, which ``_execute``
        sets only on a frame a transition may follow) where a transition could start after the step before it
        with the new frame's first step free to run at once (``runner.preempt_from``). ONNX Runtime stops the call
        at its next node; the transition then starts after the step before it and runs the stopped step again,
        whole, among the old frame's rest (``_execute``). On streams the request may stop the youngest frame in
        flight instead, or every frame in flight for a switch's frame on both cores; the stopped frames run again
        after it (``Streams.stop_for``)."""
        runner = self.runner
        step, pending = runner.in_flight, self.node.pending
        first = None if pending is None else runner.preempt_from.get((self.node.scenario, pending.scenario))
        self._run_options.terminate = cancel and step > 0 and first is not None and step >= first
        if self._streams is not None:
            if cancel and pending is not None:
                self._streams.stop_for(pending.scenario)
            else:  # taken or dropped: a stop under way on stream 0, whose options these are, stays
                self._streams.renew_stops()

    def _interrupt_resume(self, cancel: bool) -> None:
        """The control node's ``interrupt`` under ``on_switch: resume`` (called under its lock): as ``_interrupt``,
        but a step of the old frame that the pending request's scenario would run itself (one of their shared
        prefix, kept intact: ``_resume_keep``) is let finish, since its work is the new scenario's
        (``switching.resuming`` stops the frame right after it)."""
        runner = self.runner
        step, pending = runner.in_flight, self.node.pending
        if cancel and runner.cancellable and step and pending is not None:
            keep = runner.resume_keep.get((self.node.scenario, pending.scenario))
            if keep is not None and keep[step]:
                cancel = False
        self._run_options.terminate = cancel and runner.cancellable

    # -- what it is ---------------------------------------------------------------------------------------

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
        return tuple(self.plan.scenarios)

    @property
    def arena_bytes(self) -> int:
        """Bytes of the one arena allocated: tensors between execution units, or every line buffer and band-call
        boundary tensor by parts, in each band stream's arena (tensors inside one ONNX Runtime call are ONNX
        Runtime's own memory)."""
        return int(self._arena.nbytes) if self._streams is None else self._streams.nbytes

    @property
    def stream_count(self) -> int:
        """Frames in flight at once in ``process``, each in an arena of its own (``sbrs.runtime.streams``)."""
        return 1 if self._streams is None else self._streams.count

    @property
    def switch_session_count(self) -> int:
        """Sessions of the runtime's threads held besides the streams' for a switch's frame on both cores (units on
        two streams with frames of ``BOTH_CORES_MIN_FRAME_S`` or more; else 0)."""
        return len(self._switch_sessions)

    @property
    def session_count(self) -> int:
        """Sessions loaded for units or call models (each once, however many scenarios or calls use it)."""
        return sum(1 for key in self._session_keys if key in self._sessions)

    def arena_view_bounds(self) -> list[tuple[str, int, int]]:
        """(tensor, start, end) of every address bound to a step or copied in/out, relative to the arena's base."""
        return list(self._bound_ranges)

    def facts(self) -> dict[str, Any]:
        """Plan figures for observers and status (``sbrs.runtime.reports.facts``)."""
        return reports.facts(self)

    def memory_report(self) -> dict[str, Any]:
        """What this runtime holds, in bytes (``sbrs.runtime.reports.memory_report``; DESIGN.md, "Interfaces")."""
        return reports.memory_report(self)

    def bound_accesses(self, *, new_frame: bool = False) -> dict[str, tuple[Any, ...]]:
        """Each scenario's steps as the bytes really bound (``FrameRunner.bound_accesses``)."""
        return self.runner.bound_accesses(new_frame=new_frame)

    def timed_calls(self, frame: Frame, repeats: int = 3, *, reduce: str = "median") -> list[float]:
        """Seconds of every step (a unit or band call, or a feed, its line-buffer moves included) of the current
        scenario (the one the next frame runs on) over ``repeats`` frames: the median of each, or with
        ``reduce="min"`` the fastest. The frame's results are not copied out, and no frame is counted: this
        measures the steps, it delivers nothing."""
        if reduce not in ("median", "min"):
            raise InputError(f"unknown reduction '{reduce}' (allowed: median, min)", field="reduce")
        runner = self.runner
        arrays = runner.checked_frame(frame)
        runner.not_held_here()
        with runner.lock, self._frame_lock:
            if runner.closed:
                raise SbrsRuntimeError("the runtime is closed")
            scenario = self.scenario
            steps, copy_in = runner.calls[scenario], runner.copy_in[scenario]
            samples = np.zeros((repeats, len(steps)))
            clock = time.perf_counter
            for r in range(repeats):
                for array in arrays.values():
                    copy_in(array)
                for i, step in enumerate(steps):
                    start = clock()
                    step()
                    samples[r, i] = clock() - start
        figures = np.min(samples, axis=0) if reduce == "min" else np.median(samples, axis=0)
        return [float(v) for v in figures]

    # -- the API ------------------------------------------------------------------------------------------

    def switch(self, scenario: str, source: str = "api") -> None:
        """Ask for ``scenario`` from the next frame on (an SSR; returns at once, from any thread).

        An unknown name is an ``InputError`` and changes nothing. The frame in flight finishes on the old
        scenario; under SBRS-TP and ``process`` the next frame may start before it ends (module docstring).
        Under ``on_switch: cancel`` the frame in flight is given up and run again on ``scenario`` instead.
        After ``close`` it raises ``SbrsRuntimeError``, as ``infer`` does.
        """
        if self.runner.closed:  # (``close`` empties the table of calls: every name would read as unknown)
            raise SbrsRuntimeError("the runtime is closed")
        if scenario not in self.runner.calls:
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
        runner = self.runner
        arrays = runner.checked_frame(frame)
        runner.not_held_here()
        with runner.lock, self._frame_lock:
            under_way = self.node.under_way
            try:
                result = self._execute(arrays, 0, None, mode="naive")
            except BaseException:
                runner.abandon_failed(under_way)
                raise
            runner.settle()
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
        runtime stays locked (``infer`` from another thread waits) until the caller asks for the next result; on the
        caller's own thread ``infer``, ``process`` and ``close`` raise ``SbrsRuntimeError`` then (they would wait
        for themselves).
        A malformed frame raises ``InputError`` when its turn comes; the frames before it were all yielded.
        """
        if order not in RESULT_ORDERS:  # checked at the call, not at the first result
            raise InputError(f"unknown result order '{order}' (allowed: {', '.join(RESULT_ORDERS)})", field="order")
        return self.process_with_hooks(frames, order=order)

    def process_with_hooks(self, frames: Iterable[Frame], *, order: str = "completion",
                           inject: tuple[int, str] | None = None, mode: str | None = None) -> Iterator[FrameResult]:
        """``process`` with the hooks of the tests and ``sbrs bench`` (``order`` as ``process``'s, unchecked):
        ``inject = (s, name)`` makes an SSR for ``name`` arrive just as step s of the first frame starts (thesis
        step^o_SSR = s); ``mode`` overrides the transition mode. On band streams frames start when a stream is
        free and a request waits for the next frame to start (``sbrs.runtime.streams``); ``inject`` needs one
        frame at a time and runs on stream 0 alone."""
        runner = self.runner
        if self._streams is not None and inject is None:
            from sbrs.runtime.streams import process_in_streams

            yield from process_in_streams(runner, self._streams, frames, order)
            return
        may_wait = not frames_never_wait(frames)
        lookahead = Lookahead(iter(frames), runner.checked_frame)
        index = 0
        try:
            while True:
                runner.not_held_here()
                if may_wait:  # the caller's next frame may take a while (a camera's, a stream's)
                    runner.settle_before_waiting()
                arrays = lookahead.take()
                if arrays is None:
                    return
                with runner.lock:
                    under_way = self.node.under_way
                    try:
                        outcome = self._execute(arrays, index, lookahead, mode=mode or self.node.mode,
                                                inject=inject)
                        # Two frames at once (a switch): while one result is with the caller, the other frame's
                        # rest or outputs are still in the arena, so both are yielded under the lock.
                        if type(outcome) is not FrameResult:  # two results, yielded under the lock: a caller's
                            runner.held_by = threading.get_ident()  # thread waiting for it would wait for itself
                        if type(outcome) is tuple:  # ``new_first``: the new frame ran, the old one awaits copy-out
                            new_result, old_frame = outcome
                            if order == "completion":
                                try:
                                    yield new_result
                                finally:  # also when the caller stops here: the old frame is counted
                                    old_result = runner.old_frame_result(*old_frame)
                                yield old_result
                            else:
                                yield runner.old_frame_result(*old_frame)
                                yield new_result
                        elif isinstance(outcome, Transition):
                            yield from outcome.deliver(order)
                    except BaseException:  # (a caller that stops at a result leaves no request without one)
                        runner.abandon_failed(under_way)
                        raise
                    finally:
                        runner.held_by = None
                inject = None
                if type(outcome) is FrameResult:
                    index += 1
                    yield outcome
                else:
                    index += 2
        finally:
            if runner.held_by != threading.get_ident():  # (else that generator settles when it goes on)
                with runner.lock:
                    runner.settle()

    # -- the engine -------------------------------------------------------------------------------------

    def _execute(self, arrays: Mapping[str, np.ndarray], index: int, lookahead: Lookahead | None, *, mode: str,
                 inject: tuple[int, str] | None = None) -> FrameResult | Transition | tuple[FrameResult, OldFrame]:
        """Run frame ``index``, or hand it and the next frame to an SBRS-TP transition. The caller holds the lock.

        A request pending at the frame boundary sends this frame to the new scenario (nothing is in flight).
        In SBRS-TP mode the pending request is checked after every old step j (Algorithm 7, line 2: the step the
        SSR arrived in finishes first; beyond the thesis, on execution units a request stops the old step in
        flight instead where that helps, ``_step_or_transition``); when some new step may start before the old
        frame ends and the next frame is at hand, a ``Transition`` takes over the rest of this frame and the next
        one. After the last
        step, j = |φ^o|, the old frame is computed but not yet copied out: when the new frame writes nothing
        that copy-out reads (the shadow arena keeps them apart, ``plan_shadow``), the new frame runs first
        (``new_first``; every switch of a one-step app, such as tiny and pamap2, goes this way): its result
        comes back with what the old frame's result needs (``FrameRunner.old_frame_result``).
        """
        runner = self.runner
        if runner.closed:
            raise SbrsRuntimeError("the runtime is closed")
        if self.on_switch == "cancel":
            return cancelling(runner, arrays, index, inject)
        if self.on_switch == "resume":
            return resuming(runner, arrays, index, inject)
        node = self.node
        previous, request, scenario, begin = runner.start_frame(arrays)
        calls = runner.calls[scenario]
        last = len(calls)
        stoppable = mode == "sbrs-tp" and lookahead is not None and bool(runner.preempt_from)
        for step, call in enumerate(calls, 1):
            if inject is not None and inject[0] == step:
                node.request(inject[1], "bench")
            if stoppable and step > 1:
                transition = self._step_or_transition(call, step, scenario, lookahead, index, begin, request,
                                                      previous)
                if transition is not None:
                    return transition
            else:
                call()
            if step == 1 and request is not None and last > 1:
                node.begin(request)  # after the new scenario's first step (ControlNode docstring)
            if mode == "sbrs-tp" and lookahead is not None:
                pending = node.pending  # one read: another thread may replace or clear it at any time
                if pending is not None and pending.scenario != scenario:
                    if step == last:
                        first = new_first(runner, scenario, pending, lookahead, index + 1)
                        if first is not None:
                            return first, (scenario, index, begin, request, previous, mode)
                    else:
                        transition = start_transition(runner, scenario, step, pending, lookahead)
                        if transition is not None:
                            transition.old_frame(index, begin, request, previous)
                            return transition
        return runner.old_frame_result(scenario, index, begin, request, previous, mode)

    def _step_or_transition(self, call: Callable[[], object], step: int, scenario: str, lookahead: Lookahead,
                            index: int, begin: float, request: SwitchRequest | None,
                            previous: str) -> Transition | None:
        """Old step ``step`` of frame ``index``, which a switch request may stop inside (``_interrupt_step``): then
        the transition starts after the step before it, as if the request had come at that step's end (the
        stopped call wrote only its own outputs, which the transition's old rest writes again whole; every new
        step that could meet those bytes waits for that old step, ``sbrs.compile.transitions``). Beyond the
        thesis, where the SSR's step finishes first (Algorithm 7, line 2): on drone the step in flight was about
        0.9 ms of a switch's Δ (steps of 1.2-2.4 ms). Returns the transition, or None once the step is done
        (run again, whole, where no transition could start after all)."""
        runner = self.runner
        runner.in_flight = step
        try:
            call()
            return None
        except Exception as error:  # onnxruntime raises RuntimeError (IOBinding) or its own Fail for it
            if TERMINATED not in str(error):
                raise
        finally:
            runner.in_flight = 0
        pending = self.node.pending
        if pending is not None and pending.scenario != scenario:
            transition = start_transition(runner, scenario, step - 1, pending, lookahead)
            if transition is not None:
                transition.old_frame(index, begin, request, previous)
                return transition
        self._run_options.terminate = False  # (the request went back to this scenario, or no frame follows)
        call()
        return None

    def close(self) -> None:
        """Release the sessions, bindings and arena; later ``infer`` calls raise ``SbrsRuntimeError``."""
        runner = self.runner
        runner.not_held_here()
        self.node.shutdown()
        with runner.lock:
            runner.closed = True
            if runner.worker is not None:
                runner.worker.shutdown(wait=True)
                runner.worker = None
            if self._streams is None:  # (else they are stream 0's, which a stream's frame uses without this lock)
                runner.bound.release()
            if runner.new_bound is not runner.bound:  # a transition's new frame: the sessions bound to the shadow slots
                runner.new_bound.release()
            self._sessions.clear()
            self._switch_sessions.clear()
        if self._streams is not None:  # after the runner's lock: a stream's frame never waits for it while it runs;
            self._streams.release()  # stream 0's bindings too, under its lock: a frame on it may run now
        self.node.halt()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Runtime(app={self.plan.app!r}, execution={self.execution!r}, scenario={self.scenario!r}, "
                f"sessions={self.session_count}, granularity={self.plan.granularity!r}, "
                f"transition={self.node.mode!r}, arena_bytes={self.arena_bytes})")
