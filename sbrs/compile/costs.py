"""Measured costs of execution by parts on this machine, for the GA (thesis Algorithm 9, ``EvalThroughput``).

The thesis measures each candidate's throughput on the platform. Running every candidate is too slow, so
costs are measured per layer and band height once and summed (:class:`~sbrs.reduction.cost.CostModel`):

- for every band height ``b`` of the candidates, every scenario is compiled with ``b``-row bands in *every*
  bandable layer (``b = 0``: no processing by parts, one fused session; ``compile_parts``), and each of its
  calls is timed in frame order, as a run executes them: every distinct call model (and bound shapes) is one
  ONNX Runtime session bound with IOBinding to numpy buffers of the call's input and output shapes, a call's
  line-buffer moves are numpy copies of as many bytes, and a streamed frame's feed copies the frame's rows
  (``_Timed``). Nothing here opens a runtime: the compile stage times what it compiles;
- a call's time is split over its layers in proportion to their work (:func:`~sbrs.reduction.cost.layer_work`;
  a band call fuses a convolution with its batch norm and activation);
- the whole-height figure of a layer comes from the ``b = 0`` configuration, so a configuration without
  processing by parts sums exactly to the native one-session time, and a band figure replaces the layer's
  share of it;
- for every band ``b``, every candidate tile group (:func:`~sbrs.reduction.tiles.tile_groups`) runs tiled
  with exit bands of ``b``; each tile call is split over its members by work, giving the members' *tile*
  figures (halo recomputation and the one call per band included);
- each figure is the fastest of ``repeats`` timings, each taken beside one of the whole model, so that both
  see the same load (models are folded first, as the GA sees them).

What it does not capture: the cost of cutting a fused whole run into two sessions where a band region
starts or ends (NCHWc reorders and transposes at the boundary; DESIGN.md measured 0.94-1.0x for a few cuts).
The table is cached under ``sbrs.cache.cache_dir("costs")``, keyed by the layers' configurations, the band
candidates, the onnxruntime version and the machine; :func:`cached_costs` measures only on a miss.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

from sbrs.cache import cache_dir, content_key
from sbrs.compile.parts import call_models, compile_parts
from sbrs.compile.parts_plan import ROWS, TO_ROWS, LineBuffer, PartsPlan, edge_operands
from sbrs.errors import InputError
from sbrs.log import Progress as ProgressLines
from sbrs.model.cnn import CnnModel, Layer
from sbrs.model.fold import fold_model
from sbrs.ort_env import CPU_PROVIDER, create_session, use_threads
from sbrs.reduction.cost import AnalyticCostModel, CostModel, MeasuredCostModel, layer_key, layer_work
from sbrs.reduction.ga import GaParams
from sbrs.reduction.rows import is_row_local, layer_height
from sbrs.reduction.tiles import tile_groups

if TYPE_CHECKING:
    from sbrs.reduction.search import CostSource

__all__ = ["COST_MODELS", "cached_costs", "cost_source", "costs_path", "device_name", "measure_costs"]

#: What a table holds: folded layers, band and tile figures, fastest of the repeats (older tables are remade).
TABLE = "folded-tiles-min-interleaved"
#: ``sbrs build --cost``: the measured table (made now when missing), the analytic model, or the cached table
#: when there is one and the analytic model otherwise.
COST_MODELS: tuple[str, ...] = ("auto", "analytic", "measured")

Progress = Callable[[int, int], None]

logger = logging.getLogger(__name__)


def device_name() -> str:
    """The machine the figures belong to: architecture, cores, onnxruntime version."""
    return f"{platform.machine()} {os.cpu_count()} cores, onnxruntime {ort.__version__}"


def costs_path(models: Mapping[str, CnnModel], candidates: Sequence[int] = GaParams.candidates) -> Path:
    """Where the cost table of ``models`` and ``candidates`` on this machine is cached."""
    keys = sorted({layer_key(layer) for m in models.values() for layer in fold_model(m).layers})
    return cache_dir("costs") / f"costs-{content_key(keys, sorted(set(candidates)), device_name(), TABLE)}.json"


def cost_source(kind: str = "auto", progress: Progress | None = None) -> CostSource:
    """The search's cost model for ``sbrs build --cost kind`` (``COST_MODELS``), resolved only when the search
    runs (``sbrs.reduction.search.reduce_app``): ``measured`` times the calls now when no table is cached
    (``progress`` is told), ``auto`` takes a cached table or the analytic model. An unknown kind is an
    ``InputError`` at once."""
    if kind not in COST_MODELS:
        raise InputError(f"unknown cost model '{kind}' (allowed: {', '.join(COST_MODELS)})", field="--cost")

    def resolve(models: Mapping[str, CnnModel], candidates: tuple[int, ...]) -> tuple[CostModel, str]:
        if kind == "analytic":
            return AnalyticCostModel(), "analytic"
        table = cached_costs(models, candidates, measure=kind == "measured", progress=progress)
        if table is None:
            return AnalyticCostModel(), "analytic (no measured table cached; build once with --cost measured)"
        return table, f"measured on {table.device}"

    return resolve


def _frame(model: CnnModel) -> np.ndarray:
    spec = model.tensors[model.graph_inputs[0]]
    return np.random.default_rng(0).standard_normal(spec.shape).astype(spec.dtype)


def _runner(session: ort.InferenceSession, binding: ort.IOBinding) -> Callable[[], Any]:
    """``session.run_with_iobinding(binding)`` as the runtime calls it (``sbrs.runtime.device.iobinding_runner``:
    the native call without onnxruntime's Python wrapper when it is there), so the figures are the runtime's."""
    native_session, native_binding = getattr(session, "_sess", None), getattr(binding, "_iobinding", None)
    if native_binding is None or not hasattr(native_session, "run_with_iobinding"):
        return functools.partial(session.run_with_iobinding, binding)
    return functools.partial(native_session.run_with_iobinding, native_binding, None)


class _Timed:
    """One compiled configuration of one scenario, ready to be timed as the runtime runs it, without a runtime.

    Every distinct (call model, bound shapes) is one session bound once to numpy buffers of those shapes;
    every call is a step as the runtime binds it (``sbrs.runtime.binding``): its line-buffer moves (numpy copies
    of as many bytes, within a scratch buffer), then its model's run; a feed copies its rows of the frame,
    transposed to the rows layout. ``sample`` copies the frame into the buffers that read the graph input and
    times every step of a frame in order, so each call runs right after the one before it, as in a run;
    ``seconds`` gives each call the fastest of its samples.
    """

    def __init__(self, model: CnnModel, plan: PartsPlan, scenario: str, frame: np.ndarray,
                 scope: str = "session") -> None:
        self.parts = parts = plan.scenarios[scenario]
        self._frame = frame
        buffers = {b.tensor: b for b in parts.buffers}
        models = call_models({scenario: model}, plan)
        sessions: dict[str, ort.InferenceSession] = {}
        rng = np.random.default_rng(1)
        runs: dict[tuple[Any, ...], Callable[[], Any]] = {}
        self._keep: list[Any] = []  # the bound buffers and bindings, alive as long as their runs
        self._frame_inputs: list[np.ndarray] = []  # buffers a frame is copied into (``copy_in``)
        sizes = {rows * buffers[t].row_bytes for call in parts.calls for t, _, _, rows in call.moves}
        scratch = np.empty(2 * max(sizes, default=0), np.uint8)
        copies = {size: functools.partial(np.copyto, scratch[size:2 * size], scratch[:size]) for size in sizes}
        self.steps: list[Callable[[], Any]] = []
        for call in parts.calls:
            if call.feed:
                t, lo, hi, _ = call.outputs[0]
                target = np.empty(_bound_shape(buffers[t], lo, hi), buffers[t].dtype)
                self._keep.append(target)
                run: Callable[[], Any] = functools.partial(_feed, target, frame, lo, hi)
            else:
                inputs = tuple(_bound_shape(buffers[t], lo, hi) for t, lo, hi, _ in call.inputs)
                outputs = tuple(_bound_shape(buffers[t], lo, hi) for t, lo, hi, _ in call.outputs)
                key = (call.key, inputs, outputs, call.pads, call.slices)  # an edge model's pads are inputs
                if key not in runs:
                    if call.key not in sessions:
                        # one intra-op thread, as the runtime runs every call of a plan by parts (sbrs.ort_env)
                        sessions[call.key] = create_session(models[call.key], (CPU_PROVIDER,), threads=1,
                                                            scope=scope)
                    binding = sessions[call.key].io_binding()
                    for items, shapes, bind in ((call.inputs, inputs, binding.bind_input),
                                                (call.outputs, outputs, binding.bind_output)):
                        for (t, *_), shape in zip(items, shapes, strict=True):
                            buffer = buffers[t]
                            array = rng.standard_normal(shape).astype(buffer.dtype)
                            name = f"{t}::rows" if buffer.layout == ROWS else t
                            bind(name, "cpu", 0, array.dtype, list(shape), array.ctypes.data)
                            self._keep.append(array)
                            if t == parts.input and not parts.streamed and shape[0] == buffer.full_rows:
                                self._frame_inputs.append(array)
                    for name, values in (edge_operands(call) if call.edge else ()):
                        operand = np.array(values, np.int64)
                        binding.bind_input(name, "cpu", 0, operand.dtype, list(operand.shape), operand.ctypes.data)
                        self._keep.append(operand)
                    self._keep.append(binding)
                    runs[key] = _runner(sessions[call.key], binding)
                run = runs[key]
            self.steps.append(_step(run, tuple(copies[rows * buffers[t].row_bytes]
                                               for t, _, _, rows in call.moves)))
        self._sessions = sessions

    def copy_in(self) -> None:
        """The frame into every buffer bound to the whole graph input (the runtime's copy-in of a frame)."""
        for array in self._frame_inputs:
            np.copyto(array, self._frame.transpose(TO_ROWS) if array.shape != self._frame.shape else self._frame)

    def sample(self) -> list[float]:
        """Seconds of every step of one frame, in order (the frame copied in first, untimed)."""
        clock = time.perf_counter
        self.copy_in()
        seconds = [0.0] * len(self.steps)
        for index, step in enumerate(self.steps):
            start = clock()
            step()
            seconds[index] = clock() - start
        return seconds

    def seconds(self, samples: Sequence[Sequence[float]]) -> list[float]:
        """Each call's figure: the fastest of its samples."""
        return [float(v) for v in np.min(np.array(samples), axis=0)]


def _step(run: Callable[[], Any], moves: tuple[Callable[[], Any], ...]) -> Callable[[], Any]:
    """A call as the runtime's step: the line-buffer moves, then the run (``sbrs.runtime.binding``)."""
    if not moves:
        return run

    def step() -> None:
        for move in moves:
            move()
        run()

    return step


def _bound_shape(buffer: LineBuffer, lo: int, hi: int) -> tuple[int, ...]:
    """The shape a call binds for rows ``[lo, hi)`` of ``buffer``: ``[rows, N, C, W]`` (rows layout) or the
    whole tensor (NCHW)."""
    if buffer.layout != ROWS:
        return tuple(buffer.shape)
    n, c, _, w = buffer.shape
    return (hi - lo, n, c, w)


def _feed(target: np.ndarray, frame: np.ndarray, lo: int, hi: int) -> None:
    np.copyto(target, frame[:, :, lo:hi, :].transpose(TO_ROWS))


def _timed(model: CnnModel, scenario: str, frame: np.ndarray, bands: Mapping[str, int] | None = None,
           tiles: Sequence[tuple[Sequence[str], int]] = (), scope: str = "session") -> _Timed:
    plan = compile_parts({scenario: model}, {scenario: dict(bands or {})}, tiles={scenario: tiles})
    return _Timed(model, plan, scenario, frame, scope)


def measure_costs(models: Mapping[str, CnnModel], candidates: Sequence[int] = GaParams.candidates, *,
                  repeats: int = 5, progress: Progress | None = None) -> MeasuredCostModel:
    """Measure every layer of ``models`` whole, in bands of each candidate height and as a member of every
    candidate tile group at each candidate exit band (module docstring). Each call's figure is the fastest
    of ``repeats`` timings, each beside a timing of the whole model (whose figures are the fastest over all
    of them): on a shared machine the minimum is the estimate least disturbed by load. ``progress(done,
    total)`` follows the configurations (default: ``measuring costs`` lines, ``sbrs.log``)."""
    threads = use_threads(None)  # the process's ONNX Runtime setting, as a runtime by parts makes it
    bands_list = sorted({int(c) for c in candidates if int(c) > 0} | {0}, reverse=False)
    models = {s: fold_model(m) for s, m in models.items()}  # what the GA and the runtime by parts see
    measured: list[tuple[Layer, int, float]] = []
    tiled: list[tuple[Layer, int, float]] = []
    total = len(models) * (2 * len(bands_list) - 1)
    if progress is None:
        progress = ProgressLines(logger, "measuring costs", total, unit="configurations")
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
        whole = _timed(model, scenario, frame, scope=threads.scope)
        whole.sample()  # warm-up
        whole_samples: list[list[float]] = []
        results = []
        for kind, band, config, tiles in configs:
            if (kind == "tile" and not tiles) or (kind == "band" and band == 0):  # the whole model: below
                done += 1
                progress(done, total)
                continue
            timed = _timed(model, scenario, frame, config, tiles, threads.scope)
            timed.sample()  # warm-up
            samples = []
            for _ in range(repeats):  # interleaved with the whole model, so both see the same load
                whole_samples.append(whole.sample())
                samples.append(timed.sample())
            results.append((kind, band, tiles, timed.parts, timed.seconds(samples)))
            del timed
            done += 1
            progress(done, total)
        if not whole_samples:  # nothing else to measure: the whole model alone
            whole_samples = [whole.sample() for _ in range(repeats)]
        results.insert(0, ("band", 0, [], whole.parts, whole.seconds(whole_samples)))
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
