"""``sbrs build --memory-limit``: the buffers reduction of an app (thesis Algorithm 9 over Algorithm 10), saved.

:func:`reduce_app` runs Algorithm 9 for an app's scenarios: lines 1-5 exit early when the unreduced plan
(parameters plus the Algorithm 8 / arena buffers of ``sbrs.memory.app_plan``, once per stream the units run on)
fits ``M^c``; otherwise the
seeded NSGA-II search of :func:`sbrs.reduction.reduce_buffers` chooses band heights per layer under a cost
model the caller gives (``CostSource``; ``sbrs build --cost``, resolved by ``sbrs.compile.costs.cost_source``):

- ``analytic``: :class:`~sbrs.reduction.cost.AnalyticCostModel` (no measuring);
- ``measured`` (the default of ``sbrs build``): the table of :mod:`sbrs.compile.costs`, measured on this
  machine on the first build and cached;
- ``auto``: the cached measured table when there is one, else the analytic model.

``sbrs build`` measures by default (``measured``): a search under the analytic model picks band heights whose
speed on the device it does not know (MobileNetV2 at 14.9 MB: see docs/MEASUREMENTS.md).

Nothing here runs ONNX Runtime or compiles a call: the search works on the models and the cost model alone.

Per-scenario minimum throughputs ``T^c_n`` come from ``--min-fps NAME=FPS`` or ``--min-fps-ratio R`` (every
scenario at least ``R`` times its own unreduced fps under the same cost model). The declared
``characteristics.fps`` of app.yaml are figures of the platform the designer measured on, not requirements,
so they are not used.

The result (chosen band heights, phases Φ of every layer, the Pareto front, the figures of the chosen
configuration; ``sbrs build`` adds the arena of the calls :mod:`sbrs.compile.parts` compiles) is saved in the
plan file
(``AppPlan.reduction``, under the plan's checksum and app fingerprint); :func:`load_reduction` and
:func:`load_reduction_strategy` read it back for ``sbrs.compile.fit.app_parts``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbrs.errors import InputError
from sbrs.log import Progress as ProgressLines
from sbrs.memory import buffers_reuse
from sbrs.model.fold import fold_model
from sbrs.reduction import AnalyticCostModel, CostModel, GaParams, ReductionResult, plan_reduction, reduce_buffers
from sbrs.reduction.cost import model_fps, streams_gain
from sbrs.reduction.ga import refuse_below_weights
from sbrs.reduction.phases import full_bands

if TYPE_CHECKING:
    from sbrs.app.app import App
    from sbrs.memory import AppPlan
    from sbrs.model.cnn import CnnModel

__all__ = ["CostSource", "load_reduction", "load_reduction_strategy", "reduce_app", "saved_reduction"]

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
#: Where the search's cost model comes from, asked only when the search runs (not on Algorithm 9's early exit):
#: the folded models and the band candidates → the model and its name for the report (the measured table of
#: ``sbrs.compile.costs.cost_source``, which times ONNX Runtime calls, or the analytic model).
CostSource = Callable[[Mapping[str, "CnnModel"], tuple[int, ...]], tuple[CostModel, str]]


def reduce_app(app: App, plan: AppPlan, memory_limit: int, *, min_fps: Mapping[str, float] | None = None,
               min_fps_ratio: float | None = None, cost: CostSource | None = None, params: GaParams | None = None,
               progress: Progress | None = None, stream_input: bool = True) -> dict[str, Any]:
    """Algorithm 9 for ``app`` under ``memory_limit`` bytes; the ``"reduction"`` object of ``sbrs build --json``
    (without the executor's figures, which the compile stage adds: ``sbrs.compile.fit.executor_figures``).

    ``cost``: the search's cost model (default: the analytic one); ``stream_input``: the frame may be fed by rows
    into a line buffer (the input layer is a gene, as ``l_1`` of thesis Figure 4.1; the frame stays the caller's
    array, as it is for plain ONNX Runtime), the search ``benchmarks/reduction.py`` runs, so that ``sbrs build``
    reaches the same smallest configuration; ``progress(done, total)`` follows the
    generations (default: ``reduction: N% (d/t generations)`` lines on this module's logger, ``sbrs.log``).
    Raises ``InputError`` for unknown scenarios in ``min_fps`` and when no configuration reaches the memory
    limit (the message names the smallest figure reached). Failing fps constraints are listed in
    ``violations`` (the caller decides the exit status).
    """
    models = {s: fold_model(m) for s, m in app.models.items()}  # conv→BN→activation as one layer
    params = params or GaParams()
    min_fps = {str(k): float(v) for k, v in (min_fps or {}).items()}
    unknown = sorted(set(min_fps) - set(models))
    if unknown:
        raise InputError(f"--min-fps names unknown scenario(s) {', '.join(unknown)} (scenarios: "
                         f"{', '.join(models)})", field="min_fps")
    # Algorithm 9, lines 1-5, on the app's own (MoC) plan, as its execution units would run it: on two streams where
    # the app asks for them (``runtime.streams: 2``), each with an arena of its own (``auto`` measures two only where
    # two arenas fit the limit, ``sbrs.artifact.write``)
    unit_streams = app.config.runtime.max_streams(by_parts=False)
    unreduced_total = plan.memory.params_bytes + unit_streams * plan.memory.arena_bytes
    early = unreduced_total <= memory_limit
    if not early:
        refuse_below_weights(models, memory_limit)  # before the cost model measures anything
    cost_model, cost_name = (AnalyticCostModel(), "analytic") if early or cost is None else cost(
        models, params.candidates)
    if min_fps_ratio is not None:
        for scenario, model in models.items():
            min_fps.setdefault(scenario, min_fps_ratio * model_fps(model, full_bands(model), cost_model))
    if progress is None:
        progress = ProgressLines(logger, "reduction", unit="generations", after_s=0.0, always_end=True)
    result = reduce_buffers(models, memory_limit=None if early else memory_limit, min_fps=min_fps, cost=cost_model,
                            params=params, progress=None if early else progress, stream_input=stream_input,
                            streams=band_streams(app))
    figures = _figures(models, result, cost_model)
    if early:
        figures.update(arena_bytes=plan.memory.arena_bytes, reuse_bytes=plan.memory.reuse_bytes,
                       lower_bound_bytes=plan.memory.lower_bound_bytes,
                       memory_bytes=unreduced_total)
    return {
        "early_exit": early,
        "feasible": result.feasible,
        "violations": list(result.violations),
        "memory_limit_bytes": memory_limit,
        "min_fps": dict(result.min_fps),
        "cost_model": cost_name,
        "seed": result.seed,
        "evaluations": result.evaluations,
        "generations": result.generations,
        "phases": result.phases,
        "band_rows": {s: {n: b for n, b in bands.items() if b < _height(models[s], n)}
                      for s, bands in result.band_rows.items()},
        "cuts": {s: list(c) for s, c in result.cuts.items()},
        "tiles": {s: [[list(g), b] for g, b in t] for s, t in result.tiles.items()},
        "pareto": [p.to_dict() for p in result.pareto],
        "chosen": result.chosen.to_dict(),
        "streams": result.chosen.streams,
        "unreduced": result.unreduced.to_dict(),
        "figures": figures,
    }


def band_streams(app: App) -> int:
    """The band streams the search may choose for ``app`` (``reduce_buffers``' ``streams``;
    ``RuntimeOptions.max_streams``)."""
    return app.config.runtime.max_streams(by_parts=True)


def _height(model: Any, layer: str) -> int:
    from sbrs.reduction.rows import layer_height

    return layer_height(model.layer(layer))


def _figures(models: Mapping[str, Any], result: ReductionResult, cost: CostModel) -> dict[str, Any]:
    """Buffer figures of the chosen configuration (Algorithm 10), placed by ``sbrs.memory.place`` (planned and
    verified)."""
    reduced = plan_reduction(models, result.band_rows, cost=cost, cuts=result.cuts, tiles=result.tiles)
    streams = result.chosen.streams  # each stream has buffers of its own (``with_streams``)
    gain = streams_gain(streams)
    return {
        "params_bytes": reduced.params_bytes,
        "arena_bytes": streams * reduced.arena.arena_bytes,
        "reuse_bytes": streams * buffers_reuse(reduced.problem, aligned=True).total,
        "lower_bound_bytes": streams * reduced.arena.lower_bound_bytes,
        "memory_bytes": reduced.params_bytes + streams * reduced.arena.arena_bytes,
        "fps_estimate": {s: fps * gain for s, fps in reduced.fps.items()},
        "streams": streams,
    }


def saved_reduction(app: App) -> Mapping[str, Any] | None:
    """The buffer reduction ``sbrs build`` saved in ``app``'s plan file for its ``memory_limit_mb``, when the plan
    is current and made for this very limit; else None. Nothing is searched here: the search runs only in
    ``sbrs build``."""
    from sbrs.memory import default_plan_path, load_plan

    if app.config.memory_limit_mb is None:
        return None
    try:
        saved = load_plan(default_plan_path(app), app).reduction
    except InputError:
        return None
    if saved is not None and int(saved["memory_limit_bytes"]) == int(app.config.memory_limit_mb * 1e6):
        return saved
    return None


def load_reduction(path: str | Path, app: App) -> dict[str, dict[str, int]]:
    """The band heights chosen by ``sbrs build --memory-limit`` for ``app``, from its saved plan at ``path``
    (``sbrs.memory.load_plan`` refuses a stale or modified plan)."""
    from sbrs.memory import load_plan

    reduction = load_plan(path, app).reduction
    if reduction is None:
        raise InputError("the plan has no buffer reduction (run `sbrs build APP.yaml --memory-limit MB`)",
                         file=str(path))
    return {str(s): {str(n): int(b) for n, b in layers.items()} for s, layers in reduction["band_rows"].items()}


def load_reduction_strategy(path: str | Path, app: App) -> dict[str, Any]:
    """The partition cuts and tile groups chosen with the band heights of :func:`load_reduction`, as
    ``{"cuts": ..., "tiles": ...}`` (the ``strategy`` of ``sbrs.compile.fit.app_parts``, keyword
    arguments of ``compile_parts`` and ``Runtime.from_models``); empty for an older plan."""
    from sbrs.memory import load_plan

    reduction = load_plan(path, app).reduction or {}
    return {"cuts": {str(s): tuple(str(t) for t in c) for s, c in reduction.get("cuts", {}).items()},
            "tiles": {str(s): tuple((tuple(str(n) for n in g), int(b)) for g, b in t)
                      for s, t in reduction.get("tiles", {}).items()}}


def parse_min_fps(items: list[str] | None) -> dict[str, float]:
    """``["NAME=FPS", ...]`` of ``--min-fps`` as a mapping (a malformed item is an ``InputError``)."""
    result: dict[str, float] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        try:
            fps = float(value)
        except ValueError:
            fps = -1.0
        if not sep or not name or fps < 0:
            raise InputError(f"--min-fps '{item}': expected SCENARIO=FPS with FPS >= 0", field="--min-fps")
        result[name] = fps
    return result


def format_reduction(reduction: Mapping[str, Any]) -> str:
    """The human-readable reduction section of ``sbrs build`` (chosen configuration and Pareto front)."""
    mb = 1e6
    figures = reduction["figures"]
    limit = reduction["memory_limit_bytes"]
    if reduction["early_exit"]:
        return (f"buffers reduction (Algorithm 9): parameters plus buffers {figures['memory_bytes'] / mb:.2f} MB fit "
                f"the limit {limit / mb:.2f} MB without processing by parts (lines 1-5)")
    chosen = reduction["chosen"]
    lines = [f"buffers reduction (Algorithm 9, NSGA-II, seed {reduction['seed']}, {reduction['evaluations']} "
             f"configurations, cost model {reduction['cost_model']}), limit {limit / mb:.2f} MB:"]
    banded = {s: len(b) for s, b in reduction["band_rows"].items()}
    unreduced = reduction["unreduced"]["memory_bytes"] / mb
    streams = int(chosen.get("streams", 1))
    lines.append(f"chosen: {chosen['memory_bytes'] / mb:.2f} MB = parameters {chosen['params_bytes'] / mb:.2f} + "
                 f"buffers {chosen['arena_bytes'] / mb:.2f} MB"
                 + (f" ({streams} band streams: {streams} frames at once, buffers of their own)" if streams > 1 else "")
                 + f" (unreduced {unreduced:.2f} MB); layers by parts: "
                 + ", ".join(f"{s} {n}" for s, n in banded.items())
                 + "".join(f"; {s}: {len(c)} partition cuts" for s, c in reduction.get("cuts", {}).items())
                 + "".join(f"; {s}: {len(t)} tiled groups" for s, t in reduction.get("tiles", {}).items()))
    lines.append(f"executor arena (line buffers and band boundaries): {figures['executor_arena_bytes'] / mb:.2f} MB"
                 + (" per band stream" if streams > 1 else "") + "; "
                 "calls per frame: " + ", ".join(f"{s} {n}" for s, n in figures["executor_calls"].items()))
    scenarios = list(chosen["fps"])
    lines.append("Pareto front: " + f"{'memory MB':>10} {'buffers MB':>10} {'streams':>7} " +
                 " ".join(f"{s[:14] + ' fps':>18}" for s in scenarios))
    front = reduction["pareto"]
    shown = sorted({0, len(front) - 1, *range(0, len(front), max(1, len(front) // 10))} |
                   {i for i, p in enumerate(front) if p == chosen})
    for index in shown:
        point = front[index]
        mark = "*" if point == chosen else " "
        lines.append(f"            {mark}{point['memory_bytes'] / mb:>10.2f} {point['arena_bytes'] / mb:>10.2f} "
                     f"{point.get('streams', 1):>7} " +
                     " ".join(f"{point['fps'][s]:>18.1f}" for s in scenarios))
    if len(shown) < len(front):
        lines.append(f"            ({len(front) - len(shown)} more points in the JSON report)")
    for violation in reduction["violations"]:
        lines.append(f"constraint not met: {violation}")
    return "\n".join(lines)
