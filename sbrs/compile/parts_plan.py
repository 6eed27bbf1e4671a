"""The plan of an app run by parts: every scenario compiled into band calls and line buffers in ONE arena.

``sbrs build`` on an app whose ``memory_limit_mb`` reuse alone misses chooses band heights (thesis Algorithm 9
over Algorithm 10, ``sbrs.reduction.search``). :class:`ReducedPlan` is what then runs
(``sbrs.runtime.reduced.ReducedRuntime``): the scenarios' band calls and line buffers with their
arena offsets (:func:`sbrs.compile.parts.compile_parts`, Algorithm 10, line 9), and the transition
tables of every ordered pair of scenarios computed from the arena bytes each call touches (Algorithm 6 with
byte hazards, as ``sbrs.compile.transitions`` does for execution units). The plan is plain data that a
build stores in its manifest; compiling it (``reduced_plan``, ``fit_reduction``, ``call_models``) imports the
compiler and the models lazily, so a run from a build loads only the dataclasses.

Steps and their bytes
    A step is one call: the line-buffer compactions it needs (``Call.moves``, numpy copies inside the arena)
    then one ``run_with_iobinding``. It reads the rows its inputs are bound to and the rows it moves from, and
    writes the rows its outputs are bound to and the rows it moves to. Copying the frame in belongs to step 1
    (it writes the whole input buffer), copying the outputs out to the last step (it reads them). With a
    streamed input, *feed* steps write the rows of the caller's frame they copy (``parts_accesses``).

SBRS-TP on one arena
    The scenarios' line buffers share the arena, so a transition's new call may start as soon as it touches no
    byte the old frame's remaining calls still touch (``wait``); there are no shadow slots (they would double
    the arena the limit bounds). Planned on one timeline per scenario, the new frame's first call (its frame
    copy-in) overlaps the old frame's last ones and would wait for the whole old frame; where the limit leaves
    room, ``plan_transition_room`` keeps the buffers of each old frame's tail apart from the other scenarios'
    buffers so the new frame can start before the old one ends. Without room a switch happens at the frame
    boundary, as ``naive`` does (``ReducedRuntime.memory_report`` says which).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sbrs.compile.transitions import PairTable, StepAccess, TransitionPlan
from sbrs.errors import InputError

if TYPE_CHECKING:
    import onnx

    from sbrs.app.app import App
    from sbrs.app.config import AppConfig
    from sbrs.compile.parts import PartsPlan, ScenarioParts
    from sbrs.model.cnn import CnnModel

__all__ = ["BandCall", "LineBuffer", "ReducedPlan", "ScenarioCalls", "call_file", "call_models",
           "fit_reduction", "models_config", "parts_accesses", "parts_transitions", "reduced_plan",
           "scenario_memory_mb"]

#: The granularity a reduced runtime reports (its steps are band calls, not execution units).
GRANULARITY = "parts"
#: The app name (and scenario ``model_kind``) of a runtime made from models, without an app YAML.
MODELS_APP = "models"
#: Layout of a buffer a band call touches: ``[H, N, C, W]``, one row contiguous (``sbrs.compile.parts``).
ROWS = "rows"
#: ``[H, N, C, W]`` rows layout ↔ NCHW (``sbrs.compile.parts``, "Storage layout").
TO_ROWS = (2, 0, 1, 3)
TO_NCHW = (1, 2, 0, 3)


def call_file(key: str) -> str:
    """The build's file name of the ONNX model of calls with digest ``key`` (one file per distinct model)."""
    return f"c{key}.onnx"


# -- the plan ---------------------------------------------------------------------------------------------
#
# What runs is kept apart from how it was compiled (``sbrs.compile.parts``): a run from a build imports
# neither onnx nor the reduction search, and the build's format does not follow the compiler's internals.


@dataclass(frozen=True)
class LineBuffer:
    """The arena slot of one tensor of one scenario: ``capacity`` rows of ``row_bytes`` at ``offset``
    (``parts.Buffer``; ``layout`` ``rows`` or ``nchw``)."""

    tensor: str
    shape: tuple[int, ...]
    dtype: str
    layout: str
    capacity: int
    row_bytes: int
    offset: int

    @property
    def nbytes(self) -> int:
        return self.capacity * self.row_bytes


@dataclass(frozen=True)
class BandCall:
    """One ``run_with_iobinding`` of the session ``key`` (``parts.Call``): ``inputs``/``outputs`` are
    ``(tensor, lo, hi, slot)`` (rows ``[lo, hi)`` bound at buffer slot ``slot``), ``moves`` the line-buffer
    compactions before it, ``(tensor, src_slot, dst_slot, rows)``.

    ``feed``: no session (``key`` names none); rows ``[lo, hi)`` of the caller's frame are copied, in the rows
    layout, into the input's line buffer at the slot of its one output (module docstring, "Streamed input").
    """

    key: str
    inputs: tuple[tuple[str, int, int, int], ...]
    outputs: tuple[tuple[str, int, int, int], ...]
    moves: tuple[tuple[str, int, int, int], ...]
    band: bool
    feed: bool = False


@dataclass(frozen=True)
class ScenarioCalls:
    """One scenario by parts: its calls in order, its buffers, its frame input and outputs, its band heights."""

    scenario: str
    input: str
    outputs: tuple[str, ...]
    calls: tuple[BandCall, ...]
    buffers: tuple[LineBuffer, ...]
    band_rows: Mapping[str, int]

    @classmethod
    def of(cls, parts: ScenarioParts) -> ScenarioCalls:
        return cls(parts.scenario, parts.input, tuple(parts.outputs),
                   tuple(BandCall(c.key, tuple(c.inputs), tuple(c.outputs), tuple(c.moves), c.banded, c.feed)
                         for c in parts.calls),
                   tuple(LineBuffer(b.tensor, tuple(b.shape), b.dtype, b.layout, b.capacity, b.row_bytes, b.offset)
                         for b in parts.buffers), dict(parts.band_rows))

    @property
    def streamed(self) -> bool:
        """Whether the frame is fed by rows (a band on the graph input) instead of copied in whole."""
        return any(call.feed for call in self.calls)

    @property
    def sessions(self) -> int:
        """Distinct call models (one session each) the scenario runs; feeds run none."""
        return len({call.key for call in self.calls if not call.feed})

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "input": self.input, "outputs": list(self.outputs),
                "band_rows": dict(self.band_rows),
                "calls": [[c.key, [list(i) for i in c.inputs], [list(o) for o in c.outputs],
                           [list(m) for m in c.moves], c.band, c.feed] for c in self.calls],
                "buffers": [[b.tensor, list(b.shape), b.dtype, b.layout, b.capacity, b.row_bytes, b.offset]
                            for b in self.buffers]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScenarioCalls:
        def rows(items: Sequence[Sequence[Any]]) -> tuple[tuple[str, int, int, int], ...]:
            return tuple((str(t), int(a), int(b), int(c)) for t, a, b, c in items)

        return cls(str(data["scenario"]), str(data["input"]), tuple(map(str, data["outputs"])),
                   tuple(BandCall(str(key), rows(ins), rows(outs), rows(moves), bool(band), bool(feed))
                         for key, ins, outs, moves, band, feed in data["calls"]),
                   tuple(LineBuffer(str(t), tuple(map(int, shape)), str(dtype), str(layout), int(cap), int(row),
                                    int(offset)) for t, shape, dtype, layout, cap, row, offset in data["buffers"]),
                   {str(k): int(v) for k, v in data["band_rows"].items()})


@dataclass(frozen=True)
class ReducedPlan:
    """What an app with a buffer reduction runs, JSON-able (kept in the build manifest).

    ``scenarios``: band calls and line buffers of every scenario, in one arena of ``arena_bytes``
    (``lower_bound_bytes``: the most bytes live at once); ``transitions``: the tables of every ordered pair
    (``parts_transitions``); ``reduction``: where the band heights came from (the memory limit, the search's
    planned figures, the chosen point); ``model_bytes``: the models' parameter and naive buffer bytes (thesis
    Eq. 2.6-2.7), kept because the models are not. ``source``: the compiler's plan, in memory only.
    """

    app: str
    scenarios: Mapping[str, ScenarioCalls]
    arena_bytes: int
    lower_bound_bytes: int
    alignment: int
    transitions: TransitionPlan
    reduction: Mapping[str, Any]
    model_bytes: Mapping[str, int]
    source: PartsPlan | None = field(default=None, compare=False, repr=False)

    @property
    def memory_limit_bytes(self) -> int | None:
        limit = self.reduction.get("memory_limit_bytes")
        return None if limit is None else int(limit)

    @property
    def call_keys(self) -> tuple[str, ...]:
        """Every distinct call model (one session each), in order of first use; feeds have none."""
        return tuple(dict.fromkeys(c.key for p in self.scenarios.values() for c in p.calls if not c.feed))

    def to_dict(self) -> dict[str, Any]:
        return {"app": self.app, "arena_bytes": self.arena_bytes, "lower_bound_bytes": self.lower_bound_bytes,
                "alignment": self.alignment, "scenarios": {s: p.to_dict() for s, p in self.scenarios.items()},
                "transitions": self.transitions.to_dict(), "reduction": dict(self.reduction),
                "model_bytes": dict(self.model_bytes)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReducedPlan:
        return cls(str(data["app"]), {str(s): ScenarioCalls.from_dict(p) for s, p in data["scenarios"].items()},
                   int(data["arena_bytes"]), int(data["lower_bound_bytes"]), int(data["alignment"]),
                   TransitionPlan.from_dict(data["transitions"]), dict(data["reduction"]),
                   {str(k): int(v) for k, v in data["model_bytes"].items()})


def parts_accesses(parts: ScenarioCalls) -> tuple[StepAccess, ...]:
    """The arena bytes each call of ``parts`` touches, from its buffers' offsets (module docstring).

    Range names are ``scenario/tensor``; ``StepAccess.unit`` is the call's model key (calls with one key
    share one session). A feed writes the input rows it copies (its frame rows come from the caller's array,
    outside the arena); with a streamed input step 1 does not write the whole input buffer.
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
        if index == 0 and not parts.streamed:
            writes.append(span(parts.input))
        if index == last:
            reads.extend(span(t) for t in parts.outputs)
        result.append(StepAccess(call.key, tuple(reads), tuple(writes)))
    return tuple(result)


def _hazard_waits(old: Sequence[StepAccess], new: Sequence[StepAccess]) -> tuple[int, ...]:
    """``sbrs.compile.transitions.hazard_waits`` vectorised: wait_i = the last old step (1-based) touching a
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


def parts_transitions(scenarios: Mapping[str, ScenarioCalls], arena_bytes: int, app: str) -> TransitionPlan:
    """Algorithm 6 for every ordered pair o ≠ n of a parts plan, with arena-byte hazards (module docstring).

    ``thesis_x`` is Algorithm 6 verbatim with "the same layer" read as "the same call model" (session); a
    feed runs no model, so it shares no layer (its bytes still count in the hazard waits).
    """
    accesses = {s: parts_accesses(p) for s, p in scenarios.items()}
    pairs: dict[str, PairTable] = {}
    for old, a in accesses.items():
        last_use: dict[str, int] = {}
        for j, (step, call) in enumerate(zip(a, scenarios[old].calls, strict=True), 1):
            if not call.feed:
                last_use[step.unit] = j
        for new, b in accesses.items():
            if old == new:
                continue
            waits = _hazard_waits(a, b)
            layers = [0 if call.feed else last_use.get(step.unit, 0)
                      for step, call in zip(b, scenarios[new].calls, strict=True)]
            pairs[f"{old}->{new}"] = PairTable(old, new, len(a), _paced(waits), waits, _paced(layers))
    return TransitionPlan(app, GRANULARITY, "shared", arena_bytes, pairs)


#: Where a transition's new frame may start, as fractions of the old frame's calls, earliest first
#: (``plan_transition_room``).
TRANSITION_CUTS: tuple[float, ...] = (0.0, 0.5, 0.9, 0.95, 1.0)


def plan_transition_room(parts: PartsPlan, budget: int | None) -> tuple[PartsPlan, float | None]:
    """The parts arena re-planned so that SBRS-TP transitions can overlap, within ``budget`` bytes.

    ``compile_parts`` plans each scenario on its own timeline, so a new frame's buffers (its input slot
    first) land on bytes the old frame still needs and a transition waits for the whole old frame. Here,
    for a cut ``c`` (a fraction of each old frame's calls), every buffer an old scenario o touches from call
    ``c·|φ^o|`` on is kept apart from every buffer of every other scenario n: the buffers of o after the cut
    get lives on a timeline ``o->n:old``, n's buffers keep their lives on a timeline ``n:new``, and the two
    are a concurrent set (Algorithm 8, lines 9-11, as ``sbrs.compile.transitions.plan_shadow`` does for the
    shadow slots, but on the scenarios' own buffers: no copy, no second frame input). A switch noticed after
    the cut can then start the whole new frame at once. The earliest cut of ``TRANSITION_CUTS`` whose arena
    fits ``budget`` is taken; the hazard tables are computed afterwards from the real offsets, so this only
    makes room, it proves nothing. Returns the plan (``parts`` itself when no cut fits, or with one scenario)
    and the cut taken (None).
    """
    from sbrs.memory import Block, Live, Problem, check_plan, lower_bound, plan_arena

    scenarios = parts.scenarios
    if len(scenarios) < 2 or budget is None:
        return parts, None
    base = parts.problem
    for cut in TRANSITION_CUTS:
        extra: dict[str, list[Live]] = {}
        concurrent: set[frozenset[str]] = set(base.concurrent)
        for old, old_parts in scenarios.items():
            start = min(int(cut * len(old_parts.calls)), len(old_parts.calls) - 1)
            for new in scenarios:
                if new == old:
                    continue
                concurrent.add(frozenset({f"{old}->{new}:old", f"{new}:new"}))
                for buffer in old_parts.buffers:
                    if buffer.last_call >= start:
                        extra.setdefault(f"{old}/{buffer.tensor}", []).append(
                            Live(f"{old}->{new}:old", max(buffer.first_call, start), buffer.last_call))
        for scenario, scenario_parts in scenarios.items():
            for buffer in scenario_parts.buffers:
                extra.setdefault(f"{scenario}/{buffer.tensor}", []).append(
                    Live(f"{scenario}:new", buffer.first_call, buffer.last_call))
        problem = Problem(tuple(Block(b.id, b.size, (*b.lives, *extra.get(b.id, ()))) for b in base.blocks),
                          frozenset(concurrent), base.alignment)
        arena = plan_arena(problem)
        if arena.arena_bytes > budget:
            continue
        violations = check_plan(problem, arena)
        if violations:
            raise InputError(f"internal error: the transition arena plan is unsafe: {violations[0].detail}")
        offsets = arena.as_dict()
        placed = {s: dataclasses.replace(p, buffers=tuple(dataclasses.replace(b, offset=offsets[f"{s}/{b.tensor}"])
                                                          for b in p.buffers)) for s, p in scenarios.items()}
        return dataclasses.replace(parts, scenarios=placed, arena_bytes=arena.arena_bytes,
                                   lower_bound_bytes=lower_bound(problem), strategy=f"{arena.strategy}+transitions",
                                   problem=problem, arena=arena), cut
    return parts, None


def strategy_of(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The partition cuts and tile groups of a reduction or of one of its Pareto points (their JSON form), as
    keyword arguments of ``compile_parts``; empty where the search chose none."""
    return {"cuts": {str(s): tuple(str(t) for t in c) for s, c in entry.get("cuts", {}).items()},
            "tiles": {str(s): tuple((tuple(str(n) for n in g), int(b)) for g, b in t)
                      for s, t in entry.get("tiles", {}).items()}}


def reduced_plan(app: App, band_rows: Mapping[str, Mapping[str, int]], reduction: Mapping[str, Any],
                 strategy: Mapping[str, Any] | None = None) -> ReducedPlan:
    """The plan of ``app`` processing ``band_rows`` (band heights per scenario and layer) with the partition
    cuts and tile groups of ``strategy`` (``strategy_of``), with its tables.

    The calls run the models folded as ``compile_parts`` folds them (conv→BN→activation one layer), so the
    parameter bytes are the folded models' (what the calls hold). With a memory limit in ``reduction``, the
    arena keeps room for SBRS-TP transitions where the limit leaves it (``plan_transition_room``);
    ``reduction["transition_cut"]`` records the cut taken.
    """
    from sbrs.compile.parts import compile_parts
    from sbrs.model import naive_buffer_bytes, params_bytes
    from sbrs.model.fold import fold_model

    strategy = dict(strategy or {})
    parts = compile_parts(app.models, band_rows, **strategy)
    folded = [fold_model(model) for model in app.models.values()]
    limit = reduction.get("memory_limit_bytes")
    budget = None if limit is None else int(limit) - params_bytes(folded)
    parts, cut = plan_transition_room(parts, budget)
    reduction = {**dict(reduction), "transition_cut": cut}
    model_bytes = {"params_bytes": params_bytes(folded),
                   "naive_bytes": sum(naive_buffer_bytes(m) for m in folded)}
    record = {**dict(reduction), "band_rows": {s: dict(b) for s, b in band_rows.items()},
              "cuts": {s: list(c) for s, c in strategy.get("cuts", {}).items()},
              "tiles": {s: [[list(g), b] for g, b in t] for s, t in strategy.get("tiles", {}).items()}}
    scenarios = {s: ScenarioCalls.of(p) for s, p in parts.scenarios.items()}
    return ReducedPlan(app.name, scenarios, parts.arena_bytes, parts.lower_bound_bytes, parts.alignment,
                       parts_transitions(scenarios, parts.arena_bytes, app.name), record, model_bytes, parts)


#: Pareto points ``fit_reduction`` compiles at most before giving up (each compiles every scenario's calls).
MAX_FIT_TRIES = 8


def fit_reduction(app: App, reduction: Mapping[str, Any]) -> ReducedPlan:
    """The reduced plan ``sbrs build`` compiles for ``reduction`` (``reduce_app``'s result, not an early exit):
    Algorithm 9, line 11 (``M <= M^c``) checked on what the executor will really allocate.

    The search plans line buffers with Algorithm 10; the executor's arena (band-call boundaries, the sliding
    line buffers) can differ. The chosen band heights are taken when parameters plus the executor's arena
    fit the limit; otherwise the other Pareto points that fit on paper, fastest first (the smallest
    per-scenario fps estimate), up to ``MAX_FIT_TRIES``. None fits: ``InputError`` naming the smallest total.
    """
    limit = int(reduction["memory_limit_bytes"])
    keep = {key: reduction[key] for key in ("memory_limit_bytes", "cost_model", "seed", "figures", "chosen")
            if key in reduction}
    candidates = [reduction["chosen"], *sorted(
        (p for p in reduction.get("pareto", ()) if p["memory_bytes"] <= limit and p != reduction["chosen"]),
        key=lambda p: -min(p["fps"].values(), default=0.0))]
    smallest: tuple[int, int] | None = None
    for point in candidates[:MAX_FIT_TRIES]:
        chosen = point is reduction["chosen"]
        bands = reduction["band_rows"] if chosen else point["band_rows"]
        plan = reduced_plan(app, bands, {**keep, "chosen": point}, strategy_of(reduction if chosen else point))
        total = int(plan.model_bytes["params_bytes"]) + plan.arena_bytes
        if total <= limit:
            return plan
        if smallest is None or total < smallest[0]:
            smallest = (total, plan.arena_bytes)
    assert smallest is not None
    raise InputError(f"memory limit {limit / 1e6:g} MB: the band heights found fit on paper, but the executor "
                     f"needs at least {smallest[0] / 1e6:.6f} MB (parameters + an arena of "
                     f"{smallest[1] / 1e6:.6f} MB); raise memory_limit_mb", field="memory_limit_mb")


def scenario_memory_mb(plan: ReducedPlan, params: Mapping[str, int]) -> dict[str, float]:
    """Per scenario: its parameter bytes plus the peak of its line buffers in the arena, in MB (the policy's
    ``memory_mb``; ``params``: each scenario's own parameter bytes)."""
    peaks = {}
    for scenario, parts in plan.scenarios.items():
        live = [0] * (len(parts.calls) + 1)
        first: dict[str, int] = {} if parts.streamed else {parts.input: 0}
        last: dict[str, int] = {t: len(parts.calls) - 1 for t in parts.outputs}
        for index, call in enumerate(parts.calls):
            for t, *_ in (*call.inputs, *call.outputs):
                first.setdefault(t, index)
                last[t] = max(last.get(t, index), index)
        for buffer in parts.buffers:
            for step in range(first.get(buffer.tensor, 0), last.get(buffer.tensor, 0) + 1):
                live[step] += buffer.nbytes
        peaks[scenario] = max(live)
    return {s: (params[s] + peaks[s]) / 1e6 for s in plan.scenarios}


def call_models(models: Mapping[str, CnnModel], plan: ReducedPlan) -> dict[str, onnx.ModelProto]:
    """key → the ONNX model of every distinct call of ``plan`` (what ``sbrs build`` writes as files), from the
    scenarios' ``models`` the plan was compiled from (folded or not: they are folded here as the compiler
    folds them; folding a folded model is cheap). Feeds have no model."""
    from sbrs.compile.parts import call_model
    from sbrs.model.fold import fold_model

    if plan.source is None:
        raise ValueError("the call models of a plan read back from a build are in the build's files")
    result: dict[str, onnx.ModelProto] = {}
    for scenario, parts in plan.source.scenarios.items():
        folded = fold_model(models[scenario])  # the model the calls were compiled from
        for call in parts.calls:
            if not call.feed and call.key not in result:
                result[call.key] = call_model(folded, parts, call)
    return result


def models_config(models: Mapping[str, CnnModel], *, initial: str | None = None, threads: int | None = None,
                  transition: str = "sbrs-tp") -> AppConfig:
    """The smallest ``AppConfig`` of ``models`` run without an app YAML (``ReducedRuntime.from_models``): one
    scenario per model, in order, no requirements of its own, no memory limit, the CPU provider, ``threads``
    for ONNX Runtime's global thread pool. The app's one input is the models' common input (name of the
    ``initial`` scenario's model; every model must have its shape and dtype, as an app's scenarios must)."""
    from sbrs.app.config import (
        AppConfig,
        DeclaredCharacteristics,
        InputSpec,
        RequirementSet,
        RuntimeOptions,
        ScenarioConfig,
    )

    if not models:
        raise InputError("no models to run", field="models")
    initial = next(iter(models)) if initial is None else initial
    if initial not in models:
        raise InputError(f"unknown scenario '{initial}' (scenarios: {', '.join(models)})", field="initial")
    first = models[initial]
    spec = first.tensors[first.graph_inputs[0]]
    for name, model in models.items():
        other = model.tensors[model.graph_inputs[0]]
        if len(model.graph_inputs) != 1 or (tuple(other.shape), other.dtype) != (tuple(spec.shape), spec.dtype):
            raise InputError(f"scenario '{name}': its input is {list(other.shape)} {other.dtype} "
                             f"({len(model.graph_inputs)} input(s)), scenario '{initial}' has one of "
                             f"{list(spec.shape)} {spec.dtype}; the scenarios of one runtime share one input",
                             field="models")
    requirements = RequirementSet(1.0, 0.0, 0.0, 0.0)
    return AppConfig(
        name=MODELS_APP, path=f"<{MODELS_APP}>",
        input=InputSpec(first.graph_inputs[0], tuple(spec.shape), str(spec.dtype)), adaptive=(), initial=initial,
        scenarios=tuple(ScenarioConfig(name, f"<{MODELS_APP}>", MODELS_APP, "", requirements,
                                       DeclaredCharacteristics()) for name in models),
        runtime=RuntimeOptions(providers=("CPUExecutionProvider",), threads=threads, granularity="auto",
                               transition=transition),
        memory_limit_mb=None)
