"""Quantized and fp16 models as Table 2.1 models (issue 23, part 1; docs/QUANTIZED.md).

The zoo's MobileNetV2 and ResNet-18 at 64 px in every form of ``tools/quantize_models.py`` (QDQ per tensor, per
channel, with int8 activations; QOperator; dynamic int8; fp16 from onnxconverter-common and from
``onnxruntime.transformers.float16``, with float32 and float16 I/O), made at test time, and the committed
torchvision ones under tests/data/torchvision/quantized: each imports, rebuilds into a model equal to ONNX
Runtime running the file, and keeps every parameter of the file with its own element size.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from sbrs.errors import InputError
from sbrs.moc import derive_moc
from sbrs.model import import_model, import_onnx, memory_figures, params_bytes, to_onnx
from sbrs.model.canonical import needs_canonical
from sbrs.model.cnn import CnnModel, tensor_digest
from tests.conftest import ort_session
from tools.quantize_models import FORMS

QUANTIZED = Path(__file__).resolve().parents[1] / "data" / "torchvision" / "quantized"
COMMITTED = sorted(QUANTIZED.glob("*.onnx"))
ZOO = ("mobilenet_v2", "resnet18")
INTEGER_FORMS = ("qdq-per-tensor-u8", "qdq-per-channel-u8", "qdq-per-channel-s8", "qoperator", "dynamic")


def _frame(model: CnnModel, seed: int = 0) -> np.ndarray:
    spec = model.tensors[model.graph_inputs[0]]
    return np.random.default_rng(seed).standard_normal(spec.shape).astype(spec.dtype)


def _run(source: Path | onnx.ModelProto, frame: np.ndarray) -> np.ndarray:
    session = ort_session(source)
    return session.run(None, {session.get_inputs()[0].name: frame})[0]


def _initializers(path: Path) -> dict[str, np.ndarray]:
    """The file's initializers that some node reads, by content digest (a tensor stored twice counts once)."""
    model = onnx.load(path)
    read = {name for node in model.graph.node for name in node.input}
    return {tensor_digest(array): array for tensor in model.graph.initializer if tensor.name in read
            for array in [numpy_helper.to_array(tensor)]}


def _check(path: Path) -> CnnModel:
    model = import_onnx(path)
    frame = _frame(model)
    want, got = _run(path, frame), _run(to_onnx(model), frame)
    assert got.dtype == want.dtype and got.shape == want.shape
    # the same kernels on the same graph: equal, as plain ONNX Runtime on the file
    tolerance = 1e-5 * max(1.0, float(np.abs(want.astype(np.float64)).max()))
    assert float(np.abs(got.astype(np.float64) - want).max()) <= tolerance, path.name

    # parameter bytes are the file's initializers, each with its own element size (int8 weights one byte)
    initializers = _initializers(path)
    figures = memory_figures(model)
    if needs_canonical(onnx.load(path)):  # constant shape chains (int64) folded away or into new constants
        def learned(arrays: list[np.ndarray]) -> int:
            return sum(a.nbytes for a in arrays if a.dtype != np.int64)
        assert learned([model.weights[p.digest] for p in {p.digest: p for layer in model.layers
                                                          for p in layer.params}.values()]) == \
            learned(list(initializers.values()))
    else:
        assert figures.params_bytes == params_bytes([model]) == sum(a.nbytes for a in initializers.values())
        assert figures.parameters == sum(a.size for a in initializers.values() if a.dtype != np.int64)
    return model


def zoo_form_cases() -> list[object]:
    """Every zoo CNN in every form; MobileNetV2's (3-4 s each) in the slow tier but its per-channel s8 and QOperator
    forms (the depthwise int8 kernels of both representations), ResNet-18 keeping every form in the fast one."""
    fast = {("mobilenet_v2", "qdq-per-channel-s8"), ("mobilenet_v2", "qoperator")}
    return [pytest.param(name, form, id=f"{name}-{form}",
                         marks=[pytest.mark.slow] if name == "mobilenet_v2" and (name, form) not in fast else [])
            for name in ZOO for form in FORMS]


@pytest.mark.parametrize(("name", "form"), zoo_form_cases())
def test_zoo_cnn_in_every_form_imports_equal_to_onnx_runtime(quantized_zoo: Callable[..., Path],
                                                             name: str, form: str) -> None:
    model = _check(quantized_zoo(name, form))
    params = {p.digest: p for layer in model.layers for p in layer.params}.values()
    dtypes = {p.dtype for p in params}
    if form.startswith("fp16"):  # two bytes a weight
        assert sum(p.nbytes for p in params if p.dtype == "float16") > 0.99 * params_bytes([model])
        half_io = form.endswith("half-io")
        assert model.tensors[model.graph_inputs[0]].dtype == ("float16" if half_io else "float32")
        assert model.tensors[model.graph_outputs[0]].dtype == ("float16" if half_io else "float32")
    else:
        assert dtypes & {"int8", "uint8"}


@pytest.mark.parametrize("path", COMMITTED, ids=[p.stem for p in COMMITTED])
def test_committed_torchvision_exports_import_equal_to_onnx_runtime(path: Path) -> None:
    _check(path)


def test_the_committed_quantized_exports_are_there() -> None:
    stems = {p.stem for p in COMMITTED}
    assert {"mobilenet_v3_small-legacy-64-qdq-per-channel-s8",
            "mobilenet_v3_small-legacy-64-qoperator", "mobilenet_v3_small-legacy-64-dynamic",
            "mobilenet_v3_small-legacy-64-fp16-ort", "shufflenet_v2_x0_5-legacy-64-qdq-per-tensor-u8",
            "shufflenet_v2_x0_5-legacy-64-qoperator", "shufflenet_v2_x0_5-legacy-64-dynamic",
            "shufflenet_v2_x0_5-legacy-64-fp16-onnxconverter-half-io"} <= stems


@pytest.mark.parametrize("form", ["qdq-per-tensor-u8", "qdq-per-channel-u8", "qdq-per-channel-s8", "qdq-contrib-u8",
                                  "qdq-contrib-u16"])
def test_qdq_node_units_are_layers_with_quantized_tensors_and_integer_weights(
        quantized_zoo: Callable[..., Path], form: str) -> None:
    model = import_onnx(quantized_zoo("mobilenet_v2", form))
    convs = [layer for layer in model.layers if layer.op == "Conv"]
    assert len(convs) == 52 and all(layer.qdq is not None and layer.type == "convolutional" for layer in convs)
    # the Q/DQ nodes keep their domain: ONNX Runtime's own where its quantizer wrote them there
    domain = "com.microsoft" if "contrib" in form else ""
    assert all(node.domain == domain for layer in convs for node in (*layer.qdq.dequantize, layer.qdq.quantize)
               if node is not None)
    activation = {"s8": "int8", "16": "uint16"}.get(form[-2:], "uint8")  # and weights int8 in every form
    for layer in convs:
        assert layer.qdq is not None and layer.qdq.quantize is not None
        assert [model.tensors[t].dtype for t in (*layer.inputs, *layer.outputs)] == [activation, activation]
        weight = next(p for p in layer.params if len(p.shape) == 4)
        assert weight.dtype == "int8" and weight.nbytes == int(np.prod(weight.shape))  # one byte a weight
        assert layer.kernel == tuple(weight.shape[2:])
        scales = [p for p in layer.params if p.dtype == "float32"]
        assert {p.shape for p in scales} <= ({(), (1,), (weight.shape[0],)} if "per-tensor" not in form else {(), (1,)})
    # no float tensor between a DequantizeLinear and its op, or an op and its QuantizeLinear, is left
    assert not any(layer.op in ("QuantizeLinear", "DequantizeLinear") for layer in model.layers[2:-2])
    between = [e for e in model.edges if model.layer(e.src).qdq is not None and model.layer(e.dst).qdq is not None]
    assert between and all(e.spec.dtype == activation for e in between)


def test_qoperator_layers_and_onnx_runtime_ops() -> None:
    ops: dict[tuple[str, str], str] = {}
    for stem in ("shufflenet_v2_x0_5", "mobilenet_v3_small"):
        model = import_onnx(QUANTIZED / f"{stem}-legacy-64-qoperator.onnx")
        ops.update(((layer.domain, layer.op), layer.type) for layer in model.compute_layers)
        for layer in model.compute_layers:
            if layer.op == "QLinearConv":  # Table 2.1 from the integer weight (operand 3), one byte a weight
                weight = next(p for p in layer.params if p.name == layer.operands[3])
                assert weight.dtype == "int8" and layer.kernel == weight.shape[2:]
                assert layer.groups == layer.attributes.get("group", 1)
    assert ops == ops | {("", "QLinearConv"): "convolutional", ("com.microsoft", "QLinearGlobalAveragePool"): "pooling",
                         ("com.microsoft", "QLinearConcat"): "transformation", ("com.microsoft", "QLinearAdd"):
                         "arithmetic", ("com.microsoft", "QLinearMul"): "arithmetic", ("com.microsoft", "QGemm"): "fc",
                         ("", "QuantizeLinear"): "quantization", ("", "DequantizeLinear"): "quantization"}


def test_dynamic_quantization_leaves_no_layer_of_constants(quantized_zoo: Callable[..., Path]) -> None:
    """quantize_dynamic reshapes biases and scales with nodes of constants (after ONNX Runtime's
    pre-processing): the canonical form folds them."""
    model = import_onnx(QUANTIZED / "mobilenet_v3_small-legacy-64-dynamic.onnx")
    assert any(node.op_type == "Reshape" and all(i in {t.name for t in source.graph.initializer} for i in node.input)
               for source in [onnx.load(QUANTIZED / "mobilenet_v3_small-legacy-64-dynamic.onnx")]
               for node in source.graph.node)
    assert all(layer.inputs for layer in model.compute_layers)
    model = import_onnx(quantized_zoo("resnet18", "dynamic"))
    assert {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"} <= {layer.op for layer in model.layers}
    assert all(layer.inputs for layer in model.compute_layers)  # nothing computed from constants alone is left


def test_an_int8_layer_never_equals_its_float_twin_and_equal_quantized_layers_are_shared(
        quantized_zoo: Callable[..., Path]) -> None:
    fp32, int8 = (import_onnx(quantized_zoo("mobilenet_v2", form)) for form in ("fp32", "qdq-per-channel-u8"))
    moc = derive_moc({"fp32": fp32, "int8": int8, "int8-again": import_onnx(quantized_zoo("mobilenet_v2",
                                                                                         "qdq-per-channel-u8"))},
                     ("I", "O", "par"))
    for layer in moc.layers:
        assert not {"fp32", "int8"} <= set(layer.scenarios) or layer.type == "data", layer
    assert all({"int8", "int8-again"} <= set(layer.scenarios) and layer.reuse == "full"
               for layer in moc.layers if "int8" in layer.scenarios and layer.type != "data")
    # two heads on one backbone (the zoo's seeded weights), quantized on the same frames: one quantized backbone
    heads = {f"{classes} classes": import_onnx(quantized_zoo("mobilenet_v2", "qdq-per-channel-s8", classes=classes))
             for classes in (1000, 10)}
    moc = derive_moc(heads, ("I", "O", "par"))
    shared = [layer for layer in moc.layers if len(layer.scenarios) == 2 and layer.type != "data"]
    assert len(shared) > 60 and all("par" not in layer.control for layer in shared)  # equal weights and scales
    assert sum(layer.op == "Conv" and layer.qdq is not None for layer in shared) == 52  # every convolution
    assert params_bytes(heads.values()) < sum(params_bytes([m]) for m in heads.values()) * 0.7


def test_rebuilding_a_quantized_scenario_from_the_moc_gives_it_back(quantized_zoo: Callable[..., Path]) -> None:
    from sbrs.moc.rebuild import model_differences, rebuild_scenario

    model = import_onnx(quantized_zoo("resnet18", "qdq-per-channel-u8"))
    moc = derive_moc({"int8": model}, ("I", "O", "par"))
    weights = {digest: model.weights[digest] for digest in model.weights}
    rebuilt = rebuild_scenario(moc, "int8", weights)
    assert not [d for d in model_differences(model, rebuilt) if "name" not in d]
    frame = _frame(model)
    assert np.array_equal(_run(to_onnx(rebuilt), frame), _run(to_onnx(model), frame))


# -- refusals and graph order -------------------------------------------------------------------------------

def _graph(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], opsets: dict[str, int] | None = None
           ) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                    for d, v in (opsets or {"": 17}).items()])
    model.ir_version = 8
    return model


SCALE = [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(0, np.uint8), "z")]


@pytest.mark.parametrize(("nodes", "message"), [
    ([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
      helper.make_node("QLinearWhere", ["q", "s", "z"], ["r"], name="where", domain="com.microsoft"),
      helper.make_node("DequantizeLinear", ["r", "s", "z"], ["y"], name="dq")],
     r"m\.onnx: node 'where': unsupported op 'com\.microsoft::QLinearWhere' \(an ONNX Runtime op sbrs does not "
     r"run: export without ONNX Runtime's optimizations; of that domain only the quantized ops DequantizeLinear, "
     r"QGemm, .* run, see docs/QUANTIZED\.md\)$"),
    ([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
      helper.make_node("QLinearReduceMean", ["q", "s", "z", "s", "z"], ["r"], name="mean", domain="com.microsoft"),
      helper.make_node("DequantizeLinear", ["r", "s", "z"], ["y"], name="dq")],
     r"node 'mean': unsupported op 'com\.microsoft::QLinearReduceMean' \(an ONNX Runtime op"),
])
def test_unsupported_quantization_ops_are_refused_in_one_line_naming_file_and_node(
        nodes: list[onnx.NodeProto], message: str, tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_graph(nodes, SCALE, {"": 17, "com.microsoft": 1}), path)
    with pytest.raises(InputError, match=message) as error:
        import_onnx(path)
    assert "\n" not in str(error.value) and "newer opset" not in str(error.value)


def test_a_standard_quantization_op_sbrs_lacks_gets_a_quantization_hint() -> None:
    """No standard ONNX quantization op is unsupported today; one a later opset adds is refused with a hint
    about quantization, not about folding or opsets."""
    from sbrs.model.onnx_import import _refuse_unsupported

    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("QLinearMystery", ["q"], ["m"], name="odd"),
             helper.make_node("DequantizeLinear", ["m", "s", "z"], ["y"], name="dq")]
    with pytest.raises(InputError, match=r"^m\.onnx: node 'odd': unsupported op 'QLinearMystery' \(a quantization "
                                         r"op sbrs does not support; quantize with onnxruntime\.quantization's QDQ"):
        _refuse_unsupported(_graph(nodes, SCALE), "m.onnx")


CHAIN = [helper.make_node("Relu", ["x"], ["a"], name="a"), helper.make_node("Sigmoid", ["a"], ["b"], name="b"),
         helper.make_node("Add", ["a", "b"], ["c"], name="c"), helper.make_node("Tanh", ["c"], ["y"], name="y")]


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.permutations(range(len(CHAIN))))
def test_nodes_in_any_order_import_as_the_sorted_graph(order: list[int]) -> None:
    """onnxruntime.transformers.float16 appends its input Casts at the end of the graph: the import sorts the
    nodes (stable) instead of refusing the graph, and the model is the sorted one's."""
    want = import_model(_graph(CHAIN, []))
    got = import_model(_graph([CHAIN[k] for k in order], []))
    assert [layer.name for layer in got.layers] == [layer.name for layer in want.layers]
    assert got.edges == want.edges


def test_a_cycle_is_refused_in_one_line() -> None:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="first"), helper.make_node("Relu", ["a"], ["b"], name="r"),
             helper.make_node("Relu", ["a"], ["y"], name="out")]
    with pytest.raises(InputError, match=r"^m\.onnx: node 'first': part of a cycle"):
        import_model(_graph(nodes, []), source="m.onnx")


@settings(max_examples=20, deadline=None, derandomize=True)
@given(scales=st.lists(st.floats(1e-3, 0.5), min_size=3, max_size=3), points=st.lists(st.integers(0, 255),
       min_size=3, max_size=3), signed=st.booleans(), per_channel=st.booleans(), seed=st.integers(0, 2**16),
       contrib=st.booleans())
def test_hand_written_qdq_chains_group_into_units_and_equal_onnx_runtime(scales: list[float], points: list[int],
                                                                        signed: bool, per_channel: bool,
                                                                        seed: int, contrib: bool) -> None:
    """x → Q → [DQ → Conv(DQ(w)) → Q] → [DQ → Relu → Q] → DQ → y: two node units, one standalone Q and DQ;
    the imported model runs exactly as ONNX Runtime runs the file, on 1-byte tensors between the units.
    ``contrib``: every Q and DQ in ONNX Runtime's domain (``UseQDQContribOps``), the same units."""
    rng = np.random.default_rng(seed)
    dtype = np.int8 if signed else np.uint8
    zero = [np.array(p - 128 if signed else p, dtype) for p in points]
    channels = 6
    weight_scale = (rng.uniform(0.001, 0.05, channels) if per_channel else np.array(0.02)).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(s, np.float32), f"s{k}") for k, s in enumerate(scales)]
    inits += [numpy_helper.from_array(z, f"z{k}") for k, z in enumerate(zero)]
    inits += [numpy_helper.from_array(rng.integers(-127, 128, (channels, 4, 3, 3)).astype(np.int8), "w"),
              numpy_helper.from_array(weight_scale, "ws"),
              numpy_helper.from_array(np.zeros(weight_scale.shape, np.int8), "wz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s0", "z0"], ["q0"]),
             helper.make_node("DequantizeLinear", ["q0", "s0", "z0"], ["f0"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["fw"], **({"axis": 0} if per_channel else {})),
             helper.make_node("Conv", ["f0", "fw"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("QuantizeLinear", ["c", "s1", "z1"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["f1"]),
             helper.make_node("Relu", ["f1"], ["r"], name="relu"),
             helper.make_node("QuantizeLinear", ["r", "s2", "z2"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "s2", "z2"], ["y"])]
    if contrib:
        for node in nodes:
            if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
                node.domain = "com.microsoft"
    source = _graph(nodes, inits, {"": 17, "com.microsoft": 1} if contrib else None)
    model = import_model(source)
    assert [layer.op for layer in model.compute_layers] == ["QuantizeLinear", "Conv", "Relu", "DequantizeLinear"]
    assert {layer.domain for layer in model.compute_layers if layer.qdq is None} == \
        {"com.microsoft" if contrib else ""}
    conv, relu = model.layer("conv"), model.layer("relu")
    assert conv.qdq is not None and relu.qdq is not None and conv.qdq.quantize is not None
    assert [d is not None for d in conv.qdq.dequantize] == [True, True]
    assert {e.spec.dtype for e in model.edges if e.src in ("conv", "relu") or e.dst in ("conv", "relu")} == \
        {np.dtype(dtype).name}
    frame = np.random.default_rng(seed).standard_normal((1, 4, 8, 8)).astype(np.float32)
    assert np.array_equal(_run(to_onnx(model), frame), _run(source, frame))


def _contrib(op: str, inputs: list[str], **attributes: object) -> onnx.NodeProto:
    return helper.make_node(op, inputs, ["r"], name=op.lower(), domain="com.microsoft", **attributes)


QX = ["q", "s", "z"]  # the quantized input with its scale and zero point
CONTRIB_CASES: dict[str, tuple[list[onnx.NodeProto], list[onnx.TensorProto]]] = {
    "QLinearAdd": ([_contrib("QLinearAdd", [*QX, "c", "s", "z", "s2", "z"])],
                   [numpy_helper.from_array(np.arange(4, dtype=np.uint8).reshape(1, 4, 1, 1) * 9, "c")]),
    "QLinearMul": ([_contrib("QLinearMul", [*QX, *QX, "s2", "z"])], []),
    "QLinearSigmoid": ([_contrib("QLinearSigmoid", [*QX, "s2", "z"])], []),
    "QLinearLeakyRelu": ([_contrib("QLinearLeakyRelu", [*QX, "s2", "z"], alpha=0.1)], []),
    "QLinearSoftmax": ([_contrib("QLinearSoftmax", [*QX, "s2", "z"], axis=-1, opset=13)], []),
    "QLinearGlobalAveragePool": ([_contrib("QLinearGlobalAveragePool", [*QX, "s2", "z"], channels_last=0)], []),
    "QLinearAveragePool": ([_contrib("QLinearAveragePool", [*QX, "s2", "z"], kernel_shape=[3, 3], strides=[2, 2],
                                     pads=[1, 1, 1, 1], count_include_pad=1)], []),
    "QLinearConcat": ([_contrib("QLinearConcat", ["s2", "z", *QX, *QX], axis=1)], []),
    "QGemm": ([helper.make_node("Flatten", ["q"], ["f"]),
               helper.make_node("QGemm", ["f", "s", "z", "w", "ws", "wz", "", "s2", "z"], ["r"], name="qgemm",
                                domain="com.microsoft", transB=1)],
              [numpy_helper.from_array(np.random.default_rng(3).integers(-127, 128, (5, 256)).astype(np.int8), "w"),
               numpy_helper.from_array(np.array(0.01, np.float32), "ws"),
               numpy_helper.from_array(np.array(0, np.int8), "wz")]),
}


@pytest.mark.parametrize("op", sorted(CONTRIB_CASES))
def test_every_supported_onnx_runtime_op_imports_and_runs_as_onnx_runtime_runs_it(op: str) -> None:
    from sbrs.model.cnn import CONTRIB_LAYER_TYPES

    assert set(CONTRIB_CASES) == set(CONTRIB_LAYER_TYPES) - {"QuantizeLinear", "DequantizeLinear"}  # below
    nodes, inits = CONTRIB_CASES[op]
    inits = [*SCALE, numpy_helper.from_array(np.array(0.1, np.float32), "s2"), *inits]
    source = _graph([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]), *nodes,
                     helper.make_node("DequantizeLinear", ["r", "s2", "z"], ["y"])], inits,
                    {"": 17, "com.microsoft": 1})
    model = import_model(source)
    layer = model.layer(nodes[-1].name)
    assert (layer.domain, layer.op, layer.type) == ("com.microsoft", op, CONTRIB_LAYER_TYPES[op])
    assert all(model.tensors[t].dtype == "uint8" for t in (*layer.inputs, *layer.outputs))
    frame = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    want = _run(source, frame)
    assert model.tensors[model.graph_outputs[0]].shape == want.shape
    assert np.array_equal(_run(to_onnx(model), frame), want)


@pytest.mark.parametrize("element", [TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT8E4M3FN])
def test_four_bit_and_eight_bit_float_tensors_are_refused_in_one_line_naming_the_tensor(element: int,
                                                                                         tmp_path: Path) -> None:
    """onnxruntime.quantization writes 4-bit weights (``weight_type=QuantType.QInt4``) as int4 initializers read by
    com.microsoft DequantizeLinear: the plan counts bytes by numpy element size, so such a tensor is refused by
    name before any op is looked at."""
    weights = helper.make_tensor("w4", element, [4, 4, 1, 1], [1] * 16)
    nodes = [helper.make_node("DequantizeLinear", ["w4", "s"], ["w"], name="dq", domain="com.microsoft"),
             helper.make_node("Conv", ["x", "w"], ["y"], name="conv")]
    path = tmp_path / "m.onnx"
    onnx.save(_graph(nodes, [weights, SCALE[0]], {"": 21, "com.microsoft": 1}), path)
    kind = TensorProto.DataType.Name(element).lower()
    with pytest.raises(InputError, match=rf"m\.onnx: tensor 'w4' is {kind}: sbrs runs tensors of numpy's types") as error:
        import_onnx(path)
    assert "\n" not in str(error.value)
