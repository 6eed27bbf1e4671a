"""Processing by parts inside the one runtime: an app with a buffer reduction runs band calls behind ``Runtime``.

:class:`ReducedRuntime` executes a :class:`~sbrs.compile.parts_plan.ReducedPlan` (every scenario's band
calls and line buffers in one arena, and their transition tables). It is a
:class:`~sbrs.runtime.engine.Runtime` whose steps are those calls: the frame loop,
``infer``/``process``/``switch``, the control node, SBRS-TP transitions (Algorithm 7, the ``priority`` and
``threads`` schedules), observers, metrics and the socket are the runtime's own, unchanged. It is the only
runtime by parts: ``ReducedRuntime.from_models`` runs bare models the same way (tests, the cost table of
``sbrs.compile.costs``, benchmarks), so every path by parts is the one the build runs.

Streamed input
    With a band on the graph input the frame is not copied in whole: the input has a line buffer like any
    other tensor, and *feed* steps (``BandCall.feed``, no session) copy each band's rows of the caller's frame,
    transposed to the rows layout, into it just before the calls that read them. The frame's copy-in then only
    takes the caller's array (no arena byte), and a feed writes the rows it copies (and moves the rows kept,
    as any line buffer), so the transition tables order feeds against the other frame's steps like any call.
    The feeds read the caller's array until the frame's last feed: a caller must not write into a frame's
    array before its result is out (``process`` may fetch the next frame while one is in flight).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from sbrs.compile.parts_plan import (
    GRANULARITY,
    MODELS_APP,
    ROWS,
    TO_NCHW,
    TO_ROWS,
    LineBuffer,
    ReducedPlan,
    ScenarioCalls,
    call_file,
    call_models,
    models_config,
    parts_transitions,
)
from sbrs.compile.transitions import StepAccess
from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.ort_env import create_session
from sbrs.runtime.device import ArenaMemory, iobinding_runner
from sbrs.runtime.engine import Frame, Runtime, runtime_options

if TYPE_CHECKING:
    import onnx

    from sbrs.app.app import App
    from sbrs.app.config import AppConfig
    from sbrs.artifact.read import LoadedBuild
    from sbrs.compile.parts import Tiles
    from sbrs.model.cnn import CnnModel
    from sbrs.runtime.events import RunObserver

__all__ = ["ReducedRuntime", "runtime_from_app", "runtime_from_build"]

class ReducedRuntime(Runtime):
    """A ``Runtime`` whose steps are the band calls (and feeds) of a :class:`ReducedPlan` (module docstring):
    the one runtime that processes by parts, for an app's build, an app in memory and models alike.

    ``sessions`` gives each call key's model: a file path (a build; ``optimized``: ONNX Runtime's optimised
    form for this machine) or an ONNX model (compiled in memory). ``from_models`` makes one from models
    without an app YAML. ``transition`` as ``Runtime``; ``transition_arena`` must be ``shared`` (the default
    here: shadow slots would double the arena the memory limit bounds). Runs on the CPU provider (line-buffer
    moves and feeds are numpy copies inside the arena).
    """

    execution = "parts"

    def __init__(self, config: AppConfig, plan: ReducedPlan, sessions: Mapping[str, str | onnx.ModelProto], *,
                 transition: str | None = None, transition_arena: str | None = None,
                 transition_schedule: str = "priority", on_switch: str | None = None,
                 observers: Iterable[RunObserver] = (), optimized: bool = False) -> None:
        mode, arena = runtime_options(config, transition, transition_arena or "shared", transition_schedule)
        if arena != "shared":
            raise InputError(f"transition arena '{arena}' is not available when the app runs by parts (its "
                             "arena is bounded by memory_limit_mb): use 'shared'", field="transition_arena")
        self._start(config, mode, transition_schedule, observers, on_switch)
        if self.device != "cpu":
            raise InputError("processing by parts runs on the CPU provider only (line-buffer moves are numpy "
                             "copies)", field="runtime.providers")
        self.reduced = plan
        self.transitions = plan.transitions
        self._model_bytes = dict(plan.model_bytes)
        limit = plan.memory_limit_bytes
        if self.memory_limit_bytes is None and limit is not None:  # a build made with `--memory-limit`
            self.memory_limit_bytes = limit
        self._arena = ArenaMemory(plan.arena_bytes, self.device, plan.alignment)
        for key in plan.call_keys:
            # one intra-op thread: a band call is too small for a pool's fork/join per node (sbrs.ort_env)
            self._sessions[key] = create_session(sessions[key], self.providers, threads=1,
                                                 scope=self.thread_pool.scope, optimized=optimized)
        for parts in plan.scenarios.values():
            self._bind_scenario(parts)
        self._new_calls, self._new_copy_in, self._new_copy_out = self._calls, self._copy_in, self._copy_out
        self._transition_starts = self._transition_start_table()
        self.node.loaded(self.facts())

    @classmethod
    def from_models(cls, models: Mapping[str, CnnModel], band_rows: Mapping[str, Mapping[str, int]] | None = None,
                    *, cuts: Mapping[str, Sequence[str]] | None = None, tiles: Tiles | None = None,
                    initial: str | None = None, threads: int | None = None, transition: str = "sbrs-tp",
                    transition_schedule: str = "priority", observers: Iterable[RunObserver] = ()) -> ReducedRuntime:
        """Scenarios given as models, without an app YAML (tests, the cost measurement, benchmarks), by parts.

        ``band_rows[scenario][layer]``: band heights (a scenario or layer left out runs whole; a band on the
        graph input streams the frame); ``cuts[scenario]``: tensors partitioning the scenario;
        ``tiles[scenario]``: ``(layers, band_rows)`` groups run as one call per band. Their layer names may be
        those of ``models`` as given or folded: the models are folded (conv→BN→activation one layer, as the
        search and ``compile_parts`` see them) and the names with them (``fold_bands``, ``fold_cuts``,
        ``fold_tiles``). ``threads``: the size of ONNX Runtime's global thread pool, if this creates it. The
        config is ``models_config``'s (CPU provider, no memory limit, so the arena keeps no transition room).
        """
        from sbrs.compile.parts import compile_parts
        from sbrs.model import naive_buffer_bytes, params_bytes
        from sbrs.model.fold import fold_bands, fold_cuts, fold_model, fold_tiles

        config = models_config(models, initial=initial, threads=threads, transition=transition)
        folded = {s: fold_model(m) for s, m in models.items()}
        unknown = sorted({*(band_rows or {}), *(cuts or {}), *(tiles or {})} - set(models))
        if unknown:
            raise InputError(f"unknown scenario(s) {', '.join(unknown)} (scenarios: {', '.join(models)})",
                             field="band_rows")
        parts = compile_parts(folded, {s: fold_bands(models[s], folded[s], b) for s, b in (band_rows or {}).items()},
                              cuts={s: fold_cuts(models[s], folded[s], c) for s, c in (cuts or {}).items()},
                              tiles={s: fold_tiles(models[s], folded[s], t) for s, t in (tiles or {}).items()})
        scenarios = {s: ScenarioCalls.of(p) for s, p in parts.scenarios.items()}
        plan = ReducedPlan(MODELS_APP, scenarios, parts.arena_bytes, parts.lower_bound_bytes, parts.alignment,
                           parts_transitions(scenarios, parts.arena_bytes, MODELS_APP), {},
                           {"params_bytes": params_bytes(folded.values()),
                            "naive_bytes": sum(naive_buffer_bytes(m) for m in folded.values())}, parts)
        return cls(config, plan, call_models(folded, plan), transition=transition,
                   transition_schedule=transition_schedule, observers=observers)

    # -- binding ------------------------------------------------------------------------------------------

    def _view(self, buffer: LineBuffer, slot: int = 0, rows: int | None = None) -> np.ndarray:
        """Rows ``[slot, slot + rows)`` of ``buffer`` (rows layout), or the whole buffer (NCHW), in the arena."""
        if buffer.layout != ROWS:
            return self._arena.view(buffer.offset, buffer.shape, buffer.dtype)
        n, c, _, w = buffer.shape
        rows = buffer.capacity - slot if rows is None else rows
        return self._arena.view(buffer.offset + slot * buffer.row_bytes, (rows, n, c, w), buffer.dtype)

    def _bound(self, scenario: str, tensor: str, view: np.ndarray) -> tuple[str, int, int]:
        start = int(view.ctypes.data) - self._arena.base
        span = (f"{scenario}/{tensor}", start, start + view.nbytes)
        self._bound_ranges.append(span)
        return span

    def _bind_scenario(self, parts: ScenarioCalls) -> None:
        """Bind every call of one scenario to its slots once; its steps, frame copy-in and copy-outs."""
        scenario = parts.scenario
        buffers = {b.tensor: b for b in parts.buffers}
        steps: list[Callable[[], Any]] = []
        frame: list[np.ndarray] = [np.empty(0)]  # a streamed scenario's frame: the caller's array, for its feeds
        for step, call in enumerate(parts.calls, 1):
            reads, writes = self._bindings.setdefault((scenario, step), ([], []))
            moves = []
            for t, src, dst, rows in call.moves:
                source, target = self._view(buffers[t], src, rows), self._view(buffers[t], dst, rows)
                reads.append(self._bound(scenario, t, source))
                writes.append(self._bound(scenario, t, target))
                moves.append((target, source))
            if call.feed:
                if call.inputs or [o[0] for o in call.outputs] != [parts.input] or buffers[parts.input].layout != ROWS:
                    raise InputError(f"scenario {scenario}: step {step} is a feed that does not write rows of the "
                                     f"input '{parts.input}' alone, in the rows layout (a damaged plan)",
                                     field="reduced")
                t, lo, hi, slot = call.outputs[0]
                view = self._view(buffers[t], slot, hi - lo)
                writes.append(self._bound(scenario, t, view))
                steps.append(_feed_step(frame, view, lo, hi, tuple(moves)))
                continue
            session = self._sessions[call.key]
            binding = session.io_binding()
            for ranges, bind, spans in ((call.inputs, binding.bind_input, reads),
                                        (call.outputs, binding.bind_output, writes)):
                for t, lo, hi, slot in ranges:
                    buffer = buffers[t]
                    view = self._view(buffer, slot, hi - lo)
                    name = f"{t}::rows" if buffer.layout == ROWS else t
                    bind(name, "cpu", 0, view.dtype, list(view.shape), view.ctypes.data)
                    spans.append(self._bound(scenario, t, view))
            steps.append(_step(iobinding_runner(session, binding, self._run_options), tuple(moves)))
        self._calls[scenario] = tuple(steps)
        source = buffers[parts.input]
        if parts.streamed:  # the feeds copy the frame's rows; the copy-in only hands them the caller's array
            self._copy_in[scenario] = functools.partial(frame.__setitem__, 0)
        else:
            frame_view = self._view(source)
            self._bindings[(scenario, 1)][1].append(self._bound(scenario, parts.input, frame_view))
            if source.layout == ROWS:
                self._copy_in[scenario] = lambda array, view=frame_view: np.copyto(view, array.transpose(TO_ROWS))
            else:
                self._copy_in[scenario] = lambda array, view=frame_view: np.copyto(view, array)
        outputs: dict[str, Callable[[], np.ndarray]] = {}
        for t in parts.outputs:
            view = self._view(buffers[t])
            span = self._bound(scenario, t, view)
            self._bindings[(scenario, len(parts.calls))][0].append(span)
            self._copy_out_reads.setdefault(scenario, []).append(span)
            if buffers[t].layout == ROWS:
                outputs[t] = lambda view=view: np.ascontiguousarray(view.transpose(TO_NCHW))
            else:
                outputs[t] = view.copy
        self._copy_out[scenario] = outputs

    def timed_calls(self, frame: Frame, repeats: int = 3, *, reduce: str = "median") -> list[float]:
        """Seconds of every step (a call or a feed, its line-buffer moves included) of the current scenario (the
        one the next frame runs on) over ``repeats`` frames: the median of each, or with ``reduce="min"`` the
        fastest (what ``sbrs.compile.costs`` splits over the layers). The frame's results are not copied
        out, and no frame is counted: this measures the steps, it delivers nothing."""
        if reduce not in ("median", "min"):
            raise InputError(f"unknown reduction '{reduce}' (allowed: median, min)", field="reduce")
        arrays = self._checked_frame(frame)
        with self._lock:
            if self._closed:
                raise SbrsRuntimeError("the runtime is closed")
            scenario = self.scenario
            steps, copy_in = self._calls[scenario], self._copy_in[scenario]
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

    # -- what it reports ----------------------------------------------------------------------------------

    @property
    def scenarios(self) -> tuple[str, ...]:
        return tuple(self.reduced.scenarios)

    @property
    def arena_bytes(self) -> int:
        """Bytes of the one arena holding every line buffer of every scenario (allocated)."""
        return int(self._arena.nbytes)

    @property
    def session_count(self) -> int:
        """Sessions loaded: one per distinct call model, shared by calls and scenarios."""
        return len(self._sessions)

    def facts(self) -> dict[str, Any]:
        """Plan figures for observers and status (``Runtime.facts``; steps are band calls here)."""
        plan = self.reduced
        return {"app": plan.app, "arena_bytes": plan.arena_bytes, "units": len(plan.call_keys),
                "lower_bound_bytes": plan.lower_bound_bytes, "providers": list(self.providers),
                **self._model_bytes, "granularity": GRANULARITY, "transition": self.node.mode,
                "transition_arena": self.transitions.arena, "scenarios": list(self.scenarios),
                "steps": {s: len(p.calls) for s, p in plan.scenarios.items()}, **self._memory_facts()}

    def memory_report(self) -> dict[str, Any]:
        """``Runtime.memory_report`` plus how SBRS-TP can use this arena: ``transition_cut`` (the fraction of
        an old frame after which the arena keeps the new frame's buffers apart, None: no room under the
        limit, ``plan_transition_room``) and ``transition_overlap_pairs`` (ordered pairs whose new frame may
        start before the old frame's last call; with none, every switch happens at the frame boundary, as
        ``naive``). Each switch's ``SwitchRecord`` says what it did (``overlapped_steps``)."""
        tables = self.transitions.pairs.values()
        return {**super().memory_report(), "transition_cut": self.reduced.reduction.get("transition_cut"),
                "transition_overlap_pairs": sum(1 for t in tables if t.wait and t.wait[0] < t.old_steps),
                "transition_pairs": len(tables)}

    def _planned_memory(self) -> dict[str, int | None]:
        figures = self.reduced.reduction.get("figures", {})
        return {"planned_arena_bytes": self.reduced.arena_bytes,
                "planned_lower_bound_bytes": self.reduced.lower_bound_bytes,
                "planned_reduction_arena_bytes": figures.get("arena_bytes")}

    def _arena_holds(self) -> str:
        return ("every line buffer and band-call boundary tensor of every scenario (tensors inside one band "
                "call are ONNX Runtime's)")

    def bound_accesses(self, *, new_frame: bool = False) -> dict[str, tuple[Any, ...]]:
        """Each scenario's calls as the bytes really bound (``StepAccess``, offsets from the arena's base)."""
        return {scenario: tuple(StepAccess(call.key, tuple(self._bindings[(scenario, step)][0]),
                                           tuple(self._bindings[(scenario, step)][1]))
                                for step, call in enumerate(parts.calls, 1))
                for scenario, parts in self.reduced.scenarios.items()}

    def __repr__(self) -> str:
        return (f"ReducedRuntime(app={self.reduced.app!r}, scenario={self.scenario!r}, "
                f"sessions={len(self._sessions)}, transition={self.node.mode!r}, arena_bytes={self.arena_bytes})")


def _feed_step(frame: list[np.ndarray], view: np.ndarray, lo: int, hi: int,
               moves: tuple[tuple[np.ndarray, np.ndarray], ...]) -> Callable[[], None]:
    """One feed as a step of the engine: the input line buffer's moves, then rows ``[lo, hi)`` of the frame
    the scenario's copy-in took (``frame[0]``, the caller's NCHW array), transposed to the rows layout, into
    ``view`` (module docstring, "Streamed input")."""
    copyto = np.copyto

    def feed() -> None:
        for target, source in moves:
            copyto(target, source)
        copyto(view, frame[0][:, :, lo:hi, :].transpose(TO_ROWS))

    return feed


def _step(run: Callable[[], Any], moves: tuple[tuple[np.ndarray, np.ndarray], ...]) -> Callable[[], Any]:
    """One call as a step of the engine: the line-buffer moves, then ``run`` (``iobinding_runner``)."""
    if not moves:
        return run
    copyto = np.copyto

    def step() -> None:
        for target, source in moves:
            copyto(target, source)
        run()

    return step


def runtime_from_app(app: App, plan: ReducedPlan, **options: Any) -> ReducedRuntime:
    """A reduced runtime compiled in memory from ``app``'s models (no build)."""
    return ReducedRuntime(app.config, plan, call_models(app.models, plan), **options)


def runtime_from_build(build: LoadedBuild, **options: Any) -> ReducedRuntime:
    """A reduced runtime from a verified build: ONNX Runtime reads the call files (their optimised form where
    it was made on this machine) and the weights file."""
    plan = build.reduced
    assert plan is not None
    return ReducedRuntime(build.config, plan, {key: build.model_path(call_file(key)) for key in plan.call_keys},
                          optimized=build.optimized_here, **options)
