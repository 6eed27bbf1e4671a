"""The compiler of execution by parts: the thesis' line buffers (Chapter 4, Section 6.5.2) as ONNX Runtime calls.

Given a scenario (a :class:`~sbrs.model.cnn.CnnModel`) and band heights per layer (``sbrs.reduction``),
:func:`compile_parts` turns the CSDF schedule of thesis Algorithm 10 (line 5) into *calls* of ONNX Runtime
sessions, sizes one line buffer per tensor, places every buffer of every scenario in ONE arena with
:func:`sbrs.memory.place` (Algorithm 10, line 9) and computes the transition tables; the result is a
:class:`~sbrs.compile.parts_plan.PartsPlan` of :class:`~sbrs.compile.parts_plan.BandCall` and
:class:`~sbrs.compile.parts_plan.LineBuffer` values. :func:`call_model` gives each call's ONNX model. Nothing
here runs: ``sbrs.runtime.engine.Runtime`` executes the plan, for an app's build, an app in memory or bare
models (``Runtime.from_models``). A run from a build never imports this module.

Calls
    The schedule fires layers phase by phase (``(layer, k)``, Table 4.1, Column 7). Consecutive firings are
    fused into one call (one ``run_with_iobinding`` of one session) when

    - all are whole (one phase): a maximal run of whole layers is one session, at native speed;
    - all are phase ``k`` of banded layers with the same output rows, and every member reads what another
      member produced at exactly its own rows without padding (1:1: BatchNormalization, activations, Add of a
      residual, 1x1 convolutions). So a convolution, its batch norm and its activation are one band call, and
      the CSDF buffers between them exist only inside ONNX Runtime, band-sized.

    The head of a band call (a Conv/MaxPool/AveragePool reading a window) gets the band's top/bottom padding as
    its ``pads`` (Algorithm 4, lines 27-28): one ONNX model per distinct padding (first bands, middle bands,
    last bands; a 5-row kernel has two first variants) with a *symbolic* height, so the last, shorter band
    runs on the same session. DESIGN.md measured bit-identical rows for such bands; the tests here check every
    zoo CNN against the unreduced model. Where a group of calls comes in three or more such variants (a tiled
    block: first, middle and last bands, with their slices), the most frequent keeps its model and the others
    run on one *edge model* whose pads (an ONNX ``Pad`` before each convolution) and slice rows are inputs
    bound per call (``BandCall.edge``, :func:`_edge_variants`): fewer sessions, each one costing process memory.

Storage layout (the choice the NCHW format forces)
    A band of rows of an NCHW tensor is not contiguous across channels, and IOBinding needs one contiguous
    buffer. Every tensor that a band call touches is therefore stored *row-major*, ``[H, N, C, W]`` ("rows"
    layout): one row (``N*C*W`` elements, the token of :mod:`sbrs.reduction.rows`) is contiguous and a band
    of rows is one contiguous range. The sessions convert: each rows-layout input goes through a
    ``Transpose(perm=[1, 2, 0, 3])`` to NCHW and each rows-layout output through ``Transpose(perm=[2, 0, 1,
    3])`` back, inside ONNX Runtime (one pass over the band per boundary, no Python copy). Tensors no band
    call touches stay NCHW and are bound whole, as in the normal runtime. With ``N = 1`` a one-row tensor
    (the SE gate) has the same bytes in both layouts.

Line buffers
    A tensor's buffer holds ``capacity`` rows (the schedule's :class:`~sbrs.reduction.schedule.BufferSize`
    ``rows``; the whole height when a whole layer produces or reads it). Instead of a ring (whose bands could
    wrap), it is a *sliding* window: row ``r`` is in slot ``r - base``. When a write would pass the end, the
    rows some reader still needs (from the lowest row any reader's next phase reads) are moved to slot 0
    (``numpy.copyto``, ``memmove``-like) and ``base`` advances. So every band read or written is contiguous
    with no spare rows; the cost is the copy of the kept rows (the overlap, ``kernel - stride`` rows per
    input, thesis Section 4.4 Ex3) at most once per write. Everything is deterministic, so the moves, the
    addresses and the IOBindings of every call of a frame are computed once at load (by the runtime); a frame
    is a list of copies and ``run_with_iobinding`` calls.

Streamed input
    A band on the graph input (``band_rows[scenario]["input:..."]``) makes the frame an edge like any other:
    the arena holds a line buffer of its rows, and a *feed* call (``BandCall.feed``, key ``feed``, no session)
    marks where the runtime copies each band's rows from the caller's frame (transposed to the rows layout),
    just before the calls that read them; its output is the rows it writes, its moves those of the input's
    line buffer. Without it the frame is copied whole into the arena first.

Partitions and tiles
    ``cuts`` and ``tiles`` reach :func:`~sbrs.reduction.csdf.cnn_to_csdf` unchanged: a cut only reorders the
    firings (and holds the cut tensor whole); a tiled group's firing becomes one call of all its members,
    each with the pads of the rows *it* computes, and a ``Slice`` along H where a member reads fewer rows
    than the call holds (``BandCall.slices``). Its internal tensors live inside ONNX Runtime, band-sized, and have
    no buffer here (the plan of :mod:`sbrs.reduction` counts them as transients of the firing).

The arena problem: one timeline per scenario whose steps are its calls; a buffer is live from the first call
that touches it to the last (the frame input from call 0, graph outputs to the last call). It is checked with
:func:`sbrs.memory.place` (planned and verified) before anything runs.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from sbrs.compile.parts_plan import (
    FEED,
    MODELS_APP,
    NCHW,
    ROWS,
    TO_NCHW,
    TO_ROWS,
    BandCall,
    LineBuffer,
    PartsPlan,
    ScenarioParts,
    edge_operands,
)
from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.log import Progress
from sbrs.memory import Block, Live, Problem, place
from sbrs.model.cnn import INPUT_OP, OUTPUT_OP, CnnModel, Layer, TensorSpec
from sbrs.model.fold import fold_bands, fold_cuts, fold_model, fold_tiles
from sbrs.model.onnx_export import build_graph_model
from sbrs.reduction.csdf import cnn_to_csdf
from sbrs.reduction.phases import LayerPhases, normalize_bands
from sbrs.reduction.rows import ROWWISE_OPS, WINDOW_OPS, layer_height, row_bytes, tensor_rows
from sbrs.reduction.schedule import schedule_csdf
from sbrs.reduction.tiles import TilePhases

__all__ = [
    "BANDABLE_OPS",
    "TRANSITION_CUTS",
    "Tiles",
    "call_model",
    "call_models",
    "compile_parts",
    "executable_bands",
    "plan_transition_room",
]

logger = logging.getLogger(__name__)

#: Operators this executor runs by bands (window ops get per-band pads; the rest are 1:1 or broadcast).
BANDABLE_OPS: frozenset[str] = WINDOW_OPS | ROWWISE_OPS

def executable_bands(model: CnnModel, bands: Mapping[str, int]) -> dict[str, int]:
    """``bands`` normalised (:func:`~sbrs.reduction.phases.normalize_bands`), whole for what cannot run by bands.

    Whole: operators outside :data:`BANDABLE_OPS` (a row-local Slice or Pad would need per-band starts/pads
    operands; not implemented) and layers with ``auto_pad`` other than ``NOTSET`` whose explicit pads are
    unknown. The graph input is whole unless ``bands`` gives it a band: then the frame is *streamed* (module
    docstring, "Streamed input").
    """
    result = normalize_bands(model, bands)
    for layer in model.layers:
        auto_pad = str(layer.attributes.get("auto_pad", "NOTSET"))
        if layer.op == INPUT_OP:
            if layer.name not in bands or len(model.tensors[layer.outputs[0]].shape) != 4:
                result[layer.name] = layer_height(layer)
        elif layer.op not in BANDABLE_OPS or auto_pad not in ("NOTSET", "VALID"):
            result[layer.name] = layer_height(layer)
    return result


# -- compiling ------------------------------------------------------------------------------------------


def _can_join(model: CnnModel, plans: Mapping[str, LayerPhases], group: list[str], phase: int, layer: Layer,
              reads: Mapping[str, tuple[int, int, int, int]]) -> bool:
    """Whether firing ``(layer, phase)`` may join the current call ``group`` (module docstring, "Calls")."""
    head = plans[group[0]]
    plan = plans[layer.name]
    if (head.phases > 1) != (plan.phases > 1):
        return False
    if plan.phases == 1:
        return True
    k = phase - 1
    if head.out_rows != plan.out_rows:
        return False
    produced = {t for name in group for t in model.layer(name).outputs if t}
    for item in plan.inputs:
        lo, hi = item.rows[k]
        top, bottom = item.pads[k]
        if item.tensor in produced:
            if (lo, hi) != plan.out_rows[k] or (top, bottom) != (0, 0) or item.kind != "window":
                return False
        elif item.tensor in reads and reads[item.tensor] != (lo, hi, top, bottom):
            return False
    return True


def _layout_of(model: CnnModel, tensor: str, banded_touch: set[str]) -> str:
    return ROWS if tensor in banded_touch and len(model.tensors[tensor].shape) == 4 else NCHW


def compile_scenario(model: CnnModel, bands: Mapping[str, int], *, name: str | None = None,
                     cuts: Sequence[str] = (), tiles: Sequence[tuple[Sequence[str], int]] = ()) -> ScenarioParts:
    """The calls and buffers of one scenario processing ``bands`` rows per phase (module docstring), partitioned
    at the ``cuts`` tensors (:class:`~sbrs.reduction.csdf.CsdfGraph`), with ``tiles`` groups run as one call
    per band (:mod:`sbrs.reduction.tiles`)."""
    scenario = name or model.name
    for layers, _ in tiles:
        for layer in layers:
            if model.layer(layer).op not in BANDABLE_OPS:
                raise InputError(f"tile group: layer '{layer}' ({model.layer(layer).op}) cannot run by bands",
                                 field="tiles")
    bands = executable_bands(model, bands)
    graph = cnn_to_csdf(model, bands, name=scenario, cuts=cuts, tiles=tiles)
    schedule = schedule_csdf(graph)
    plans = {p.layer: p for p in graph.layers}
    tile_of = {t.plan.layer: t for t in graph.tiles}
    actor_of = {m: t.plan.layer for t in graph.tiles for m in t.layers}
    producer = {t: layer.name for layer in model.layers for t in layer.outputs if t}
    readers: dict[str, list[str]] = {}  # by actor (a tiled group reads as one; its internal tensors have none)
    for layer in model.layers:
        actor = actor_of.get(layer.name, layer.name)
        for t in dict.fromkeys(layer.inputs):
            src = producer.get(t, "")
            if actor not in readers.get(t, []) and actor_of.get(src, src) != actor:
                readers.setdefault(t, []).append(actor)
    graph_outputs = set(model.graph_outputs)

    # 1. fuse consecutive firings into calls
    groups: list[tuple[list[str], int]] = []
    reads: dict[str, tuple[int, int, int, int]] = {}
    for actor, phase in schedule.firings:
        layer = model.layer(actor)
        if layer.op == OUTPUT_OP or (layer.op == INPUT_OP and plans[actor].phases == 1):
            continue
        tag = phase if plans[actor].phases > 1 else 0
        if layer.op == INPUT_OP or actor in tile_of:  # a streamed frame's feed, a tile: never fused
            groups.append(([actor], tag))
            groups.append(([], -1))  # a separator no firing joins
            continue
        if groups and groups[-1][1] == tag:
            group, _ = groups[-1]
            if _can_join(model, plans, group, phase, layer, reads):
                group.append(actor)
                _note_reads(plans[actor], phase, reads)
                continue
        groups.append(([actor], tag))
        reads = {}
        _note_reads(plans[actor], phase, reads)

    # 2. inputs and outputs of every call
    raw_calls: list[tuple[tuple[str, ...], int, list[tuple[str, int, int]], list[tuple[str, int, int]],
                          list[tuple[str, int, int]], tuple[str, ...], tuple[tuple[str, str, int, int], ...]]] = []
    banded_touch: set[str] = set()
    groups = [(members, phase) for members, phase in groups if members]
    for members, phase in groups:
        if members[0] in tile_of:
            raw_calls.append(_tile_call(model, tile_of[members[0]], phase))
            if phase:
                banded_touch.update(t for t, _, _ in (*raw_calls[-1][2], *raw_calls[-1][3]))
            continue
        member_set = set(members)
        produced: dict[str, None] = {}
        inputs: dict[str, tuple[int, int]] = {}
        pads: list[tuple[str, int, int]] = []
        for name in members:
            plan = plans[name]
            layer = model.layer(name)
            for item in plan.inputs:
                if item.tensor in produced:
                    continue
                lo, hi = item.rows[phase - 1] if phase else (0, tensor_rows(model.tensors[item.tensor].shape))
                inputs.setdefault(item.tensor, (lo, hi))
            if phase and layer.op in WINDOW_OPS:
                top, bottom = plan.input(layer.inputs[0]).pads[phase - 1]
                pads.append((name, top, bottom))
            for t in layer.outputs:
                if t:
                    produced.setdefault(t, None)
        outputs = [t for t in produced if t in graph_outputs or any(r not in member_set for r in readers.get(t, ()))]
        if not outputs:
            raise SbrsRuntimeError(f"scenario {scenario}: call {members[0]}.. computes nothing used")
        o0, o1 = plans[members[0]].out_rows[phase - 1] if phase else (0, 0)
        outs = [(t, o0, o1) if phase else (t, 0, tensor_rows(model.tensors[t].shape)) for t in outputs]
        ins = [(t, lo, hi) for t, (lo, hi) in inputs.items()]
        if phase:
            banded_touch.update(t for t, _, _ in ins)
            banded_touch.update(t for t, _, _ in outs)
        raw_calls.append((tuple(members), phase, ins, outs, pads, tuple(members), ()))

    # 3. buffers and the sliding-window simulation (moves and slots)
    capacity = {b.tensor: b.rows for b in schedule.buffers}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    input_tensor = model.graph_inputs[0]
    streamed = bands[model.layers[0].name] < layer_height(model.layers[0]) if model.layers[0].op == INPUT_OP else False
    if not streamed:
        first[input_tensor] = last[input_tensor] = 0
    for index, (_, _, ins, outs, _, _, _) in enumerate(raw_calls):
        for t, _, _ in (*ins, *outs):
            first.setdefault(t, index)
            last[t] = index
    for t in model.graph_outputs:
        last[t] = len(raw_calls) - 1
    base = dict.fromkeys(first, 0)
    written = dict.fromkeys(first, 0)
    if not streamed:
        written[input_tensor] = tensor_rows(model.tensors[input_tensor].shape)
    done = dict.fromkeys(plans, 0)

    def next_low(reader: str, tensor: str) -> int:
        plan = plans[reader]
        if done[reader] >= plan.phases:
            return 1 << 62
        return plan.input(tensor).rows[done[reader]][0]

    calls: list[BandCall] = []
    for members, phase, ins, outs, pads, actors, slices in raw_calls:
        moves: list[tuple[str, int, int, int]] = []
        in_slots = []
        for t, lo, hi in ins:
            cap = capacity.get(t, tensor_rows(model.tensors[t].shape))
            if lo < base[t] or hi - base[t] > cap or hi > written[t]:
                raise SbrsRuntimeError(f"scenario {scenario}: {members[0]} reads rows [{lo}, {hi}) of {t} "
                                       f"(buffer holds [{base[t]}, {written[t]}) in {cap} rows)")
            in_slots.append((t, lo, hi, lo - base[t]))
        out_slots = []
        for t, o0, o1 in outs:
            cap = capacity[t]
            if o1 - base[t] > cap:
                need = min((next_low(r, t) for r in readers.get(t, ())), default=o0)
                need = min(need, o0)
                if written[t] > need:
                    moves.append((t, need - base[t], 0, written[t] - need))
                base[t] = need
                if o1 - base[t] > cap:
                    raise SbrsRuntimeError(f"scenario {scenario}: {members[0]} writes rows [{o0}, {o1}) of {t}, "
                                           f"row {base[t]} is still needed (buffer of {cap} rows)")
            out_slots.append((t, o0, o1, o0 - base[t]))
            written[t] = o1
        for name in actors:
            done[name] += 1
        calls.append(BandCall(tuple(members), phase, tuple(in_slots), tuple(out_slots),
                          tuple(pads), tuple(moves), feed=model.layer(members[0]).op == INPUT_OP, slices=slices))
    buffers = []
    for t in first:
        spec = model.tensors[t]
        cap = capacity.get(t, tensor_rows(spec.shape))
        layout = _layout_of(model, t, banded_touch)
        buffers.append(LineBuffer(t, tuple(spec.shape), spec.dtype, layout, cap, row_bytes(spec), first[t], last[t]))
    result = ScenarioParts(scenario, {n: b for n, b in bands.items() if b < layer_height(model.layer(n))},
                           tuple(calls), tuple(buffers), input_tensor, tuple(model.graph_outputs),
                           schedule.buffer_bytes)
    edges = _edge_variants(model, calls)
    digests: dict[tuple[Any, ...], str] = {}  # a call's model depends on its layers, pads and whether banded
    keyed = []
    for call in calls:
        if call.feed:
            keyed.append(replace(call, key=FEED))
            continue
        memo: tuple[Any, ...] = _variant(call)
        if memo in edges:
            call = replace(call, edge=True, edge_pads=edges[memo])
            memo = (*_group(call), "edge")
        if memo not in digests:
            digests[memo] = _digest(call_model(model, result, call))
        keyed.append(replace(call, key=digests[memo]))
    return replace(result, calls=tuple(keyed))


#: A group of calls (the same layers) with at least this many variants runs its rarer ones on one edge model.
EDGE_MIN_VARIANTS = 3
#: ONNX opset from which ``Pad`` takes its pads and ``Slice`` its starts and ends as inputs.
EDGE_MIN_OPSET = 11


def _variant(call: BandCall) -> tuple[Any, ...]:
    return (call.layers, call.pads, call.banded, call.slices)


def _group(call: BandCall) -> tuple[Any, ...]:
    """What a call's model is made of apart from its band's pads and slice rows."""
    return (call.layers, call.banded, tuple(n for n, _, _ in call.pads), tuple((m, t) for m, t, _, _ in call.slices))


def _edge_variants(model: CnnModel, calls: Sequence[BandCall]) -> dict[tuple[Any, ...], tuple[str, ...]]:
    """The variants (``_variant``) that run on their group's edge model (module docstring, "Calls"), each with
    the layers whose band pads differ within its group (``BandCall.edge_pads``: only those get a ``Pad``).

    A group whose calls come in ``EDGE_MIN_VARIANTS`` or more variants keeps its most frequent one (the middle
    bands) as a model of its own and runs the others (first and last bands, once a frame each) on one shared
    model whose pads and slice rows are inputs: one ONNX Runtime session instead of several, each ~90 kB of
    process memory (docs/MEASUREMENTS.md), for a few microseconds more per edge call (its ``Pad`` copies the band).
    Only float convolutions are padded so (a zero ``Pad`` is not MaxPool's padding, nor AveragePool's without
    ``count_include_pad``, nor a quantized input's, whose zero is its zero point), and only from opset
    ``EDGE_MIN_OPSET``.
    """
    if model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0)) < EDGE_MIN_OPSET:
        return {}
    counts: dict[tuple[Any, ...], dict[tuple[Any, ...], int]] = {}
    for call in calls:
        if not call.feed and call.banded:
            variants = counts.setdefault(_group(call), {})
            variants[_variant(call)] = variants.get(_variant(call), 0) + 1
    edges: dict[tuple[Any, ...], tuple[str, ...]] = {}
    for (_, _, padded, _), variants in counts.items():
        # the layers whose (name, top, bottom) is not the same in every variant of the group
        varying = tuple(name for index, name in enumerate(padded)
                        if len({pads[index] for _, pads, _, _ in variants}) > 1)
        if len(variants) < EDGE_MIN_VARIANTS or any(model.layer(n).op != "Conv" or model.layer(n).qdq is not None
                                                     for n in varying):
            continue
        kept = max(variants, key=lambda v: variants[v])  # the first most frequent: dicts keep insertion order
        edges.update(dict.fromkeys((v for v in variants if v != kept), varying))
    return edges


def _tile_call(model: CnnModel, tile: TilePhases, phase: int) -> tuple[Any, ...]:
    """The raw call of one firing of a tiled group: entries' rows in, the exit band out, every window member
    with its own band pads and a ``Slice`` wherever a member reads fewer rows than the call has."""
    k = max(phase, 1) - 1
    ins = [(item.tensor, *item.rows[k]) for item in tile.plan.inputs]
    outs = [(tile.exit, *tile.plan.out_rows[k])] if phase else [(tile.exit, 0, tile.plan.height)]
    available = {t: (lo, hi) for t, lo, hi in ins}
    pads: list[tuple[str, int, int]] = []
    slices: list[tuple[str, str, int, int]] = []
    for name in tile.layers:
        layer = model.layer(name)
        member = tile.member(name)
        if phase and layer.op in WINDOW_OPS:
            pads.append((name, *member.input(layer.inputs[0]).pads[k]))
        for item in member.inputs:
            lo, hi = item.rows[k]
            a0, a1 = available[item.tensor]
            if phase and (lo, hi) != (a0, a1):
                slices.append((name, item.tensor, lo - a0, hi - a0))
        available[layer.outputs[0]] = member.out_rows[k]
    return (tile.layers, phase, ins, outs, pads, (tile.plan.layer,), tuple(slices))


def _note_reads(plan: LayerPhases, phase: int, reads: dict[str, tuple[int, int, int, int]]) -> None:
    if plan.phases == 1:
        return
    for item in plan.inputs:
        lo, hi = item.rows[phase - 1]
        top, bottom = item.pads[phase - 1]
        reads.setdefault(item.tensor, (lo, hi, top, bottom))


def _digest(model: onnx.ModelProto) -> str:
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()[:24]


def _banded_layer(layer: Layer, top: int, bottom: int) -> Layer:
    """``layer`` with the band's top/bottom padding (ONNX pads order: top, left, bottom, right)."""
    pads = list(layer.pads)
    pads[0], pads[2] = top, bottom
    attributes = {k: v for k, v in layer.attributes.items() if k != "auto_pad"}
    attributes["pads"] = pads
    return replace(layer, attributes=attributes, pads=tuple(pads))


def call_model(model: CnnModel, parts: ScenarioParts, call: BandCall) -> onnx.ModelProto:
    """The ONNX model of one call: its layers (band pads applied), rows-layout tensors transposed in and out.

    ``model`` is the folded model the call was compiled from (``compile_parts`` folds what it is given).

    A band call's rows-layout inputs and outputs have a symbolic height (``h0``, ``h1`` ... and ``ho``).
    """
    layouts = {b.tensor: b.layout for b in parts.buffers}
    pads = {name: (0, 0) if name in call.edge_pads else (top, bottom) for name, top, bottom in call.pads}
    layers = [_banded_layer(model.layer(n), *pads[n]) if n in pads else model.layer(n) for n in call.layers]
    operand_names = [name for name, _ in edge_operands(call)] if call.edge else []
    slice_nodes: list[tuple[str, onnx.NodeProto]] = []  # (member, node): each just before its member
    slice_consts: list[onnx.TensorProto] = []
    for index, (member, tensor, start, stop) in enumerate(call.slices):
        sliced = f"{tensor}::{member}::rows"
        names = [f"slice{index}.{part}" for part in ("starts", "ends", "axes")]
        for const, value in zip(names, (start, stop, 2), strict=True):
            if const not in operand_names:  # an edge model's starts and ends are inputs
                slice_consts.append(numpy_helper.from_array(np.array([value], dtype=np.int64), const))
        slice_nodes.append((member, helper.make_node("Slice", [tensor, *names], [sliced],
                                                     name=f"{member}::slice{index}")))
        at = call.layers.index(member)
        layer = layers[at]
        layers[at] = replace(layer, operands=tuple(sliced if o == tensor else o for o in layer.operands))
    if call.edge:  # the band's rows of zeros as a Pad before each convolution whose pads vary, its pads an input
        for name in call.edge_pads:
            at = call.layers.index(name)
            layer = layers[at]
            padded = f"{layer.operands[0]}::{name}::padded"
            slice_nodes.append((name, helper.make_node("Pad", [layer.operands[0], f"{name}::band_pads"], [padded],
                                                       name=f"{name}::band_pad", mode="constant")))
            layers[at] = replace(layer, operands=(padded, *layer.operands[1:]))
    made = {t for layer in layers for t in layer.outputs}
    if any(t not in made for t, *_ in call.outputs):
        raise SbrsRuntimeError(f"call {call.layers[0]}..: the model does not produce the call's outputs (pass the "
                               "folded model, sbrs.model.fold.fold_model, that compile_parts compiled)")
    inputs: list[tuple[str, TensorSpec]] = []
    outputs: list[tuple[str, TensorSpec]] = []
    pre: list[onnx.NodeProto] = []
    post: list[onnx.NodeProto] = []
    symbolic: dict[str, str] = {}
    for index, (t, lo, hi, _) in enumerate(call.inputs):
        spec = model.tensors[t]
        if layouts[t] == ROWS:
            n, c, _, w = spec.shape
            name = f"{t}::rows"
            inputs.append((name, TensorSpec((hi - lo, n, c, w), spec.dtype)))
            pre.append(helper.make_node("Transpose", [name], [t], perm=list(TO_NCHW), name=f"{t}::to_nchw"))
            if call.banded and tensor_rows(spec.shape) > 1:
                symbolic[name] = f"h{index}"
        else:
            inputs.append((t, spec))
    for t, o0, o1, _ in call.outputs:
        spec = model.tensors[t]
        if layouts[t] == ROWS:
            n, c, _, w = spec.shape
            name = f"{t}::rows"
            outputs.append((name, TensorSpec((o1 - o0, n, c, w), spec.dtype)))
            post.append(helper.make_node("Transpose", [t], [name], perm=list(TO_ROWS), name=f"{t}::to_rows"))
            if call.banded:
                symbolic[name] = "ho"
        else:
            outputs.append((t, spec))
    proto = build_graph_model(layers, inputs, outputs, model.weights, model.opset_imports,
                              f"{parts.scenario}.{call.layers[0]}")
    graph = proto.graph
    nodes = list(graph.node)
    for member, node in slice_nodes:  # each just before its reader (a Pad after its member's Slice)
        at = next(i for i, n in enumerate(nodes) if n.name == member)
        nodes.insert(at, node)
    nodes = [*pre, *nodes, *post]
    graph.initializer.extend(slice_consts)
    for name, values in (edge_operands(call) if call.edge else ()):
        graph.input.append(helper.make_tensor_value_info(name, onnx.TensorProto.INT64, [len(values)]))
    del graph.node[:]
    graph.node.extend(nodes)
    for value in (*graph.input, *graph.output):
        if value.name in symbolic:
            dim = value.type.tensor_type.shape.dim[0]
            dim.Clear()
            dim.dim_param = symbolic[value.name]
    return proto


Tiles = Mapping[str, Sequence[tuple[Sequence[str], int]]]


def compile_parts(models: Mapping[str, CnnModel], band_rows: Mapping[str, Mapping[str, int]] | None = None, *,
                  app: str = MODELS_APP, alignment: int = 64, cuts: Mapping[str, Sequence[str]] | None = None,
                  tiles: Tiles | None = None, memory_limit: int | None = None,
                  room_bytes: int | None = None) -> PartsPlan:
    """Every scenario compiled by parts (missing: whole), their buffers placed in one arena, with the
    transition tables of every ordered pair: the one way a :class:`PartsPlan` is made (an app's, with
    ``sbrs.compile.fit``, or bare models', for ``Runtime.from_models``).

    Models are folded first (:func:`sbrs.model.fold.fold_model`; idempotent): band heights, cuts and tiles may
    name the layers of the models as given or folded, and entries for a BatchNormalization or activation folded
    into its convolution are dropped. With ``memory_limit`` (bytes of parameters plus arena), the arena keeps
    room for SBRS-TP transitions where the limit leaves it (:func:`plan_transition_room`; the cut taken is
    ``reduction["transition_cut"]``); ``room_bytes`` bounds that room instead (the bytes the arena may grow by,
    so that the plan of ``sbrs.compile.footprint`` stays within the limit); ``reduction["arena_without_room_bytes"]``
    is the arena without it. ``model_bytes``: the folded models' parameter and naive buffer bytes
    (thesis Eq. 2.6-2.7; what the calls hold).
    """
    from sbrs.compile.transitions import parts_transitions
    from sbrs.model import naive_buffer_bytes, params_bytes

    band_rows = band_rows or {}
    cuts = cuts or {}
    tiles = tiles or {}
    unknown = sorted((set(band_rows) | set(cuts) | set(tiles)) - set(models))
    if unknown:
        raise InputError(f"unknown scenario(s) {', '.join(unknown)} (scenarios: {', '.join(models)})",
                         field="band_rows")
    folded = {s: fold_model(m) for s, m in models.items()}
    progress = Progress(logger, "compiling band calls", len(folded), unit="scenarios")
    compiled = {}
    for done, (s, f) in enumerate(folded.items(), 1):
        compiled[s] = compile_scenario(f, fold_bands(models[s], f, band_rows.get(s, {})), name=s,
                                       cuts=fold_cuts(models[s], f, cuts.get(s, ())),
                                       tiles=fold_tiles(models[s], f, tiles.get(s, ())))
        progress(done)
    blocks = [Block(f"{s}/{b.tensor}", b.nbytes, (Live(s, b.first_call, b.last_call),))
              for s, parts in compiled.items() for b in parts.buffers]
    problem = Problem(tuple(blocks), frozenset(), alignment)
    arena = place(problem, what=f"the line buffers of {', '.join(compiled)} by parts")
    offsets = arena.as_dict()
    placed = {s: replace(p, buffers=tuple(replace(b, offset=offsets[f"{s}/{b.tensor}"]) for b in p.buffers))
              for s, p in compiled.items()}
    params = params_bytes(folded.values())
    plan = PartsPlan(app, placed, arena.arena_bytes, int(arena.lower_bound_bytes or 0), arena.alignment,
                     arena.strategy, model_bytes={"params_bytes": params,
                                                  "naive_bytes": sum(naive_buffer_bytes(m) for m in folded.values())},
                     problem=problem, arena=arena)
    budget = (plan.arena_bytes + room_bytes if room_bytes is not None
              else None if memory_limit is None else memory_limit - params)
    plan, cut = plan_transition_room(plan, budget)
    return replace(plan, transitions=parts_transitions(plan.scenarios, plan.arena_bytes, app),
                   reduction={"transition_cut": cut, "arena_without_room_bytes": arena.arena_bytes})


#: Where a transition's new frame may start, as fractions of the old frame's calls, earliest first
#: (``plan_transition_room``).
TRANSITION_CUTS: tuple[float, ...] = (0.0, 0.5, 0.9, 0.95, 1.0)


def plan_transition_room(parts: PartsPlan, budget: int | None) -> tuple[PartsPlan, float | None]:
    """The parts arena re-placed so that SBRS-TP transitions can overlap, within ``budget`` bytes.

    Placed on one timeline per scenario, a new frame's buffers (its input slot first) land on bytes the old
    frame still needs and a transition waits for the whole old frame. Here, for a cut ``c`` (a fraction of each
    old frame's calls), every buffer an old scenario o touches from call ``c·|φ^o|`` on is kept apart from
    every buffer of every other scenario n: the buffers of o after the cut get lives on a timeline ``o->n:old``,
    n's buffers keep their lives on a timeline ``n:new``, and the two are a concurrent set (Algorithm 8, lines
    9-11, as ``sbrs.compile.transitions.plan_shadow`` does for the shadow slots, but on the scenarios' own
    buffers: no copy, no second frame input). A switch noticed after the cut can then start the whole new
    frame at once. The earliest cut of ``TRANSITION_CUTS`` whose arena fits ``budget`` is taken; the hazard
    tables are computed afterwards from the real offsets, so this only makes room, it proves nothing. Returns
    the plan (``parts`` itself when no cut fits, or with one scenario) and the cut taken (None).
    """
    scenarios = parts.scenarios
    if len(scenarios) < 2 or budget is None or parts.problem is None:
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
        arena = place(problem, what=f"the transition room by parts (cut {cut:g})")
        if arena.arena_bytes > budget:
            continue
        offsets = arena.as_dict()
        placed = {s: replace(p, buffers=tuple(replace(b, offset=offsets[f"{s}/{b.tensor}"]) for b in p.buffers))
                  for s, p in scenarios.items()}
        return replace(parts, scenarios=placed, arena_bytes=arena.arena_bytes,
                       lower_bound_bytes=int(arena.lower_bound_bytes or 0), strategy=f"{arena.strategy}+transitions",
                       problem=problem, arena=arena), cut
    return parts, None


def call_models(models: Mapping[str, CnnModel], plan: PartsPlan) -> dict[str, onnx.ModelProto]:
    """key → the ONNX model of every distinct call of ``plan`` (what ``sbrs build`` writes as files), from the
    scenarios' ``models`` the plan was compiled from (folded or not: they are folded here as the compiler
    folds them; folding a folded model is cheap). Feeds have no model."""
    result: dict[str, onnx.ModelProto] = {}
    for scenario, parts in plan.scenarios.items():
        folded = fold_model(models[scenario])  # the model the calls were compiled from
        for call in parts.calls:
            if not call.feed and call.key not in result:
                result[call.key] = call_model(folded, parts, call)
    return result
