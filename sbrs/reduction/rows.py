"""Row dependencies of one layer: which input rows a band of output rows needs (tokens = rows).

Thesis Section 4.4 processes a layer's data "by parts" along the height: at phase ``k`` layer ``l_i`` reads a
part ``X_ik`` of its input and writes a part ``Y_ik`` of its output (Table 4.1). Here a *token* is one row of
an NCHW tensor (``C x W`` elements), so every part is a range of rows. This module says, for each layer and
each of its data inputs, which input rows are needed for a range of output rows:

- ``window`` (Conv, MaxPool, AveragePool; also constant Pad and Slice along H, which are windows of height 1
  with a shift and a step): output rows ``[o0, o1)`` read the input rows
  ``[o0*s - pad_top, (o1-1)*s - pad_top + (kh-1)*d + 1)`` clipped to ``[0, H_in)``; the rows clipped off are
  the padding the band adds (Algorithm 4, lines 27-28 and 32, 36: positive pads are zero rows not taken from
  the channel, negative pads are cropped rows that are taken from it and dropped). Element-wise layers
  (activations, BatchNormalization, Add/Sub/Mul/Div, Concat along channels or width) are windows of height 1:
  rows map 1:1, and every input of a multi-input layer is read at the same rows (unless a parameter operand
  differs along the height, such as the ``[1, 1, 16, 1]`` bin weights of a detector's DFL head: whole);
- ``broadcast``: an input one row high read by a layer whose output is taller (the SE gate of ``Mul(x, s)``):
  every phase reads the whole (one-row) input;
- ``whole``: the output rows depend on all input rows (Gemm, MatMul, GlobalAveragePool/GlobalMaxPool,
  Flatten, Reshape, Softmax, Transpose, Resize, ConvTranspose, Concat along H, non-constant Pad, tensors not
  of rank 4, and the graph outputs): thesis Algorithm 3, lines 3-4, gives such a layer one phase.

No module-level mutable state: every table here is an immutable ``frozenset``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sbrs.model.cnn import INPUT_OP, OUTPUT_OP, CnnModel, Layer, TensorSpec

__all__ = [
    "ROWWISE_OPS",
    "WINDOW_OPS",
    "RowMap",
    "is_row_local",
    "layer_height",
    "layer_row_maps",
    "row_bytes",
    "row_elements",
    "tensor_rows",
]

#: Operators whose output row ``r`` depends only on row ``r`` of each input of the same height.
ROWWISE_OPS: frozenset[str] = frozenset({
    "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "BatchNormalization",
    "Identity", "Dropout", "Add", "Sub", "Mul", "Div", "Concat",
    # the QOperator form (ONNX Runtime's com.microsoft ops): per-tensor scales and zero points, row by row
    "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
    # a QuantizeLinear or DequantizeLinear of no QDQ unit (the graph input's, the dequantized output)
    "QuantizeLinear", "DequantizeLinear",
})

#: Operators with a sliding window along the height (Table 2.1 attributes kh, s, pad, dilation).
WINDOW_OPS: frozenset[str] = frozenset({"Conv", "MaxPool", "AveragePool", "QLinearConv"})


def tensor_rows(shape: tuple[int, ...]) -> int:
    """Height ``h`` of a tensor in rows (tokens): ``shape[2]`` of an NCHW tensor, 1 for any other rank."""
    return int(shape[2]) if len(shape) == 4 else 1


def row_elements(shape: tuple[int, ...]) -> int:
    """Elements of one row (one token): ``N*C*W`` of an NCHW tensor, the whole tensor for any other rank."""
    total = int(np.prod(shape, dtype=np.int64)) if shape else 1
    return total // tensor_rows(shape)


def row_bytes(spec: TensorSpec) -> int:
    """Bytes of one row (one token) of a tensor."""
    return row_elements(spec.shape) * np.dtype(spec.dtype).itemsize


def layer_height(layer: Layer) -> int:
    """Output height of a layer in rows (the height ``Y_i.h`` that Algorithm 3, line 8, divides into phases)."""
    return tensor_rows(layer.output_shapes[0]) if layer.output_shapes else 1


@dataclass(frozen=True)
class RowMap:
    """Rows of one data input that a range of output rows needs.

    ``kind`` is ``window``, ``broadcast`` or ``whole``. For a window, ``kernel`` (kh), ``stride`` (s),
    ``dilation`` (d) and ``pad_top`` (Table 2.1 ``pad[1]`` in the thesis' order; negative crops) define
    :meth:`needed`; ``in_rows`` is the input height, ``out_rows`` the output height.
    """

    kind: str
    in_rows: int
    out_rows: int
    kernel: int = 1
    stride: int = 1
    dilation: int = 1
    pad_top: int = 0

    @property
    def extent(self) -> int:
        """Rows one output row spans in the (padded) input: ``(kh - 1) * d + 1``."""
        return (self.kernel - 1) * self.dilation + 1

    def window(self, o0: int, o1: int) -> tuple[int, int]:
        """Unclipped input rows ``[lo, hi)`` of output rows ``[o0, o1)`` in the input's coordinates."""
        if self.kind != "window":
            return 0, self.in_rows
        lo = o0 * self.stride - self.pad_top
        hi = (o1 - 1) * self.stride - self.pad_top + self.extent
        return lo, hi

    def needed(self, o0: int, o1: int) -> tuple[int, int]:
        """Input rows ``[lo, hi)`` that output rows ``[o0, o1)`` read, clipped to the input (never empty-reversed)."""
        lo, hi = self.window(o0, o1)
        lo_c = min(max(lo, 0), self.in_rows)
        hi_c = max(min(hi, self.in_rows), lo_c)
        return lo_c, hi_c

    def padding(self, o0: int, o1: int) -> tuple[int, int]:
        """Padding rows ``(top, bottom)`` the band adds around :meth:`needed` (0 where the band crops)."""
        lo, hi = self.window(o0, o1)
        return max(0, -lo), max(0, hi - self.in_rows)


def _whole(in_rows: int, out_rows: int) -> RowMap:
    return RowMap("whole", in_rows, out_rows)


def _param(model: CnnModel, layer: Layer, position: int) -> np.ndarray | None:
    """The parameter array at operand ``position`` of ``layer`` (None when absent or not a parameter)."""
    if position >= len(layer.operands) or not layer.operands[position]:
        return None
    name = layer.operands[position]
    for ref in layer.params:
        if ref.name == name and ref.digest in model.weights:
            return np.asarray(model.weights[ref.digest])
    return None


def _slice_h(model: CnnModel, layer: Layer, in_rows: int, out_rows: int) -> RowMap | None:
    """Slice along H with a positive step is a window of height 1 (shift ``start``, stride ``step``)."""
    starts, ends = _param(model, layer, 1), _param(model, layer, 2)
    if starts is None or ends is None:
        return None
    rank = len(layer.input_shapes[0])
    axes_arr = _param(model, layer, 3)
    steps_arr = _param(model, layer, 4)
    axes = [int(a) % rank for a in axes_arr.ravel()] if axes_arr is not None else list(range(starts.size))
    steps = [int(s) for s in steps_arr.ravel()] if steps_arr is not None else [1] * len(axes)
    if 2 not in axes:
        return RowMap("window", in_rows, out_rows) if in_rows == out_rows else None
    i = axes.index(2)
    start, end, step = int(starts.ravel()[i]), int(ends.ravel()[i]), steps[i]
    if step <= 0:
        return None
    start = min(max(start + in_rows if start < 0 else start, 0), in_rows)
    end = min(max(end + in_rows if end < 0 else end, 0), in_rows)
    if len(range(start, end, step)) != out_rows:
        return None
    return RowMap("window", in_rows, out_rows, kernel=1, stride=step, pad_top=-start)


def layer_row_maps(model: CnnModel, layer: Layer) -> dict[str, RowMap]:
    """One :class:`RowMap` per data input tensor of ``layer`` (a tensor read twice gets one map).

    A layer is *row-local* when no map is ``whole`` (see :func:`is_row_local`). ``Input`` layers have no
    inputs (their band is free); ``Output`` layers read their tensor whole (the app returns whole outputs).
    """
    out_rows = layer_height(layer)
    inputs = list(dict.fromkeys(layer.inputs))
    shapes = {name: model.tensors[name].shape for name in inputs}
    whole = {name: _whole(tensor_rows(shape), out_rows) for name, shape in shapes.items()}
    if layer.op in (INPUT_OP, OUTPUT_OP) or not layer.output_shapes:
        return whole
    out_shapes = layer.output_shapes
    if any(len(s) != 4 for s in out_shapes) or len({tensor_rows(s) for s in out_shapes}) != 1 or out_rows < 1:
        return whole
    if not inputs or any(len(s) != 4 for s in shapes.values()):
        return whole
    first = inputs[0]
    in0 = tensor_rows(shapes[first])
    if layer.op in WINDOW_OPS:
        maps = {first: RowMap("window", in0, out_rows, kernel=layer.kernel[0], stride=layer.stride[0],
                              dilation=layer.dilation[0], pad_top=layer.pads[0])}
        for name in inputs[1:]:  # weights fed as data (unusual): needed whole at every phase
            maps[name] = RowMap("broadcast", tensor_rows(shapes[name]), out_rows)
        return maps
    if layer.op == "Pad":
        mode = str(layer.attributes.get("mode", "constant"))
        has_axes = len(layer.operands) > 3 and bool(layer.operands[3])
        pt, pb = layer.pads[0], layer.pads[2]
        if mode != "constant" or has_axes or in0 + pt + pb != out_rows or len(inputs) != 1:
            return whole
        return {first: RowMap("window", in0, out_rows, pad_top=pt)}
    if layer.op == "Slice":
        sliced = _slice_h(model, layer, in0, out_rows) if len(inputs) == 1 else None
        return {first: sliced} if sliced is not None else whole
    if layer.op in ROWWISE_OPS:
        if layer.op == "Concat" and int(layer.attributes.get("axis", 1)) % 4 == 2:
            return whole
        if layer.op in ("QuantizeLinear", "DequantizeLinear") and int(layer.attributes.get("axis", 1)) % 4 == 2 \
                and any(len(param.shape) == 1 and param.shape[0] > 1 for param in layer.params):
            return whole  # a scale per row
        if any(len(param.shape) >= 2 and param.shape[-2] > 1 for param in layer.params):
            return whole  # a constant that differs from row to row (``Mul(x, c)``, c [1, 1, H, 1]): no bands
        maps = {}
        for name, shape in shapes.items():
            rows = tensor_rows(shape)
            if rows == out_rows:
                maps[name] = RowMap("window", rows, out_rows)
            elif rows == 1:
                maps[name] = RowMap("broadcast", rows, out_rows)
            else:
                return whole
        return maps
    return whole


def is_row_local(model: CnnModel, layer: Layer) -> bool:
    """True when ``layer`` can produce its output by bands of rows: a row-local compute layer taller than one row.

    The graph ``Input`` is row-local too (a frame can arrive row by row, thesis Table 4.1 ``l_1``); the
    graph ``Output`` is not (the application returns whole tensors).
    """
    if layer.op == OUTPUT_OP:
        return False
    if layer_height(layer) <= 1:
        return False
    if layer.op == INPUT_OP:
        return True
    if any(model.tensors[t].dtype == "float16" for t in (*layer.inputs, *layer.outputs) if t in model.tensors):
        # ONNX Runtime's CPU provider computes float16 layers in float32 inside one call: a band boundary would
        # round their tensors to float16 (MobileNetV2 fp16 by parts: 2e-3 off); they run whole
        return False
    if layer.qdq is not None and any(model.tensors[t].dtype in ("int16", "uint16")
                                     for t in (*layer.inputs, *layer.outputs) if t in model.tensors):
        # 16-bit QDQ units have no integer kernel in ONNX Runtime: it runs their op in float32 between the
        # DequantizeLinear and QuantizeLinear, and a band's float arithmetic, blocked differently from the whole
        # layer's, moves values across a 16-bit step often (MobileNetV2 u16 in 1-row bands: 1.2e-4 off; 8-bit
        # units run on integer kernels, the same by bands); they run whole
        return False
    maps = layer_row_maps(model, layer)
    return bool(maps) and all(m.kind != "whole" for m in maps.values())
