"""Quantized models at import: QDQ node units become quantized layers; ONNX Runtime's own quantized ops get
shapes.

QDQ node units. ``onnxruntime.quantization`` writes a quantized convolution as ``DequantizeLinear`` nodes on its
input and weights, the float ``Conv``, and a ``QuantizeLinear`` on its output; ONNX Runtime fuses such a unit
into one integer kernel (``QLinearConv``) when it creates a session, if the whole unit is in that session.
:func:`group_qdq` makes each unit one layer (``Layer.qdq``): its data inputs and outputs are the quantized
tensors, its parameters the integer weights, scales and zero points, and the float tensors in between do not
exist outside it, as they do not inside ONNX Runtime. So an execution unit boundary can only fall on a
quantized tensor, where ONNX Runtime's fused kernels read and write too, and splitting a scenario into units
never moves a rounding step; the memory plan counts the tensors ONNX Runtime really has (one byte per
element); and Algorithm 5 compares the unit as a whole (an int8 layer never equals its float twin).

Like ONNX Runtime (``EnsureUniqueDQForNodeUnit``), a ``DequantizeLinear`` read by several ops is copied into
each of them. A ``DequantizeLinear`` or ``QuantizeLinear`` that belongs to no unit (the graph input's
quantization, the dequantized graph output) stays a layer of its own.

The same units in ONNX Runtime's own domain (``com.microsoft`` QuantizeLinear and DequantizeLinear, which its
quantizer writes with ``extra_options={"UseQDQContribOps": True}``, and for 16-bit types where the model's
opset is below 21) group the same way; each node keeps its domain, so a unit runs the file's own ops.

Shapes of ONNX Runtime's ops. ONNX's shape inference does not know the ``com.microsoft`` ops of the QOperator
form (``QLinearAdd`` ...) or its QDQ ops. :func:`shape_surrogates` stands in a standard op with the same output
shape and element type for each, on the weight-less copy that shape inference reads; the model keeps its own
nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

import onnx
from onnx import helper

from sbrs.model.cnn import CONTRIB_DOMAIN, Layer, ParamRef, Qdq, QdqNode, TensorSpec

_STANDARD = ("", "ai.onnx")
#: QuantizeLinear and DequantizeLinear form node units in standard ONNX and in ONNX Runtime's domain alike.
_QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
_QDQ_DOMAINS = (*_STANDARD, CONTRIB_DOMAIN)


def _is(layer: Layer, op: str) -> bool:
    domains = _QDQ_DOMAINS if op in _QDQ_OPS else _STANDARD
    return (layer.op == op and layer.domain in domains and layer.qdq is None and not layer.fused
            and len(layer.outputs) == 1 and bool(layer.outputs[0]))


def _can_wrap(layer: Layer) -> bool:
    return (layer.type != "data" and layer.qdq is None and not layer.fused
            and not _is(layer, "DequantizeLinear") and not _is(layer, "QuantizeLinear"))


def group_qdq(layers: Sequence[Layer], tensors: Mapping[str, TensorSpec],
              graph_outputs: Iterable[str]) -> tuple[list[Layer], dict[str, TensorSpec]]:
    """``layers`` (topological order) with every QDQ node unit as one layer (module docstring), and
    ``tensors`` without the float tensors that became internal to a unit. Unchanged if there is none."""
    kept_outputs = set(graph_outputs)
    producer = {tensor: layer for layer in layers for tensor in layer.outputs if tensor}
    readers: dict[str, list[Layer]] = {}
    for layer in layers:
        for tensor in dict.fromkeys(layer.inputs):
            readers.setdefault(tensor, []).append(layer)

    grouped: dict[str, Layer] = {}
    absorbed_by: dict[str, set[str]] = {}  # DequantizeLinear layer → the layers that took a copy of it
    removed: set[str] = set()
    internal: set[str] = set()
    for layer in layers:
        if not _can_wrap(layer):
            continue
        params: dict[str, ParamRef] = {p.name: p for p in layer.params}
        operands: list[str] = []
        dequantize: list[QdqNode | None] = []
        for operand in layer.operands:
            source = producer.get(operand) if operand else None
            if source is None or not _is(source, "DequantizeLinear") or operand in kept_outputs:
                operands.append(operand)
                dequantize.append(None)
                continue
            operands.extend(source.operands)
            params.update((p.name, p) for p in source.params)
            dequantize.append(QdqNode(len(source.operands), dict(source.attributes), source.domain))
            absorbed_by.setdefault(source.name, set()).add(layer.name)
        quantize, outputs, output_shapes = None, layer.outputs, layer.output_shapes
        result = layer.outputs[0] if len(layer.outputs) == 1 else ""
        after = readers.get(result, []) if result and result not in kept_outputs else []
        if len(after) == 1 and _is(after[0], "QuantizeLinear") and after[0].operands[0] == result \
                and result not in after[0].operands[1:]:
            q = after[0]
            quantize = QdqNode(len(q.operands), dict(q.attributes), q.domain)
            operands.extend(q.operands[1:])
            params.update((p.name, p) for p in q.params)
            outputs, output_shapes = q.outputs, q.output_shapes
            removed.add(q.name)
            internal.add(result)
        if quantize is None and all(d is None for d in dequantize):
            continue
        inputs = [o for o in operands if o and o not in params]
        grouped[layer.name] = replace(
            layer, operands=tuple(operands), outputs=outputs, output_shapes=output_shapes,
            input_shapes=tuple(tensors[t].shape for t in inputs), params=tuple(params.values()),
            qdq=Qdq(tuple(dequantize), quantize))
    by_name = {layer.name: layer for layer in layers}
    for name, takers in absorbed_by.items():
        dequantized = by_name[name].outputs[0]
        if dequantized not in kept_outputs and {r.name for r in readers.get(dequantized, [])} <= takers:
            removed.add(name)
            internal.add(dequantized)
    if not grouped:
        return list(layers), dict(tensors)
    result_layers = [grouped.get(layer.name, layer) for layer in layers if layer.name not in removed]
    return result_layers, {name: spec for name, spec in tensors.items() if name not in internal}


# -- shape inference for ONNX Runtime's quantized ops -------------------------------------------------------

_SURROGATE = "::sbrs-shape."
"""Infix of the names of the tensors that only the shape surrogates have."""


#: Standard nodes standing in for one node, and the initializers they need.
_Replacement = tuple[list[onnx.NodeProto], list[onnx.TensorProto]]


def is_surrogate_tensor(name: str) -> bool:
    return _SURROGATE in name


def shape_surrogates(nodes: Iterable[onnx.NodeProto], opset: int,
                     initializer_types: Mapping[str, int]) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """``nodes`` with every ``com.microsoft`` op this module knows replaced by standard nodes computing a tensor
    of the same shape and element type under the same output name, and the initializers those need.
    ``initializer_types``: element type of each initializer (QGemm's output type is its zero point's)."""
    result: list[onnx.NodeProto] = []
    extra: list[onnx.TensorProto] = []
    for node in nodes:
        if node.domain != CONTRIB_DOMAIN or node.op_type not in _SURROGATES:
            result.append(node)
            continue
        replacement, tensors = _SURROGATES[node.op_type](node, opset, initializer_types)
        result.extend(replacement)
        extra.extend(tensors)
    return result, extra


def _attributes(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _elementwise(node: onnx.NodeProto, opset: int, types: Mapping[str, int]) -> _Replacement:
    # QLinearAdd/QLinearMul(A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp): A's type, broadcast shape.
    # Max broadcasts as Add does and, unlike Add before opset 14, takes 8-bit integers.
    return [helper.make_node("Max", [node.input[0], node.input[3]], [node.output[0]])], []


def _same(node: onnx.NodeProto, opset: int, types: Mapping[str, int]) -> _Replacement:
    return [helper.make_node("Identity", [node.input[0]], [node.output[0]])], []


def _global_pool(node: onnx.NodeProto, opset: int, types: Mapping[str, int]) -> _Replacement:
    axes = [1, 2] if _attributes(node).get("channels_last", 0) else [2, 3]
    if opset >= 18:
        name = f"{node.output[0]}{_SURROGATE}axes"
        return ([helper.make_node("ReduceMax", [node.input[0], name], [node.output[0]], keepdims=1)],
                [helper.make_tensor(name, onnx.TensorProto.INT64, [len(axes)], axes)])
    return [helper.make_node("ReduceMax", [node.input[0]], [node.output[0]], axes=axes, keepdims=1)], []


def _average_pool(node: onnx.NodeProto, opset: int, types: Mapping[str, int]) -> _Replacement:
    attributes = _attributes(node)
    if attributes.get("channels_last", 0):
        return [node], []  # no standard op pools NHWC: shape inference leaves it unknown, the import says so
    kept = {k: v for k, v in attributes.items() if k in ("auto_pad", "ceil_mode", "kernel_shape", "pads", "strides")}
    return [helper.make_node("MaxPool", [node.input[0]], [node.output[0]], **kept)], []  # MaxPool takes 8-bit


def _concat(node: onnx.NodeProto, opset: int, types: Mapping[str, int]) -> _Replacement:
    # QLinearConcat(Y_scale, Y_zp, X1, X1_scale, X1_zp, X2, ...)
    return [helper.make_node("Concat", list(node.input[2::3]), [node.output[0]],
                             axis=_attributes(node)["axis"])], []


def _gemm(node: onnx.NodeProto, opset: int, types: Mapping[str, int]) -> _Replacement:
    # QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp): quantized like y_zp when y_scale is given,
    # else float. MatMulInteger takes 8-bit operands and has the product's shape; a Cast gives the type.
    attributes = _attributes(node)
    stem = f"{node.output[0]}{_SURROGATE}"
    nodes: list[onnx.NodeProto] = []
    a, b = node.input[0], node.input[3]
    if attributes.get("transA", 0):
        nodes.append(helper.make_node("Transpose", [a], [f"{stem}a"], perm=[1, 0]))
        a = f"{stem}a"
    if attributes.get("transB", 0):
        nodes.append(helper.make_node("Transpose", [b], [f"{stem}b"], perm=[1, 0]))
        b = f"{stem}b"
    quantized = len(node.input) > 8 and node.input[7] and node.input[8]
    to = types.get(node.input[8], onnx.TensorProto.UINT8) if quantized else onnx.TensorProto.FLOAT
    nodes.append(helper.make_node("MatMulInteger", [a, b], [f"{stem}product"]))
    nodes.append(helper.make_node("Cast", [f"{stem}product"], [node.output[0]], to=to))
    return nodes, []


def _quantize(node: onnx.NodeProto, opset: int, types: Mapping[str, int]) -> _Replacement:
    # com.microsoft QuantizeLinear(x, y_scale, y_zero_point): x's shape, the zero point's type (uint8 without
    # one). A Cast gives both, for 16-bit types too, which the standard op takes only from opset 21.
    to = types.get(node.input[2], onnx.TensorProto.UINT8) if len(node.input) > 2 and node.input[2] else \
        onnx.TensorProto.UINT8
    return [helper.make_node("Cast", [node.input[0]], [node.output[0]], to=to)], []


def _dequantize(node: onnx.NodeProto, opset: int, types: Mapping[str, int]) -> _Replacement:
    # com.microsoft DequantizeLinear(x, x_scale, x_zero_point): x's shape, the scale's type
    to = types.get(node.input[1], onnx.TensorProto.FLOAT)
    return [helper.make_node("Cast", [node.input[0]], [node.output[0]], to=to)], []


_SURROGATES = {
    "QuantizeLinear": _quantize,
    "DequantizeLinear": _dequantize,
    "QLinearAdd": _elementwise,
    "QLinearMul": _elementwise,
    "QLinearSigmoid": _same,
    "QLinearLeakyRelu": _same,
    "QLinearSoftmax": _same,
    "QLinearGlobalAveragePool": _global_pool,
    "QLinearAveragePool": _average_pool,
    "QLinearConcat": _concat,
    "QGemm": _gemm,
}
