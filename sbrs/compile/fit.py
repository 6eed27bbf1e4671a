"""An app's processing by parts fitted to its memory limit: the search's choice compiled, checked, recorded.

``sbrs build`` on an app whose ``memory_limit_mb`` reuse alone misses chooses band heights with the buffer
reduction search (thesis Algorithm 9 over Algorithm 10, ``sbrs.reduction.search``). :func:`fit_parts` compiles
that choice (:func:`app_parts`, ``sbrs.compile.parts.compile_parts``) and checks Algorithm 9, line 11
(``M <= M^c``) on the arena the runtime will really allocate, trying other Pareto points when the chosen one
does not fit. :func:`scenario_memory_mb` gives the policy each scenario's memory, :func:`models_config` the
configuration of bare models run without an app file (``Runtime.from_models``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sbrs.compile.parts_plan import MODELS_APP, PartsPlan
from sbrs.errors import InputError

if TYPE_CHECKING:
    from sbrs.app.app import App
    from sbrs.app.config import AppConfig
    from sbrs.model.cnn import CnnModel

__all__ = ["MAX_FIT_TRIES", "app_parts", "executor_figures", "fit_parts", "models_config", "scenario_memory_mb",
           "strategy_of"]


def strategy_of(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The partition cuts and tile groups of a reduction or of one of its Pareto points (their JSON form), as
    keyword arguments of ``compile_parts``; empty where the search chose none."""
    return {"cuts": {str(s): tuple(str(t) for t in c) for s, c in entry.get("cuts", {}).items()},
            "tiles": {str(s): tuple((tuple(str(n) for n in g), int(b)) for g, b in t)
                      for s, t in entry.get("tiles", {}).items()}}


def app_parts(app: App, band_rows: Mapping[str, Mapping[str, int]], reduction: Mapping[str, Any] | None = None,
              strategy: Mapping[str, Any] | None = None) -> PartsPlan:
    """The parts plan of ``app`` processing ``band_rows`` (band heights per scenario and layer) with the
    partition cuts and tile groups of ``strategy`` (``strategy_of``), with its tables.

    The calls run the models folded as ``compile_parts`` folds them (conv→BN→activation one layer), so the
    parameter bytes are the folded models' (what the calls hold). With a memory limit in ``reduction``, the
    arena keeps room for SBRS-TP transitions where the limit leaves it (``plan_transition_room``);
    ``reduction["transition_cut"]`` records the cut taken, beside the band heights, cuts and tiles.
    """
    from dataclasses import replace

    from sbrs.compile.parts import compile_parts

    reduction = dict(reduction or {})
    strategy = dict(strategy or {})
    limit = reduction.get("memory_limit_bytes")
    chosen = reduction.get("chosen")
    # the room for transitions is what the limit leaves above the plan of the configuration (its parameters and
    # every tensor, Algorithm 10), so that the plan with the room stays within the limit (sbrs.compile.footprint)
    # Band streams overlap a switch by themselves (the next frame runs on another stream's arena): no room
    streams = int((chosen or {}).get("streams", 1))
    room = (None if limit is None or chosen is None or streams > 1
            else max(0, int(limit) - int(chosen["memory_bytes"])))
    plan = compile_parts(app.models, band_rows, app=app.name,
                         memory_limit=None if limit is None or streams > 1 else int(limit), room_bytes=room,
                         **strategy)
    record = {**reduction, **plan.reduction, "streams": streams,
              "band_rows": {s: dict(b) for s, b in band_rows.items()},
              "cuts": {s: list(c) for s, c in strategy.get("cuts", {}).items()},
              "tiles": {s: [[list(g), b] for g, b in t] for s, t in strategy.get("tiles", {}).items()}}
    return replace(plan, reduction=record)


def executor_figures(app: App, reduction: Mapping[str, Any]) -> dict[str, Any]:
    """The arena and calls per frame of what the runtime would execute for the search's choice in
    ``reduction`` (``sbrs.reduction.search.reduce_app``): ``executor_arena_bytes`` (line buffers and band
    boundaries, as ``compile_parts`` places them without a memory limit) and ``executor_calls`` per scenario,
    for ``reduction["figures"]`` (the search plans Algorithm 10's buffers, which differ)."""
    from sbrs.compile.parts import compile_parts, executable_bands
    from sbrs.model.fold import fold_model

    models = {s: fold_model(m) for s, m in app.models.items()}
    bands = reduction.get("band_rows", {})
    runnable = {s: executable_bands(m, bands.get(s, {})) for s, m in models.items()}
    parts = compile_parts(models, runnable, **strategy_of(reduction))
    return {"executor_arena_bytes": parts.arena_bytes,
            "executor_calls": {s: len(p.calls) for s, p in parts.scenarios.items()}}


#: Pareto points of one band-stream count ``fit_parts`` compiles at most before giving up (each compiles every
#: scenario's calls).
MAX_FIT_TRIES = 8


def fit_parts(app: App, reduction: Mapping[str, Any]) -> PartsPlan:
    """The parts plan ``sbrs build`` compiles for ``reduction`` (``reduce_app``'s result, not an early exit):
    Algorithm 9, line 11 (``M <= M^c``) checked on what the executor will really allocate.

    The search plans line buffers with Algorithm 10; the executor's arena (band-call boundaries, the sliding
    line buffers) can differ. The chosen band heights are taken when parameters plus the executor's arena
    fit the limit; otherwise the other Pareto points that fit on paper, fastest first (the smallest
    per-scenario fps estimate), up to ``MAX_FIT_TRIES`` of each band-stream count (every stream's arena
    counted). None fits: ``InputError`` naming the smallest total.
    """
    limit = int(reduction["memory_limit_bytes"])
    keep = {key: reduction[key] for key in ("memory_limit_bytes", "cost_model", "seed", "figures", "chosen")
            if key in reduction}
    candidates = [reduction["chosen"], *sorted(
        (p for p in reduction.get("pareto", ()) if p["memory_bytes"] <= limit and p != reduction["chosen"]),
        key=lambda p: -min(p["fps"].values(), default=0.0))]
    smallest: tuple[int, int] | None = None
    tries: dict[int, int] = {}  # per band-stream count: a second stream's arena may miss where one stream fits
    for point in candidates:
        streams = int(point.get("streams", 1))
        if tries.get(streams, 0) >= MAX_FIT_TRIES:
            continue
        tries[streams] = tries.get(streams, 0) + 1
        chosen = point is reduction["chosen"]
        bands = reduction["band_rows"] if chosen else point["band_rows"]
        plan = app_parts(app, bands, {**keep, "chosen": point}, strategy_of(reduction if chosen else point))
        arena = plan.streams * plan.arena_bytes  # an arena per band stream
        total = int(plan.model_bytes["params_bytes"]) + arena
        if total <= limit:
            return plan
        if smallest is None or total < smallest[0]:
            smallest = (total, arena)
    assert smallest is not None
    raise InputError(f"memory limit {limit / 1e6:g} MB: the band heights found fit on paper, but the executor "
                     f"needs at least {smallest[0] / 1e6:.6f} MB (parameters + an arena of "
                     f"{smallest[1] / 1e6:.6f} MB); raise memory_limit_mb", field="memory_limit_mb")


def scenario_memory_mb(plan: PartsPlan, params: Mapping[str, int]) -> dict[str, float]:
    """Per scenario: its parameter bytes plus the peak of its line buffers in the arena (in each band stream's),
    in MB (the policy's ``memory_mb``; ``params``: each scenario's own parameter bytes)."""
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
        peaks[scenario] = plan.streams * max(live)
    return {s: (params[s] + peaks[s]) / 1e6 for s in plan.scenarios}


def models_config(models: Mapping[str, CnnModel], *, initial: str | None = None, threads: int | None = None,
                  transition: str = "sbrs-tp") -> AppConfig:
    """The smallest ``AppConfig`` of ``models`` run without an app YAML (``Runtime.from_models``): one
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
