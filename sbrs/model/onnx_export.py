"""Rebuild ONNX from ``CnnModel`` layers: the inverse of ``onnx_import`` for whole models and subgraphs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from sbrs.model.cnn import CnnModel, Layer, QdqNode, TensorSpec, WeightStore

IR_VERSION = 8


def _attribute(key: str, value: Any) -> onnx.AttributeProto:
    if isinstance(value, list) and not value:
        return helper.make_attribute(key, value, attr_type=onnx.AttributeProto.INTS)
    if isinstance(value, list) and any(isinstance(v, float) for v in value):
        return helper.make_attribute(key, [float(v) for v in value])
    return helper.make_attribute(key, value)


def make_node(layer: Layer, outputs: Sequence[str] | None = None) -> onnx.NodeProto:
    node = helper.make_node(layer.op, list(layer.operands), list(layer.outputs if outputs is None else outputs),
                            name=layer.name, domain=layer.domain or None)
    node.attribute.extend(_attribute(key, value) for key, value in layer.attributes.items())
    return node


def make_nodes(layer: Layer) -> list[onnx.NodeProto]:
    """The ONNX nodes of ``layer``: one, or its op followed by its ``fused`` activations (``sbrs.model.fold``),
    or the nodes of its QDQ node unit (``Layer.qdq``)."""
    if layer.qdq is not None:
        return _qdq_nodes(layer)
    if not layer.fused:
        return [make_node(layer)]
    chain = [layer, *layer.fused]
    nodes = []
    for current, after in pairwise(chain):
        nodes.append(make_node(current, (after.operands[0],)))
    nodes.append(make_node(chain[-1], layer.outputs))
    return nodes


def _qdq_nodes(layer: Layer) -> list[onnx.NodeProto]:
    """DequantizeLinear nodes, the op, QuantizeLinear: the node unit ``layer.qdq`` describes. The float tensors
    between them are named after the layer's first output, which is unique in any graph the layer is part of
    (a unit's outputs are renamed to supergraph tensor ids), so the names stay unique wherever it goes."""
    assert layer.qdq is not None
    stem = next((o for o in layer.outputs if o), layer.name)
    operands = iter(layer.operands)
    nodes: list[onnx.NodeProto] = []
    op_inputs: list[str] = []
    for position, dequantize in enumerate(layer.qdq.dequantize):
        if dequantize is None:
            op_inputs.append(next(operands))
            continue
        inputs = [next(operands) for _ in range(dequantize.count)]
        dequantized = f"{stem}/dequantized.{position}"
        nodes.append(_qdq_node("DequantizeLinear", dequantize, inputs, dequantized, f"{layer.name}/dq.{position}"))
        op_inputs.append(dequantized)
    quantize = layer.qdq.quantize
    op_outputs = list(layer.outputs) if quantize is None else [f"{stem}/float"]
    node = helper.make_node(layer.op, op_inputs, op_outputs, name=layer.name, domain=layer.domain or None)
    node.attribute.extend(_attribute(key, value) for key, value in layer.attributes.items())
    nodes.append(node)
    if quantize is not None:
        inputs = [op_outputs[0], *(next(operands) for _ in range(quantize.count - 1))]
        nodes.append(_qdq_node("QuantizeLinear", quantize, inputs, layer.outputs[0], f"{layer.name}/q"))
    return nodes


def _qdq_node(op: str, spec: QdqNode, inputs: list[str], output: str, name: str) -> onnx.NodeProto:
    node = helper.make_node(op, inputs, [output], name=name, domain=spec.domain or None)
    node.attribute.extend(_attribute(key, value) for key, value in spec.attributes.items())
    return node


def _value_info(name: str, spec: TensorSpec) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(spec.dtype)), list(spec.shape))


def build_graph_model(layers: Sequence[Layer], inputs: Iterable[tuple[str, TensorSpec]],
                      outputs: Iterable[tuple[str, TensorSpec]], weights: WeightStore,
                      opset_imports: dict[str, int], name: str = "sbrs",
                      initializer: Callable[[np.ndarray, str], onnx.TensorProto] = numpy_helper.from_array,
                      ) -> onnx.ModelProto:
    """An ONNX model running ``layers`` (compute layers, topological order) from ``inputs`` to ``outputs``.

    ``initializer`` makes each parameter's tensor from its array and name (default: the bytes inside the
    model; ``sbrs build`` writes them to its weights file instead)."""
    nodes = [node for layer in layers for node in make_nodes(layer)]
    initializers: dict[str, onnx.TensorProto] = {}
    for layer in layers:
        for param in layer.params:
            if param.name not in initializers:
                initializers[param.name] = initializer(weights[param.digest], param.name)
    graph = helper.make_graph(
        nodes, name,
        [_value_info(n, s) for n, s in inputs],
        [_value_info(n, s) for n, s in outputs],
        initializer=list(initializers.values()),
    )
    opsets = [helper.make_opsetid(domain, version) for domain, version in sorted(opset_imports.items())]
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION, producer_name="sbrs")


def to_onnx(model: CnnModel) -> onnx.ModelProto:
    """The whole model as ONNX, computing exactly what the imported file computes."""
    return build_graph_model(
        model.compute_layers,
        [(n, model.tensors[n]) for n in model.graph_inputs],
        [(n, model.tensors[n]) for n in model.graph_outputs],
        model.weights, model.opset_imports, model.name,
    )
