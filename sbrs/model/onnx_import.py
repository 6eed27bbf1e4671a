"""ONNX import into the CNN model of thesis Section 2.1 (``CnnModel``).

Pass order: read (weights mapped, ``sbrs.model.onnx_file``) → fix the input shape the app declares → refuse
ops of foreign domains → canonical form where needed (``sbrs.model.canonical``) → refuse unsupported ops →
fold ``Constant`` nodes → ONNX shape inference (strict) → layers (Table 2.1 attributes derived per op) and
edges (one per producer, consumer and tensor). Every failure is an ``InputError`` naming the file and, where
one is at fault, the node. A file's weights are held once, as views of the mapped file (or of the canonical
form's weight file), until the ``CnnModel`` owns them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from sbrs.errors import InputError
from sbrs.model.canonical import canonicalize, needs_canonical
from sbrs.model.cnn import (
    CONTRIB_DOMAIN,
    CONTRIB_LAYER_TYPES,
    INPUT_OP,
    OUTPUT_OP,
    SUPPORTED_OPS,
    CnnModel,
    Layer,
    ParamRef,
    TensorSpec,
    WeightStore,
    layer_edges,
    layer_type,
)
from sbrs.model.onnx_file import is_placeholder, read_onnx
from sbrs.model.quantized import group_qdq, is_surrogate_tensor, shape_surrogates

_ONNX_DOMAINS = ("", "ai.onnx")


def load_onnx(path: str | Path) -> onnx.ModelProto:
    """Read an ONNX file, turning every failure into a one-line ``InputError`` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such ONNX file", file=str(path))
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # protobuf raises several unrelated types on garbage
        raise InputError(f"not a readable ONNX model ({type(exc).__name__}: {exc})", file=str(path)) from None
    if not model.graph.node:  # protobuf parses an empty (or all-unknown) file as an empty model
        what = "an empty file" if path.stat().st_size == 0 else "a model without a graph"
        raise InputError(f"not an ONNX model: {what} (export the model again)", file=str(path))
    return model


def import_onnx(path: str | Path, *, name: str | None = None,
                input_shapes: dict[str, Sequence[int]] | None = None) -> CnnModel:
    """Import an ONNX file. ``input_shapes`` fixes symbolic input dimensions (e.g. a dynamic batch)."""
    loaded = read_onnx(path)
    # the model was read for this call alone: import it in place
    return import_model(loaded.model, source=str(path), name=name, input_shapes=input_shapes, copy=False,
                        arrays=loaded.arrays)


def import_model(model: onnx.ModelProto, *, source: str = "<memory>", name: str | None = None,
                 input_shapes: dict[str, Sequence[int]] | None = None, copy: bool = True,
                 threads: int | None = None, arrays: Mapping[str, np.ndarray] | None = None) -> CnnModel:
    """Import an in-memory ONNX model (``source`` names it in messages). ``copy=False`` lets the import change
    ``model`` (fold constants, fix shapes) instead of working on a copy of it and its weights. ``threads``:
    the app's ``runtime.threads``, for the ONNX Runtime session the canonical form may need. ``arrays``: the
    values of ``model``'s placeholder initializers (``sbrs.model.onnx_file.read_onnx``)."""
    if copy:
        model = _copy(model)
    values = dict(arrays or {})
    _refuse_unsupported_opset(model, source)
    _set_input_shapes(model, input_shapes or {}, source)
    _refuse_unsupported_types(model, source)
    _refuse_unsupported(model, source, foreign_only=True)  # ONNX Runtime could not even load those to fold
    if needs_canonical(model):
        model, values = canonicalize(model, values, source, threads)
    _refuse_unsupported(model, source)
    _fold_constants(model)
    _check_topology(model, source)
    inferred = _infer_shapes(model, source)
    return _build(inferred, values, source, name or Path(source).stem)


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


#: The oldest standard operator set ONNX Runtime guarantees to run (older ones load, then lack kernels: Relu-1).
OLDEST_OPSET = 7


def _refuse_unsupported_opset(model: onnx.ModelProto, source: str) -> None:
    """One-line refusal of a standard operator set that ONNX Runtime cannot run: older than it guarantees, or
    newer than the installed ``onnx`` knows (shape inference, then ONNX Runtime's load, fail on those; ``sbrs
    check`` passed and ``sbrs build`` stopped with an internal error)."""
    opsets = {entry.domain or "": int(entry.version) for entry in model.opset_import}
    opset = opsets.get("", opsets.get("ai.onnx"))
    newest = onnx.defs.onnx_opset_version()
    if opset is not None and not OLDEST_OPSET <= opset <= newest:
        raise InputError(f"the model uses ONNX operator set {opset}; sbrs runs {OLDEST_OPSET} to {newest} (convert "
                         "it with onnx.version_converter.convert_version, or export it again)", file=source)


def _refuse_unsupported(model: onnx.ModelProto, source: str, *, foreign_only: bool = False) -> None:
    """One-line refusal of the first node whose op is not supported (``foreign_only``: only ops of other
    domains than standard ONNX, which the canonical form cannot fold away, except ONNX Runtime's supported
    quantized ops)."""
    for index, node in enumerate(model.graph.node):
        supported = layer_type(node.domain, node.op_type) is not None or (node.domain in _ONNX_DOMAINS and (
            foreign_only or node.op_type == "Constant"))  # before the canonical form, any standard op may fold
        if supported:
            continue
        label = node.name or f"#{index}"
        op = f"{node.domain}::{node.op_type}" if node.domain not in _ONNX_DOMAINS else node.op_type
        raise InputError(f"node '{label}': unsupported op '{op}' ({_refusal_hint(node)})", file=source)


#: Element types sbrs holds tensors of: numpy's own, one or more bytes an element.
_ELEMENT_TYPES = frozenset(getattr(onnx.TensorProto, name) for name in (
    "FLOAT", "FLOAT16", "DOUBLE", "INT8", "UINT8", "INT16", "UINT16", "INT32", "UINT32", "INT64", "UINT64", "BOOL"))


def _refuse_unsupported_types(model: onnx.ModelProto, source: str) -> None:
    """One-line refusal of the first initializer or declared tensor of an element type sbrs does not hold
    (4-bit integers, 8-bit and 4-bit floats, bfloat16, strings): the plan counts bytes by numpy element size."""
    graph = model.graph
    declared = [(t.name, t.data_type) for t in graph.initializer]
    declared += [(v.name, v.type.tensor_type.elem_type) for v in (*graph.input, *graph.output, *graph.value_info)
                 if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type]
    for name, element in declared:
        if element not in _ELEMENT_TYPES:
            kind = onnx.TensorProto.DataType.Name(element).lower()
            raise InputError(f"tensor '{name}' is {kind}: sbrs runs tensors of numpy's types, one byte an element or "
                             "more (for 4-bit weights quantize to 8 bits, e.g. weight_type=QuantType.QInt8)",
                             file=source)


def _refusal_hint(node: onnx.NodeProto) -> str:
    """Why ``node`` is refused and what would help, in a few words."""
    if node.domain == CONTRIB_DOMAIN:
        return ("an ONNX Runtime op sbrs does not run: export without ONNX Runtime's optimizations; of that domain "
                f"only the quantized ops {', '.join(sorted(CONTRIB_LAYER_TYPES))} run, see docs/QUANTIZED.md")
    if node.domain not in _ONNX_DOMAINS:
        return ("an op of another domain than standard ONNX: export with standard ops only (e.g. no "
                "operator_export_type=ONNX_ATEN_FALLBACK, no ORT-optimized files)")
    if "Quantize" in node.op_type or node.op_type.startswith("QLinear") or node.op_type.endswith("Integer"):
        return ("a quantization op sbrs does not support; quantize with onnxruntime.quantization's QDQ or "
                "QOperator format, or dynamic quantization (docs/QUANTIZED.md)")
    return ("its inputs are not constant once the app's input shape is fixed, so it could not be folded; "
            f"re-export with a newer opset or without that operation; supported: {', '.join(sorted(SUPPORTED_OPS))}")


def _fold_constants(model: onnx.ModelProto) -> None:
    """``Constant`` nodes become initializers, so their values are parameters like any other."""
    graph = model.graph
    kept = []
    for node in graph.node:
        if node.op_type != "Constant":
            kept.append(node)
            continue
        attribute = node.attribute[0]
        value = onnx.helper.get_attribute_value(attribute)
        if isinstance(value, onnx.TensorProto):
            array = numpy_helper.to_array(value)
        else:
            array = np.asarray(value, dtype=np.float32 if "float" in attribute.name else np.int64)
        graph.initializer.append(numpy_helper.from_array(array, node.output[0]))
    del graph.node[:]
    graph.node.extend(kept)


def _check_topology(model: onnx.ModelProto, source: str) -> None:
    """Sort the nodes topologically (stable: a sorted graph keeps its order), and refuse an operand that no
    node, initializer or graph input provides, or a cycle.

    The ONNX standard asks for sorted nodes, but ONNX Runtime runs unsorted graphs, and
    ``onnxruntime.transformers.float16`` appends the Casts of its float32 inputs at the end of the graph."""
    graph = model.graph
    available = {init.name for init in graph.initializer} | {value.name for value in graph.input}
    produced: set[str] = set()
    names: set[str] = set()
    for index, node in enumerate(graph.node):
        # ONNX Runtime refuses both (SSA, unique node names): the build's sessions failed with an internal error
        label = node.name or f"#{index}"
        if node.name and node.name in names:
            raise InputError(f"node '{label}': two nodes have this name (ONNX Runtime refuses such a model; give "
                             "every node a name of its own)", file=source)
        names.add(node.name)
        for output in node.output:
            if output and (output in produced or output in available):
                raise InputError(f"node '{label}': its output '{output}' is defined twice (by another node, an "
                                 "initializer or a graph input; ONNX Runtime refuses such a model)", file=source)
            produced.add(output)
    for index, node in enumerate(graph.node):
        for operand in node.input:
            if operand and operand not in available and operand not in produced:
                raise InputError(f"node '{node.name or f'#{index}'}': input '{operand}' is produced by no node "
                                 "and is neither an initializer nor a graph input", file=source)
    pending = list(graph.node)
    ordered: list[onnx.NodeProto] = []
    while pending:
        waiting = []
        for node in pending:
            if all(not operand or operand in available for operand in node.input):
                ordered.append(node)
                available.update(node.output)
            else:
                waiting.append(node)
        if len(waiting) == len(pending):
            node = waiting[0]
            raise InputError(f"node '{node.name or node.op_type}': part of a cycle (its inputs depend on its own "
                             "outputs)", file=source)
        pending = waiting
    if any(a is not b for a, b in zip(ordered, graph.node, strict=True)):
        sorted_nodes = [onnx.NodeProto() for _ in ordered]
        for target, node in zip(sorted_nodes, ordered, strict=True):
            target.CopyFrom(node)
        del graph.node[:]
        graph.node.extend(sorted_nodes)


def _data_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    initializers = {init.name for init in model.graph.initializer}
    return [value for value in model.graph.input if value.name not in initializers]


def _set_input_shapes(model: onnx.ModelProto, shapes: dict[str, Sequence[int]], source: str) -> None:
    for value in _data_inputs(model):
        if value.name not in shapes:
            continue
        wanted = list(shapes[value.name])
        tensor_type = value.type.tensor_type
        if not tensor_type.HasField("shape"):  # no shape at all: take the app's
            tensor_type.shape.dim.extend(onnx.TensorShapeProto.Dimension() for _ in wanted)
        dims = tensor_type.shape.dim
        if len(dims) != len(wanted):
            raise InputError(f"input '{value.name}' has rank {len(dims)}, the app declares shape {wanted}",
                             file=source)
        for index, (dim, size) in enumerate(zip(dims, wanted, strict=True)):
            # named (dim_param), unnamed and -1/0 dims (as paddle2onnx writes dynamic ones) take the app's size
            if dim.HasField("dim_value") and dim.dim_value > 0 and dim.dim_value != size:
                hint = ("export the model for that shape, or give its scenario input_size: [H, W] (frames are "
                        "resized to it)" if index >= 2 and len(wanted) == 4 else
                        "export the model for that shape or declare its size in the app")
                raise InputError(f"input '{value.name}' dim {index} is {dim.dim_value} in the model, the app's "
                                 f"input.shape says {size} (shape {wanted}); {hint}", file=source)
        for dim, size in zip(dims, wanted, strict=True):
            dim.ClearField("dim_param")
            dim.dim_value = size
    # Stale intermediate shapes from the exporter would contradict the fixed input: infer them anew.
    del model.graph.value_info[:]


SHAPE_INFERENCE_KEEPS = 1024
"""Initializers of at most this many elements go to shape inference as they are (shape tensors, scales);
larger ones (weights) only as their type and shape."""


def _infer_shapes(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    """ONNX shape inference, on a copy of the graph without its weights: the weights' shapes are all it needs,
    and inferring on the full model serialises every weight again (0.59 s and a transient copy of the drone
    app's 225 MB). The inferred ``value_info`` and outputs are written back into ``model``, which is returned."""
    try:
        inferred = onnx.shape_inference.infer_shapes(_without_weights(model), check_type=True, strict_mode=True,
                                                     data_prop=True)
    except Exception as exc:
        message = " ".join(str(exc).split())
        raise InputError(f"ONNX shape inference failed: {message[:300]}", file=source) from None
    del model.graph.value_info[:]
    model.graph.value_info.extend(v for v in inferred.graph.value_info if not is_surrogate_tensor(v.name))
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    return model


def _without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every initializer above ``SHAPE_INFERENCE_KEEPS`` elements turned into a graph input of
    the same type and shape (the nodes, small initializers and metadata are copied; the weights are not)."""
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    graph, target = model.graph, light.graph
    target.name = graph.name
    opsets = {entry.domain or "": int(entry.version) for entry in model.opset_import}
    nodes, surrogate_initializers = shape_surrogates(
        graph.node, opsets.get("", opsets.get("ai.onnx", 0)), {t.name: t.data_type for t in graph.initializer})
    target.node.extend(nodes)
    target.initializer.extend(surrogate_initializers)
    target.input.extend(graph.input)
    target.output.extend(graph.output)
    target.value_info.extend(graph.value_info)
    inputs = {value.name for value in graph.input}
    for tensor in graph.initializer:
        if math.prod(tensor.dims) <= SHAPE_INFERENCE_KEEPS and not is_placeholder(tensor):
            target.initializer.append(tensor)
        elif tensor.name not in inputs:
            target.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    return light


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
            for d in value.type.tensor_type.shape.dim]


def _spec(value: onnx.ValueInfoProto, source: str, role: str) -> TensorSpec:
    tensor_type = value.type.tensor_type
    if not tensor_type.HasField("shape") or not tensor_type.elem_type:
        raise InputError(f"tensor '{value.name}' ({role}): shape unknown after ONNX shape inference", file=source)
    dims = _dims(value)
    if any(not isinstance(d, int) or d <= 0 for d in dims):
        raise InputError(f"tensor '{value.name}' ({role}): shape {dims} is not static after ONNX shape inference;"
                         " declare the input shape in the app", file=source)
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)).name
    return TensorSpec(tuple(int(d) for d in dims), dtype)


def _attribute_values(node: onnx.NodeProto) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attribute in node.attribute:
        value = onnx.helper.get_attribute_value(attribute)
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, list):
            value = [v.decode() if isinstance(v, bytes) else v for v in value]
        elif isinstance(value, np.generic):
            value = value.item()
        values[attribute.name] = value
    return values


def _hw(shape: Sequence[int]) -> tuple[int, int]:
    """(height, width) of a tensor: NCHW → (H, W), NCW → (1, W), (N, K) → (1, K)."""
    if len(shape) >= 4:
        return int(shape[-2]), int(shape[-1])
    if len(shape) >= 2:
        return 1, int(shape[-1])
    return 1, 1


def _pair(values: Sequence[int] | None, default: int) -> tuple[int, int]:
    if not values:
        return default, default
    return (int(values[0]), int(values[1])) if len(values) >= 2 else (1, int(values[0]))


def _pads4(values: Sequence[int] | None) -> tuple[int, int, int, int]:
    """ONNX pads [x1_begin, x2_begin, x1_end, x2_end] → (top, left, bottom, right)."""
    if not values:
        return 0, 0, 0, 0
    if len(values) == 2:  # 1-D: [begin, end] along the width
        return 0, int(values[0]), 0, int(values[1])
    half = len(values) // 2
    return int(values[half - 2]), int(values[half - 1]), int(values[-2]), int(values[-1])


def _same_pads(in_hw: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
               dilation: tuple[int, int], upper: bool) -> tuple[int, int, int, int]:
    begin, end = [], []
    for size, k, s, d in zip(in_hw, kernel, stride, dilation, strict=True):
        total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begin.append(small if upper else large)
        end.append(large if upper else small)
    return begin[0], begin[1], end[0], end[1]


#: Operand position of the weight of the convolutions whose weight is not their second operand.
_WEIGHT_POSITION = {"QLinearConv": 3}


def _table_2_1(node: onnx.NodeProto, attrs: dict[str, Any], in_shapes: list[tuple[int, ...]],
               params: dict[str, np.ndarray]) -> dict[str, Any]:
    """Kernel, stride, pads, dilation and groups of thesis Table 2.1 for one node."""
    op = node.op_type
    in_hw = _hw(in_shapes[0]) if in_shapes else (1, 1)
    derived: dict[str, Any] = {}
    if op in ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "QLinearConv", "ConvInteger", "QLinearAveragePool"):
        kernel_shape = attrs.get("kernel_shape")
        weight = _WEIGHT_POSITION.get(op, 1)
        if kernel_shape is None and "Conv" in op and len(node.input) > weight and node.input[weight] in params:
            kernel_shape = list(params[node.input[weight]].shape[2:])
        kernel = _pair(kernel_shape, 1)
        stride = _pair(attrs.get("strides"), 1)
        dilation = _pair(attrs.get("dilations"), 1)
        auto_pad = attrs.get("auto_pad", "NOTSET")
        if auto_pad in ("SAME_UPPER", "SAME_LOWER") and op != "ConvTranspose":
            pads = _same_pads(in_hw, kernel, stride, dilation, auto_pad == "SAME_UPPER")
        else:
            pads = _pads4(attrs.get("pads"))
        derived.update(kernel=kernel, stride=stride, pads=pads, dilation=dilation, groups=int(attrs.get("group", 1)))
    elif op in ("GlobalAveragePool", "GlobalMaxPool", "Gemm", "MatMul", "QLinearGlobalAveragePool", "QGemm",
                "QLinearMatMul", "MatMulInteger"):
        derived["kernel"] = in_hw  # Table 2.1: kh = X.h, kw = X.w for FC and global pooling
    elif op == "Slice" and len(node.input) > 4 and node.input[3] in params and node.input[4] in params:
        rank = len(in_shapes[0]) if in_shapes else 4
        steps = {int(axis) % rank: int(step) for axis, step in zip(params[node.input[3]].ravel(),
                                                                      params[node.input[4]].ravel(), strict=True)}
        height_step = steps.get(rank - 2, 1) if rank >= 4 else 1
        derived["stride"] = (height_step, steps.get(rank - 1, 1))
    elif op == "Pad":
        pads = attrs.get("pads")
        if pads is None and len(node.input) > 1 and node.input[1] in params:
            pads = [int(v) for v in params[node.input[1]].ravel()]
        derived["pads"] = _pads4(pads)
    return derived


def _build(model: onnx.ModelProto, values: Mapping[str, np.ndarray], source: str, name: str) -> CnnModel:
    graph = model.graph
    arrays: dict[str, np.ndarray] = {}
    for init in graph.initializer:
        if is_placeholder(init):
            if init.name not in values:
                raise InputError(f"initializer '{init.name}' is external data that was not read", file=source)
            arrays[init.name] = values[init.name]
            continue
        try:
            arrays[init.name] = numpy_helper.to_array(init)
        except ValueError:  # numpy cannot shape its data as its dims say: the file's header does not fit its data
            raise InputError(f"initializer '{init.name}': its data does not hold a {list(init.dims)} tensor of type "
                             f"{onnx.TensorProto.DataType.Name(init.data_type)}", file=source) from None
        init.ClearField("raw_data")  # the array is a copy: free the parsed bytes now, one tensor at a time
    weights = WeightStore()
    refs = {key: ParamRef(key, tuple(int(d) for d in a.shape), a.dtype.name, weights.add(a))
            for key, a in arrays.items()}

    specs: dict[str, TensorSpec] = {}
    for value in _data_inputs(model):
        specs[value.name] = _spec(value, source, "graph input")
    known = {value.name: value for value in [*graph.value_info, *graph.output]}

    producer: dict[str, str] = {}
    layers: list[Layer] = []
    used_names: set[str] = set()

    def unique(base: str) -> str:
        candidate, suffix = base, 1
        while candidate in used_names:
            candidate, suffix = f"{base}_{suffix}", suffix + 1
        used_names.add(candidate)
        return candidate

    for value_name, spec in specs.items():
        layer_name = unique(f"input:{value_name}")
        layers.append(Layer(layer_name, INPUT_OP, "data", (), (value_name,), (), (spec.shape,)))
        producer[value_name] = layer_name

    for index, node in enumerate(graph.node):
        label = unique(node.name or f"{node.op_type}_{index}")
        outputs = []
        for output in node.output:
            if not output:
                continue
            if output not in known:
                raise InputError(f"tensor '{output}' (output of node '{label}' {node.op_type}): shape unknown"
                                 " after ONNX shape inference", file=source)
            specs[output] = _spec(known[output], source, f"output of node '{label}' {node.op_type}")
            producer[output] = label
            outputs.append(output)
        data_inputs = [o for o in node.input if o and o not in arrays]
        in_shapes = [specs[o].shape for o in data_inputs]
        attrs = _attribute_values(node)
        node_params = tuple(dict.fromkeys(refs[o] for o in node.input if o in arrays))
        layers.append(Layer(
            name=label,
            op=node.op_type,
            type=layer_type(node.domain, node.op_type) or "",
            operands=tuple(node.input),
            outputs=tuple(node.output),
            input_shapes=tuple(in_shapes),
            output_shapes=tuple(specs[o].shape for o in outputs),
            attributes=attrs,
            params=node_params,
            domain=node.domain,
            **_table_2_1(node, attrs, in_shapes, arrays),
        ))

    graph_outputs = tuple(value.name for value in graph.output)
    for output in graph_outputs:
        if output not in producer:
            raise InputError(f"graph output '{output}' is produced by no node", file=source)
        layer_name = unique(f"output:{output}")
        layers.append(Layer(layer_name, OUTPUT_OP, "data", (output,), (), (specs[output].shape,), ()))

    layers, specs = group_qdq(layers, specs, graph_outputs)
    edges = layer_edges(layers, specs)

    opsets = {entry.domain or "": int(entry.version) for entry in model.opset_import}
    return CnnModel(
        name=name,
        source=source,
        opset=opsets.get("", opsets.get("ai.onnx", 0)),
        layers=tuple(layers),
        edges=tuple(edges),
        tensors=specs,
        graph_inputs=tuple(v.name for v in _data_inputs(model)),
        graph_outputs=graph_outputs,
        opset_imports=opsets,
        weights=weights,
    )
