"""Buffer reduction by processing data by parts: the design-time half (thesis Chapter 4 and Section 6.5.2).

Pipeline (each stage a frozen, JSON-ready value):

- :mod:`~sbrs.reduction.rows`: which input rows a band of output rows needs (tokens = rows);
- :mod:`~sbrs.reduction.phases`: Algorithm 3 (phases), generalised to band heights, and the per-phase row
  plan an executor follows (:class:`LayerPhases`);
- :mod:`~sbrs.reduction.csdf`: Algorithm 4, the CNN-to-CSDF conversion (:func:`cnn_to_csdf`);
- :mod:`~sbrs.reduction.schedule`: buffer sizes and a schedule by simulation instead of SDF3
  (:func:`schedule_csdf`), the reduced memory problem for the arena planner (:func:`reduced_problem`) and a
  replay checker (:func:`check_schedule`);
- :mod:`~sbrs.reduction.regions`: where bands can flow (:func:`reducible_regions`);
- :mod:`~sbrs.reduction.cost`: the throughput estimate (:class:`CostModel`);
- :mod:`~sbrs.reduction.ga`: Algorithm 10 (:func:`plan_reduction`) and Algorithm 9 (:func:`reduce_buffers`).

What an executor does with a :class:`ReductionPlan` (implemented in :mod:`sbrs.compile.parts`, which
compiles the schedule into ONNX Runtime calls and documents the choices: fused band calls, a row-major
``[H, N, C, W]`` layout, sliding line buffers instead of rings, one arena checked with ``check_plan``):

1. allocate one buffer per tensor of ``plan.schedules[s].buffers`` (``rows`` slots of ``row_bytes``);
2. walk ``schedule.firings`` in order; for firing ``(layer, k)`` take ``graph.layer(layer)``: it writes
   output rows ``out_rows[k-1]``; for each input it reads rows ``inputs[i].rows[k-1]`` and pads them with
   ``inputs[i].pads[k-1]`` rows above/below: the band's top/bottom ``pads`` attribute, replacing the layer's
   own (left/right unchanged; the op's padding semantics stay, zeros for Conv, ignored for MaxPool), so a
   layer needs a few pad variants (first bands, middle, last bands); a one-phase layer runs whole;
3. measure ``layer_seconds`` per band height into a :class:`MeasuredCostModel`
   (:mod:`sbrs.compile.costs`) and feed it to :func:`reduce_buffers`.
"""

from sbrs.reduction.cost import (
    AnalyticCostModel,
    CostModel,
    MeasuredCostModel,
    layer_key,
    layer_work,
    model_fps,
    model_seconds,
)
from sbrs.reduction.csdf import Actor, Channel, CsdfGraph, cnn_to_csdf
from sbrs.reduction.examples import TABLE_4_1, TABLE_4_1_BANDS, figure_4_1_model
from sbrs.reduction.ga import (
    GaParams,
    Gene,
    Point,
    ReductionPlan,
    ReductionResult,
    cut_genes,
    plan_reduction,
    reduce_buffers,
    reduction_genes,
    tile_genes,
)
from sbrs.reduction.phases import (
    InputPhases,
    LayerPhases,
    bands_from_phases,
    derive_phases,
    full_bands,
    layer_phases,
    maximal_bands,
    normalize_bands,
    phases_of,
)
from sbrs.reduction.regions import Region, reducible_regions
from sbrs.reduction.rows import RowMap, is_row_local, layer_height, layer_row_maps, row_bytes, tensor_rows
from sbrs.reduction.schedule import (
    RULE,
    BufferSize,
    ChannelSize,
    Schedule,
    check_schedule,
    reduced_problem,
    schedule_csdf,
)
from sbrs.reduction.tiles import TilePhases, tile_groups, tile_phases

__all__ = [
    "RULE",
    "TABLE_4_1",
    "TABLE_4_1_BANDS",
    "Actor",
    "AnalyticCostModel",
    "BufferSize",
    "Channel",
    "ChannelSize",
    "CostModel",
    "CsdfGraph",
    "GaParams",
    "Gene",
    "InputPhases",
    "LayerPhases",
    "MeasuredCostModel",
    "Point",
    "ReductionPlan",
    "ReductionResult",
    "Region",
    "RowMap",
    "Schedule",
    "TilePhases",
    "bands_from_phases",
    "check_schedule",
    "cnn_to_csdf",
    "cut_genes",
    "derive_phases",
    "figure_4_1_model",
    "full_bands",
    "is_row_local",
    "layer_height",
    "layer_key",
    "layer_phases",
    "layer_row_maps",
    "layer_work",
    "maximal_bands",
    "model_fps",
    "model_seconds",
    "normalize_bands",
    "phases_of",
    "plan_reduction",
    "reduce_buffers",
    "reduced_problem",
    "reducible_regions",
    "reduction_genes",
    "row_bytes",
    "schedule_csdf",
    "tensor_rows",
    "tile_genes",
    "tile_groups",
    "tile_phases",
]
