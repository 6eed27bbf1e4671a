"""Measured costs of execution by parts on this machine, for the GA (thesis Algorithm 9, ``EvalThroughput``).

The thesis measures each candidate's throughput on the platform. Running every candidate is too slow, so
costs are measured per layer and band height once and summed (:class:`~sbrs.reduction.cost.CostModel`):

- for every band height ``b`` of the candidates, every scenario runs with ``b``-row bands in *every*
  bandable layer (``b = 0``: no processing by parts, one fused session) on the one runtime by parts
  (``Runtime.from_models``), and each call is timed (``timed_calls``: the moves of its line buffers
  included);
- a call's time is split over its layers in proportion to their work (:func:`~sbrs.reduction.cost.layer_work`;
  a band call fuses a convolution with its batch norm and activation);
- the whole-height figure of a layer comes from the ``b = 0`` run, so a configuration without processing by
  parts sums exactly to the native one-session time, and a band figure replaces the layer's share of it;
- for every band ``b``, every candidate tile group (:func:`~sbrs.reduction.tiles.tile_groups`) runs tiled
  with exit bands of ``b``; each tile call is split over its members by work, giving the members' *tile*
  figures (halo recomputation and the one call per band included);
- each call's figure is the fastest of ``repeats`` frames (models are folded first, as the GA sees them).

What it does not capture: the cost of cutting a fused whole run into two sessions where a band region
starts or ends (NCHWc reorders and transposes at the boundary; DESIGN.md measured 0.94-1.0x for a few cuts).
The table is cached under ``sbrs.cache.cache_dir("costs")``, keyed by the layers' configurations, the band
candidates, the onnxruntime version and the machine; :func:`cached_costs` measures only on a miss.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from sbrs.cache import cache_dir, content_key
from sbrs.compile.parts import ScenarioParts
from sbrs.model.cnn import CnnModel, Layer
from sbrs.model.fold import fold_model
from sbrs.reduction.cost import AnalyticCostModel, MeasuredCostModel, layer_key, layer_work
from sbrs.reduction.ga import GaParams
from sbrs.reduction.rows import is_row_local, layer_height
from sbrs.reduction.tiles import tile_groups
from sbrs.runtime.engine import Runtime

__all__ = ["cached_costs", "costs_path", "device_name", "measure_costs"]

#: What a table holds: folded layers, band and tile figures, fastest of the repeats (older tables are remade).
TABLE = "folded-tiles-min-interleaved"

Progress = Callable[[int, int], None]


def device_name() -> str:
    """The machine the figures belong to: architecture, cores, onnxruntime version."""
    return f"{platform.machine()} {os.cpu_count()} cores, onnxruntime {ort.__version__}"


def costs_path(models: Mapping[str, CnnModel], candidates: Sequence[int] = GaParams.candidates) -> Path:
    """Where the cost table of ``models`` and ``candidates`` on this machine is cached."""
    keys = sorted({layer_key(layer) for m in models.values() for layer in fold_model(m).layers})
    return cache_dir("costs") / f"costs-{content_key(keys, sorted(set(candidates)), device_name(), TABLE)}.json"


def _frame(model: CnnModel) -> np.ndarray:
    spec = model.tensors[model.graph_inputs[0]]
    return np.random.default_rng(0).standard_normal(spec.shape).astype(spec.dtype)


def compiled(runtime: Runtime, scenario: str) -> ScenarioParts:
    """The compiler's form of ``scenario``'s calls in ``runtime`` (their layers, in the order of its steps)."""
    return runtime.plan.scenarios[scenario]  # type: ignore[union-attr]


def measure_costs(models: Mapping[str, CnnModel], candidates: Sequence[int] = GaParams.candidates, *,
                  repeats: int = 5, progress: Progress | None = None) -> MeasuredCostModel:
    """Measure every layer of ``models`` whole, in bands of each candidate height and as a member of every
    candidate tile group at each candidate exit band (module docstring). Each call's figure is the fastest
    of ``repeats`` frames, each frame interleaved with a frame of the whole model (whose figures are the
    fastest over all of them): on a shared machine the minimum is the estimate least disturbed by load."""
    bands_list = sorted({int(c) for c in candidates if int(c) > 0} | {0}, reverse=False)
    models = {s: fold_model(m) for s, m in models.items()}  # what the GA and the runtime by parts see
    measured: list[tuple[Layer, int, float]] = []
    tiled: list[tuple[Layer, int, float]] = []
    total = len(models) * (2 * len(bands_list) - 1)
    done = 0
    for scenario, model in models.items():
        frame = _frame(model)
        groups = tile_groups(model)
        configs: list[tuple[str, int, dict[str, int], list[tuple[tuple[str, ...], int]]]] = []
        for band in bands_list:
            config = {} if band == 0 else {layer.name: band for layer in model.layers
                                           if is_row_local(model, layer) and layer_height(layer) > band}
            configs.append(("band", band, config, []))
        for band in bands_list[1:]:
            configs.append(("tile", band, {}, [(g, band) for g in groups if layer_height(model.layer(g[-1])) > band]))
        whole = Runtime.from_models({scenario: model})
        whole.infer(frame)
        whole_samples: list[list[float]] = []
        results = []
        for kind, band, config, tiles in configs:
            if (kind == "tile" and not tiles) or (kind == "band" and band == 0):  # the whole model: below
                done += 1
                continue
            with Runtime.from_models({scenario: model}, {scenario: config},
                                            tiles={scenario: tiles}) as runtime:
                runtime.infer(frame)  # warm-up
                samples = []
                for _ in range(repeats):  # interleaved with the whole model, so both see the same load
                    whole_samples.append(whole.timed_calls(frame, 1))
                    samples.append(runtime.timed_calls(frame, 1))
                seconds = [float(v) for v in np.min(np.array(samples), axis=0)]
                parts = compiled(runtime, scenario)
            results.append((kind, band, tiles, parts, seconds))
            done += 1
            if progress is not None:
                progress(done, total)
        whole_parts = compiled(whole, scenario)
        whole_seconds = [float(v) for v in np.min(np.array(whole_samples), axis=0)]
        whole.close()
        results.insert(0, ("band", 0, [], whole_parts, whole_seconds))
        for kind, band, tiles, parts, seconds in results:
            members = {name for group, _ in tiles for name in group}
            per_layer: dict[str, float] = {}
            for call, spent in zip(parts.calls, seconds, strict=True):
                works = [max(layer_work(model.layer(n)), 1) for n in call.layers]
                for name, work in zip(call.layers, works, strict=True):
                    per_layer[name] = per_layer.get(name, 0.0) + spent * work / sum(works)
            for name, spent in per_layer.items():
                layer = model.layer(name)
                if kind == "tile":
                    if name in members:
                        tiled.append((layer, band, spent))
                elif band == 0:
                    measured.append((layer, layer_height(layer), spent))
                elif name in parts.band_rows:
                    measured.append((layer, band, spent))
    table = MeasuredCostModel(fallback=AnalyticCostModel(), device=device_name()).with_measurements(measured)
    return table.with_measurements(tiled, tile=True)


def cached_costs(models: Mapping[str, CnnModel], candidates: Sequence[int] = GaParams.candidates, *,
                 measure: bool = True, progress: Progress | None = None) -> MeasuredCostModel | None:
    """The cached table of ``models`` (measured and saved on a miss when ``measure``; else None on a miss)."""
    path = costs_path(models, candidates)
    if path.is_file():
        return MeasuredCostModel.load(path)
    if not measure:
        return None
    table = measure_costs(models, candidates, progress=progress)
    table.save(path)
    return table
