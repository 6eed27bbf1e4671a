"""Processing by parts inside the one runtime: an app with a buffer reduction runs band calls behind ``Runtime``.

``sbrs build`` on an app whose ``memory_limit_mb`` reuse alone misses chooses band heights (thesis Algorithm 9
over Algorithm 10, ``sbrs.runtime.parts_build``). :class:`ReducedPlan` is what then runs: every scenario
compiled into band calls and line buffers in ONE arena (:func:`sbrs.runtime.parts.compile_parts`, Algorithm 10,
line 9), and the transition tables of every ordered pair of scenarios computed from the arena bytes each call
touches (Algorithm 6 with byte hazards, as ``sbrs.runtime.transition`` does for execution units).
:class:`ReducedRuntime` is a :class:`~sbrs.runtime.executor.Runtime` whose steps are those calls: the frame
loop, ``infer``/``process``/``switch``, the control node, SBRS-TP transitions (Algorithm 7, the ``priority`` and
``threads`` schedules), observers, metrics and the socket are the runtime's own, unchanged.

Steps and their bytes
    A step is one call: the line-buffer compactions it needs (``Call.moves``, numpy copies inside the arena)
    then one ``run_with_iobinding``. It reads the rows its inputs are bound to and the rows it moves from, and
    writes the rows its outputs are bound to and the rows it moves to. Copying the frame in belongs to step 1
    (it writes the whole input buffer), copying the outputs out to the last step (it reads them).

SBRS-TP on one arena
    The scenarios' line buffers share the arena (each scenario's buffers are planned on its own timeline), so
    a transition's new frame may start as soon as its calls touch no byte the old frame's remaining calls
    still touch (``wait``); there are no shadow slots (they would double the arena the limit bounds). Where a
    new call's bytes overlap what the old frame still needs, it waits: in the worst case for the whole old
    frame, i.e. a switch at the frame boundary, as ``naive`` does.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sbrs.errors import InputError
from sbrs.runtime.device import ArenaMemory, create_session
from sbrs.runtime.executor import Runtime, runtime_options
from sbrs.runtime.parts import ROWS, Buffer, Call, PartsPlan, ScenarioParts
from sbrs.runtime.transition import PairTable, StepAccess, TransitionPlan

if TYPE_CHECKING:
    import onnx

    from sbrs.app.app import App
    from sbrs.app.config import AppConfig
    from sbrs.control.events import RunObserver

__all__ = ["ReducedPlan", "ReducedRuntime", "call_file", "parts_accesses", "parts_transitions", "reduced_plan"]

#: The granularity a reduced runtime reports (its steps are band calls, not execution units).
GRANULARITY = "parts"
#: ``[H, N, C, W]`` rows layout ↔ NCHW (``sbrs.runtime.parts``, "Storage layout").
TO_ROWS = (2, 0, 1, 3)
TO_NCHW = (1, 2, 0, 3)


def call_file(key: str) -> str:
    """The build's file name of the ONNX model of calls with digest ``key`` (one file per distinct model)."""
    return f"c{key}.onnx"


# -- the plan ---------------------------------------------------------------------------------------------


def _tuples(value: Any) -> Any:
    """JSON lists back to the tuples of the frozen dataclasses."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _scenario_to_dict(parts: ScenarioParts) -> dict[str, Any]:
    return {f.name: getattr(parts, f.name) if f.name not in ("calls", "buffers") else
            [dataclasses.asdict(item) for item in getattr(parts, f.name)] for f in dataclasses.fields(parts)}


def _scenario_from_dict(data: Mapping[str, Any]) -> ScenarioParts:
    values = {key: _tuples(value) for key, value in data.items() if key not in ("calls", "buffers", "band_rows")}
    return ScenarioParts(**values, band_rows={str(k): int(v) for k, v in data["band_rows"].items()},
                         calls=tuple(Call(**{k: _tuples(v) for k, v in c.items()}) for c in data["calls"]),
                         buffers=tuple(Buffer(**{k: _tuples(v) for k, v in b.items()}) for b in data["buffers"]))


@dataclass(frozen=True)
class ReducedPlan:
    """What an app with a buffer reduction runs, JSON-able (kept in the build manifest).

    ``parts``: band calls and line buffers of every scenario in one arena; ``transitions``: the tables of
    every ordered pair (``parts_transitions``); ``reduction``: where the band heights came from (the memory
    limit, ``band_rows`` and the search's planned figures); ``model_bytes``: the models' parameter and naive
    buffer bytes (thesis Eq. 2.6-2.7), kept because the models are not.
    """

    app: str
    parts: PartsPlan
    transitions: TransitionPlan
    reduction: Mapping[str, Any]
    model_bytes: Mapping[str, int]

    @property
    def memory_limit_bytes(self) -> int | None:
        limit = self.reduction.get("memory_limit_bytes")
        return None if limit is None else int(limit)

    @property
    def call_keys(self) -> tuple[str, ...]:
        """Every distinct call model (one session each), in order of first use."""
        return tuple(dict.fromkeys(c.key for p in self.parts.scenarios.values() for c in p.calls))

    def to_dict(self) -> dict[str, Any]:
        parts = self.parts
        return {"app": self.app,
                "parts": {"arena_bytes": parts.arena_bytes, "lower_bound_bytes": parts.lower_bound_bytes,
                          "alignment": parts.alignment, "strategy": parts.strategy,
                          "scenarios": {s: _scenario_to_dict(p) for s, p in parts.scenarios.items()}},
                "transitions": self.transitions.to_dict(), "reduction": dict(self.reduction),
                "model_bytes": dict(self.model_bytes)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReducedPlan:
        parts = data["parts"]
        plan = PartsPlan({str(s): _scenario_from_dict(p) for s, p in parts["scenarios"].items()},
                         int(parts["arena_bytes"]), int(parts["lower_bound_bytes"]), int(parts["alignment"]),
                         str(parts["strategy"]))
        return cls(str(data["app"]), plan, TransitionPlan.from_dict(data["transitions"]), dict(data["reduction"]),
                   {str(k): int(v) for k, v in data["model_bytes"].items()})


def parts_accesses(parts: ScenarioParts) -> tuple[StepAccess, ...]:
    """The arena bytes each call of ``parts`` touches, from its buffers' offsets (module docstring).

    Range names are ``scenario/tensor``; ``StepAccess.unit`` is the call's model key (calls with one key
    share one session).
    """
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
        if index == 0:
            writes.append(span(parts.input))
        if index == last:
            reads.extend(span(t) for t in parts.outputs)
        result.append(StepAccess(call.key, tuple(reads), tuple(writes)))
    return tuple(result)


def _hazard_waits(old: Sequence[StepAccess], new: Sequence[StepAccess]) -> tuple[int, ...]:
    """``sbrs.runtime.transition.hazard_waits`` vectorised: wait_i = the last old step (1-based) touching a
    byte new step i touches, one of them writing (0: none). Band plans have hundreds of calls per frame."""
    rows = [(j, r[1], r[2], write) for j, step in enumerate(old, 1)
            for write, ranges in ((False, step.reads), (True, step.writes)) for r in ranges]
    if not rows:
        return (0,) * len(new)
    table = np.array(rows, dtype=np.int64)
    steps, starts, ends, writes = table[:, 0], table[:, 1], table[:, 2], table[:, 3].astype(bool)
    result = []
    for target in new:
        wait = 0
        for write, ranges in ((False, target.reads), (True, target.writes)):
            for _, start, end in ranges:
                mask = (starts < end) & (start < ends)
                if not write:
                    mask &= writes
                if mask.any():
                    wait = max(wait, int(steps[mask].max()))
        result.append(wait)
    return tuple(result)


def _paced(waits: Sequence[int]) -> tuple[int, ...]:
    """Algorithm 6's X from hazard waits: x_1 = wait_1, x_i = max(x_{i-1} + 1, wait_i) (line 10's ``+1``)."""
    result: list[int] = []
    for wait in waits:
        result.append(max(wait, result[-1] + 1) if result else wait)
    return tuple(result)


def parts_transitions(parts: PartsPlan, app: str) -> TransitionPlan:
    """Algorithm 6 for every ordered pair o ≠ n of a parts plan, with arena-byte hazards (module docstring).

    ``thesis_x`` is Algorithm 6 verbatim with "the same layer" read as "the same call model" (session).
    """
    accesses = {s: parts_accesses(p) for s, p in parts.scenarios.items()}
    pairs: dict[str, PairTable] = {}
    for old, a in accesses.items():
        last_use: dict[str, int] = {}
        for j, step in enumerate(a, 1):
            last_use[step.unit] = j
        for new, b in accesses.items():
            if old == new:
                continue
            waits = _hazard_waits(a, b)
            pairs[f"{old}->{new}"] = PairTable(old, new, len(a), _paced(waits), waits,
                                               _paced([last_use.get(step.unit, 0) for step in b]))
    return TransitionPlan(app, GRANULARITY, "shared", parts.arena_bytes, pairs)


def reduced_plan(app: App, band_rows: Mapping[str, Mapping[str, int]], reduction: Mapping[str, Any]) -> ReducedPlan:
    """The plan of ``app`` processing ``band_rows`` (band heights per scenario and layer), with its tables."""
    from sbrs.model import naive_buffer_bytes, params_bytes
    from sbrs.runtime.parts import compile_parts

    parts = compile_parts(app.models, band_rows)
    model_bytes = {"params_bytes": params_bytes(app.models.values()),
                   "naive_bytes": sum(naive_buffer_bytes(m) for m in app.models.values())}
    record = {**dict(reduction), "band_rows": {s: dict(b) for s, b in band_rows.items()}}
    return ReducedPlan(app.name, parts, parts_transitions(parts, app.name), record, model_bytes)


def call_models(app: App, plan: ReducedPlan) -> dict[str, onnx.ModelProto]:
    """key → the ONNX model of every distinct call of ``plan`` (what ``sbrs build`` writes as files)."""
    from sbrs.runtime.parts import call_model

    models: dict[str, onnx.ModelProto] = {}
    for scenario, parts in plan.parts.scenarios.items():
        for call in parts.calls:
            if call.key not in models:
                models[call.key] = call_model(app.models[scenario], parts, call)
    return models


# -- the runtime ------------------------------------------------------------------------------------------


class ReducedRuntime(Runtime):
    """A ``Runtime`` whose steps are the band calls of a :class:`ReducedPlan` (module docstring).

    ``sessions`` gives each call key's model: a file path (a build) or an ONNX model (compiled in memory).
    ``transition`` as ``Runtime``; ``transition_arena`` must be ``shared`` (the default here: shadow slots
    would double the arena the memory limit bounds). Runs on the CPU provider (line-buffer moves are numpy
    copies inside the arena).
    """

    execution = "parts"

    def __init__(self, config: AppConfig, plan: ReducedPlan, sessions: Mapping[str, str | onnx.ModelProto], *,
                 transition: str | None = None, transition_arena: str | None = None,
                 transition_schedule: str = "priority", observers: Iterable[RunObserver] = ()) -> None:
        mode, arena = runtime_options(config, transition, transition_arena or "shared", transition_schedule)
        if arena != "shared":
            raise InputError(f"transition arena '{arena}' is not available when the app runs by parts (its "
                             "arena is bounded by memory_limit_mb): use 'shared'", field="transition_arena")
        self._start(config, mode, transition_schedule, observers)
        if self.device != "cpu":
            raise InputError("processing by parts runs on the CPU provider only (line-buffer moves are numpy "
                             "copies)", field="runtime.providers")
        self.reduced = plan
        self.transitions = plan.transitions
        self._model_bytes = dict(plan.model_bytes)
        limit = plan.memory_limit_bytes
        if self.memory_limit_bytes is None and limit is not None:  # a build made with `--memory-limit`
            self.memory_limit_bytes = limit
        self._arena = ArenaMemory(plan.parts.arena_bytes, self.device, plan.parts.alignment)
        for key in plan.call_keys:
            self._sessions[key] = create_session(sessions[key], self.providers)
        for parts in plan.parts.scenarios.values():
            self._bind_scenario(parts)
        self._new_calls, self._new_copy_in, self._new_copy_out = self._calls, self._copy_in, self._copy_out
        self.node.loaded(self.facts())

    # -- binding ------------------------------------------------------------------------------------------

    def _view(self, buffer: Buffer, slot: int = 0, rows: int | None = None) -> np.ndarray:
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

    def _bind_scenario(self, parts: ScenarioParts) -> None:
        """Bind every call of one scenario to its slots once; its steps, frame copy-in and copy-outs."""
        scenario = parts.scenario
        buffers = {b.tensor: b for b in parts.buffers}
        steps: list[Callable[[], Any]] = []
        for step, call in enumerate(parts.calls, 1):
            reads, writes = self._bindings.setdefault((scenario, step), ([], []))
            session = self._sessions[call.key]
            binding = session.io_binding()
            for t, lo, hi, slot in call.inputs:
                buffer = buffers[t]
                view = self._view(buffer, slot, hi - lo)
                name = f"{t}::rows" if buffer.layout == ROWS else t
                binding.bind_input(name, "cpu", 0, view.dtype, list(view.shape), view.ctypes.data)
                reads.append(self._bound(scenario, t, view))
            for t, o0, o1, slot in call.outputs:
                buffer = buffers[t]
                view = self._view(buffer, slot, o1 - o0)
                name = f"{t}::rows" if buffer.layout == ROWS else t
                binding.bind_output(name, "cpu", 0, view.dtype, list(view.shape), view.ctypes.data)
                writes.append(self._bound(scenario, t, view))
            moves = []
            for t, src, dst, rows in call.moves:
                source, target = self._view(buffers[t], src, rows), self._view(buffers[t], dst, rows)
                reads.append(self._bound(scenario, t, source))
                writes.append(self._bound(scenario, t, target))
                moves.append((target, source))
            steps.append(_step(session.run_with_iobinding, binding, tuple(moves)))
        self._calls[scenario] = tuple(steps)
        source = buffers[parts.input]
        frame_view = self._view(source)
        self._bindings[(scenario, 1)][1].append(self._bound(scenario, parts.input, frame_view))
        if source.layout == ROWS:
            self._copy_in[scenario] = lambda array, view=frame_view: np.copyto(view, array.transpose(TO_ROWS))
        else:
            self._copy_in[scenario] = lambda array, view=frame_view: np.copyto(view, array)
        outputs: dict[str, Callable[[], np.ndarray]] = {}
        for t in parts.outputs:
            view = self._view(buffers[t])
            self._bindings[(scenario, len(parts.calls))][0].append(self._bound(scenario, t, view))
            if buffers[t].layout == ROWS:
                outputs[t] = lambda view=view: np.ascontiguousarray(view.transpose(TO_NCHW))
            else:
                outputs[t] = view.copy
        self._copy_out[scenario] = outputs

    # -- what it reports ----------------------------------------------------------------------------------

    @property
    def scenarios(self) -> tuple[str, ...]:
        return tuple(self.reduced.parts.scenarios)

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
        parts = self.reduced.parts
        return {"app": self.reduced.app, "arena_bytes": parts.arena_bytes, "units": len(self.reduced.call_keys),
                "lower_bound_bytes": parts.lower_bound_bytes, "providers": list(self.providers),
                **self._model_bytes, "granularity": GRANULARITY, "transition": self.node.mode,
                "transition_arena": self.transitions.arena, "scenarios": list(self.scenarios),
                "steps": {s: len(p.calls) for s, p in parts.scenarios.items()}, **self._memory_facts()}

    def _planned_memory(self) -> dict[str, int | None]:
        figures = self.reduced.reduction.get("figures", {})
        return {"planned_arena_bytes": self.reduced.parts.arena_bytes,
                "planned_lower_bound_bytes": self.reduced.parts.lower_bound_bytes,
                "planned_reduction_arena_bytes": figures.get("arena_bytes")}

    def _arena_holds(self) -> str:
        return ("every line buffer and band-call boundary tensor of every scenario (tensors inside one band "
                "call are ONNX Runtime's)")

    def bound_accesses(self, *, new_frame: bool = False) -> dict[str, tuple[Any, ...]]:
        """Each scenario's calls as the bytes really bound (``StepAccess``, offsets from the arena's base)."""
        return {scenario: tuple(StepAccess(call.key, tuple(self._bindings[(scenario, step)][0]),
                                           tuple(self._bindings[(scenario, step)][1]))
                                for step, call in enumerate(parts.calls, 1))
                for scenario, parts in self.reduced.parts.scenarios.items()}

    def __repr__(self) -> str:
        return (f"ReducedRuntime(app={self.reduced.app!r}, scenario={self.scenario!r}, "
                f"sessions={len(self._sessions)}, transition={self.node.mode!r}, arena_bytes={self.arena_bytes})")


def _step(run: Callable[[Any], Any], binding: Any,
          moves: tuple[tuple[np.ndarray, np.ndarray], ...]) -> Callable[[], Any]:
    """One call as a step of the engine: the line-buffer moves, then ``run_with_iobinding``."""
    if not moves:
        return functools.partial(run, binding)
    copyto = np.copyto

    def step() -> None:
        for target, source in moves:
            copyto(target, source)
        run(binding)

    return step


def runtime_from_app(app: App, plan: ReducedPlan, **options: Any) -> ReducedRuntime:
    """A reduced runtime compiled in memory from ``app``'s models (no build)."""
    return ReducedRuntime(app.config, plan, call_models(app, plan), **options)


def runtime_from_build(config: AppConfig, plan: ReducedPlan, folder: Path, **options: Any) -> ReducedRuntime:
    """A reduced runtime from a verified build: ONNX Runtime reads the call files and the weights file."""
    return ReducedRuntime(config, plan, {key: str(folder / call_file(key)) for key in plan.call_keys}, **options)
