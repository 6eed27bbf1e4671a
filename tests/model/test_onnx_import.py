"""ONNX import: every supported op imports, shapes match ONNX shape inference, the rebuilt graph is exact."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sbrs.errors import InputError
from sbrs.model import SUPPORTED_OPS, import_model, import_onnx, memory_figures, params_bytes, to_onnx
from tests.conftest import ort_session

RNG = np.random.default_rng(7)


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], shape: list[int | str],
           opset: int = 17, output_shape: list[int] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _w(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


X = [1, 4, 8, 8]
# (op, nodes, initializers, input shape): each model maps input "x" to output "y".
OP_CASES: dict[str, tuple[list[onnx.NodeProto], list[onnx.TensorProto], list[int]]] = {
    "Conv": ([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 0, 2, 1], strides=[2, 1], group=2,
                               dilations=[1, 2])], [_init("w", _w(6, 2, 3, 3)), _init("b", _w(6))], X),
    "ConvTranspose": ([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])],
                      [_init("w", _w(4, 3, 4, 4))], X),
    "BatchNormalization": ([helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"])],
                           [_init("g", _w(4)), _init("b", _w(4)), _init("m", _w(4)),
                            _init("v", np.abs(_w(4)) + 0.5)], X),
    "Relu": ([helper.make_node("Relu", ["x"], ["y"])], [], X),
    "Clip": ([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
             [_init("lo", np.float32(0)), _init("hi", np.float32(6))], X),
    "LeakyRelu": ([helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.1)], [], X),
    "Sigmoid": ([helper.make_node("Sigmoid", ["x"], ["y"])], [], X),
    "HardSigmoid": ([helper.make_node("HardSigmoid", ["x"], ["y"], alpha=0.2, beta=0.5)], [], X),
    "HardSwish": ([helper.make_node("HardSwish", ["x"], ["y"])], [], X),
    "Tanh": ([helper.make_node("Tanh", ["x"], ["y"])], [], X),
    "Mul": ([helper.make_node("Mul", ["x", "x"], ["y"])], [], X),
    "Add": ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["x", "r"], ["y"])], [], X),
    "Sub": ([helper.make_node("Sub", ["x", "c"], ["y"])], [_init("c", _w(1, 4, 1, 1))], X),
    "Div": ([helper.make_node("Div", ["x", "c"], ["y"])], [_init("c", np.abs(_w(1, 4, 1, 1)) + 1)], X),
    "Concat": ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Concat", ["x", "r"], ["y"], axis=1)],
               [], X),
    "MaxPool": ([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
                [], X),
    "AveragePool": ([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], [], X),
    "GlobalAveragePool": ([helper.make_node("GlobalAveragePool", ["x"], ["y"])], [], X),
    "GlobalMaxPool": ([helper.make_node("GlobalMaxPool", ["x"], ["y"])], [], X),
    "Gemm": ([helper.make_node("Flatten", ["x"], ["f"]),
              helper.make_node("Gemm", ["f", "w", "b"], ["y"], transB=1, alpha=0.5)],
             [_init("w", _w(10, 256)), _init("b", _w(10))], X),
    "MatMul": ([helper.make_node("MatMul", ["x", "w"], ["y"])], [_init("w", _w(8, 5))], X),
    "Flatten": ([helper.make_node("Flatten", ["x"], ["y"], axis=1)], [], X),
    "Reshape": ([helper.make_node("Reshape", ["x", "s"], ["y"])], [_init("s", np.array([1, -1], np.int64))], X),
    "Resize": ([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest")],
               [_init("sc", np.array([1, 1, 2, 2], np.float32))], X),
    "Softmax": ([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [], X),
    "Transpose": ([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], [], X),
    "Pad": ([helper.make_node("Pad", ["x", "p"], ["y"], mode="constant")],
            [_init("p", np.array([0, 0, 1, 2, 0, 0, 3, 4], np.int64))], X),
    "Slice": ([helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
              [_init("st", np.array([0, 1], np.int64)), _init("en", np.array([8, 8], np.int64)),
               _init("ax", np.array([2, 3], np.int64)), _init("sp", np.array([2, 2], np.int64))], X),
    "Identity": ([helper.make_node("Identity", ["x"], ["y"])], [], X),
    "Dropout": ([helper.make_node("Dropout", ["x"], ["y"])], [], X),
    # ops beyond Table 2.2 (issue 11): global/spatial pooling and SE blocks as reductions, ...
    "ReduceMean": ([helper.make_node("ReduceMean", ["x", "ax"], ["y"], keepdims=1)],
                   [_init("ax", np.array([2, 3], np.int64))], X),
    "ReduceMax": ([helper.make_node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=0)], [], X),
    "ReduceSum": ([helper.make_node("ReduceSum", ["x", "ax"], ["y"], keepdims=1)],
                  [_init("ax", np.array([-1], np.int64))], X),
    "ReduceMin": ([helper.make_node("ReduceMin", ["x"], ["y"], axes=[2, 3], keepdims=1)], [], X),
    "Split": ([helper.make_node("Split", ["x", "sp"], ["a", "b"], axis=1),
               helper.make_node("Mul", ["a", "b"], ["y"])], [_init("sp", np.array([2, 2], np.int64))], X),
    "Sum": ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sum", ["x", "r", "x"], ["y"])], [], X),
    "Mean": ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mean", ["x", "r"], ["y"])], [], X),
    "Max": ([helper.make_node("Max", ["x", "c"], ["y"])], [_init("c", _w(1, 4, 1, 1))], X),
    "Min": ([helper.make_node("Min", ["x", "c"], ["y"])], [_init("c", _w(1, 4, 1, 1))], X),
    "Pow": ([helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Pow", ["a", "e"], ["y"])],
            [_init("e", np.array(1.5, np.float32))], X),
    "PRelu": ([helper.make_node("PRelu", ["x", "s"], ["y"])], [_init("s", _w(4, 1, 1))], X),
    "Elu": ([helper.make_node("Elu", ["x"], ["y"], alpha=0.7)], [], X),
    "Selu": ([helper.make_node("Selu", ["x"], ["y"])], [], X),
    "Celu": ([helper.make_node("Celu", ["x"], ["y"], alpha=1.5)], [], X),
    "Erf": ([helper.make_node("Erf", ["x"], ["y"])], [], X),
    "Gelu": ([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], [], X),
    "Softplus": ([helper.make_node("Softplus", ["x"], ["y"])], [], X),
    "Softsign": ([helper.make_node("Softsign", ["x"], ["y"])], [], X),
    "Mish": ([helper.make_node("Mish", ["x"], ["y"])], [], X),
    "Sqrt": ([helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Sqrt", ["a"], ["y"])], [], X),
    "Reciprocal": ([helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Add", ["a", "one"], ["b"]),
                    helper.make_node("Reciprocal", ["b"], ["y"])], [_init("one", np.array(1.0, np.float32))], X),
    "Neg": ([helper.make_node("Neg", ["x"], ["y"])], [], X),
    "Abs": ([helper.make_node("Abs", ["x"], ["y"])], [], X),
    "Exp": ([helper.make_node("Exp", ["x"], ["y"])], [], X),
    "Log": ([helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Add", ["a", "one"], ["b"]),
             helper.make_node("Log", ["b"], ["y"])], [_init("one", np.array(1.0, np.float32))], X),
    "LRN": ([helper.make_node("LRN", ["x"], ["y"], size=3, alpha=1e-4, beta=0.75, bias=1.0)], [], X),
    "InstanceNormalization": ([helper.make_node("InstanceNormalization", ["x", "g", "b"], ["y"])],
                              [_init("g", _w(4)), _init("b", _w(4))], X),
    "LayerNormalization": ([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)],
                           [_init("g", _w(8)), _init("b", _w(8))], X),
    "Squeeze": ([helper.make_node("ReduceMean", ["x"], ["m"], axes=[2, 3], keepdims=1),
                 helper.make_node("Squeeze", ["m", "ax"], ["y"])], [_init("ax", np.array([2, 3], np.int64))], X),
    "Unsqueeze": ([helper.make_node("Unsqueeze", ["x", "ax"], ["y"])], [_init("ax", np.array([0], np.int64))], X),
    "Expand": ([helper.make_node("ReduceMean", ["x"], ["m"], axes=[2, 3], keepdims=1),
                helper.make_node("Expand", ["m", "sh"], ["y"])], [_init("sh", np.array([1, 4, 8, 8], np.int64))], X),
    "Gather": ([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], [_init("i", np.array([3, 0], np.int64))], X),
    "DepthToSpace": ([helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD")], [], X),
    "SpaceToDepth": ([helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2)], [], X),
    "Cast": ([helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
              helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT)], [], X),
    "Equal": ([helper.make_node("Relu", ["x"], ["r"]),
               helper.make_node("Equal", ["r", "zero"], ["e"]),
               helper.make_node("Where", ["e", "x", "r"], ["y"])], [_init("zero", np.array(0.0, np.float32))], X),
    "Where": ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Equal", ["r", "zero"], ["e"]),
               helper.make_node("Where", ["e", "c", "x"], ["y"])],
              [_init("zero", np.array(0.0, np.float32)), _init("c", _w(1, 4, 1, 1))], X),
    # quantized models (issue 23): each case quantizes x, runs the op, and dequantizes y
    "QuantizeLinear": ([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])],
                       [_init("s", np.float32(0.02)), _init("z", np.uint8(128))], X),
    "DequantizeLinear": ([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                          helper.make_node("DequantizeLinear", ["q", "cs", "cz"], ["y"], axis=1)],
                         [_init("s", np.float32(0.02)), _init("z", np.int8(0)),
                          _init("cs", np.array([0.01, 0.02, 0.03, 0.04], np.float32)), _init("cz", np.zeros(4, np.int8))],
                         X),
    "DynamicQuantizeLinear": ([helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
                               helper.make_node("DequantizeLinear", ["q", "qs", "qz"], ["y"])], [], X),
    "QLinearConv": ([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                     helper.make_node("QLinearConv", ["q", "s", "z", "w", "ws", "wz", "ys", "yz", "b"], ["qy"],
                                      pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
                     helper.make_node("DequantizeLinear", ["qy", "ys", "yz"], ["y"])],
                    [_init("s", np.float32(0.02)), _init("z", np.uint8(128)),
                     _init("w", RNG.integers(-127, 128, (6, 4, 3, 3)).astype(np.int8)),
                     _init("ws", np.full(6, 0.01, np.float32)), _init("wz", np.zeros(6, np.int8)),
                     _init("ys", np.float32(0.05)), _init("yz", np.uint8(120)),
                     _init("b", RNG.integers(-100, 100, 6).astype(np.int32))], X),
    "ConvInteger": ([helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
                     helper.make_node("ConvInteger", ["q", "w", "qz"], ["i"], kernel_shape=[3, 3], strides=[2, 2]),
                     helper.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT)],
                    [_init("w", RNG.integers(0, 256, (6, 4, 3, 3)).astype(np.uint8))], X),
    "QLinearMatMul": ([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                       helper.make_node("QLinearMatMul", ["q", "s", "z", "w", "ws", "wz", "ys", "yz"], ["qy"]),
                       helper.make_node("DequantizeLinear", ["qy", "ys", "yz"], ["y"])],
                      [_init("s", np.float32(0.02)), _init("z", np.uint8(128)),
                       _init("w", RNG.integers(0, 256, (8, 5)).astype(np.uint8)), _init("ws", np.float32(0.01)),
                       _init("wz", np.uint8(128)), _init("ys", np.float32(0.05)), _init("yz", np.uint8(100))], X),
    "MatMulInteger": ([helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
                       helper.make_node("MatMulInteger", ["q", "w", "qz"], ["i"]),
                       helper.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT)],
                      [_init("w", RNG.integers(0, 256, (8, 5)).astype(np.uint8))], X),
}
OPSETS = {"Gelu": 20, "Mish": 18, "ReduceMean": 18, "Split": 18}


def _run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    session = ort_session(model)
    return session.run(None, {session.get_inputs()[0].name: x})


def test_every_supported_op_has_a_case() -> None:
    assert set(OP_CASES) | {"Upsample"} == set(SUPPORTED_OPS)


@pytest.mark.parametrize("op", sorted(OP_CASES))
def test_op_imports_and_round_trips_exactly(op: str) -> None:
    nodes, inits, shape = OP_CASES[op]
    source = _model(nodes, inits, shape, opset=OPSETS.get(op, 17))
    model = import_model(source, source=f"{op}.onnx")
    inferred = onnx.shape_inference.infer_shapes(source, strict_mode=True)
    known = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
             for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]}
    for name, spec in model.tensors.items():
        assert list(spec.shape) == known[name], name
    x = RNG.standard_normal(shape).astype(np.float32)
    expected = _run(source, x)
    rebuilt = to_onnx(model)
    onnx.checker.check_model(rebuilt, full_check=True)
    for want, got in zip(expected, _run(rebuilt, x), strict=True):
        np.testing.assert_array_equal(want, got)
    assert any(layer.op == op for layer in model.layers)


def test_upsample_at_opset_9_imports() -> None:
    source = _model([helper.make_node("Upsample", ["x", "sc"], ["y"], mode="nearest")],
                    [_init("sc", np.array([1, 1, 2, 2], np.float32))], X, opset=9)
    model = import_model(source)
    assert model.tensors["y"].shape == (1, 4, 16, 16)


def test_table_2_1_attributes_of_a_conv() -> None:
    model = import_model(_model(*OP_CASES["Conv"]))
    conv = next(layer for layer in model.layers if layer.op == "Conv")
    assert conv.type == "convolutional"
    assert conv.kernel == (3, 3) and conv.stride == (2, 1) and conv.dilation == (1, 2) and conv.groups == 2
    assert conv.pads == (1, 0, 2, 1)  # (top, left, bottom, right) from ONNX [1, 0, 2, 1]
    assert conv.inputs == ("x",) and conv.operands == ("x", "w", "b")
    assert [p.name for p in conv.params] == ["w", "b"]
    assert conv.input_shapes == ((1, 4, 8, 8),) and conv.output_shapes == ((1, 6, 5, 5),)


def test_slice_steps_are_its_stride() -> None:
    model = import_model(_model(*OP_CASES["Slice"]))
    (layer,) = model.compute_layers
    assert layer.stride == (2, 2) and model.tensors["y"].shape == (1, 4, 4, 4)


def test_same_auto_pad_is_made_explicit() -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])
    model = import_model(_model([node], [_init("w", _w(4, 4, 5, 5))], X))
    conv = model.layer(node.name or "Conv_0")
    assert conv.pads == (1, 1, 2, 2)


def test_edges_data_layers_and_memory_figures() -> None:
    nodes, inits, shape = OP_CASES["Add"]
    model = import_model(_model(nodes, inits, shape))
    assert [layer.op for layer in model.layers] == ["Input", "Relu", "Add", "Output"]
    assert sorted(edge.name for edge in model.edges) == sorted([
        "input:x->Relu_0:x", "input:x->Add_1:x", "Relu_0->Add_1:r", "Add_1->output:y:y"])
    # Thesis M_naive: every edge its own buffer (x feeds two layers, so it counts twice).
    assert memory_figures(model).naive_buffer_bytes == 4 * 256 * 4
    assert memory_figures(model).params_bytes == 0


def test_equal_parameters_count_once_by_content_not_by_name() -> None:
    same = _w(4, 4, 1, 1)
    nodes = [helper.make_node("Conv", ["x", "a"], ["c"]), helper.make_node("Conv", ["c", "b"], ["y"])]
    model = import_model(_model(nodes, [_init("a", same), _init("b", same.copy())], X))
    convs = model.compute_layers
    assert convs[0].param_digests == convs[1].param_digests
    assert params_bytes([model]) == same.nbytes
    other = import_model(_model(nodes, [_init("a", same), _init("b", same * 2)], X))
    assert params_bytes([other]) == 2 * same.nbytes


def test_symbolic_batch_is_fixed_by_the_declared_input_shape() -> None:
    source = _model(*OP_CASES["Relu"][:2], ["N", 4, 8, 8])
    with pytest.raises(InputError, match="not static"):
        import_model(source, source="dyn.onnx")
    model = import_model(source, source="dyn.onnx", input_shapes={"x": [1, 4, 8, 8]})
    assert model.tensors["y"].shape == (1, 4, 8, 8)


def test_constant_nodes_become_parameters() -> None:
    nodes = [helper.make_node("Constant", [], ["c"], value=_init("v", np.full((1, 4, 1, 1), 2, np.float32))),
             helper.make_node("Mul", ["x", "c"], ["y"])]
    model = import_model(_model(nodes, [], X))
    (mul,) = model.compute_layers
    assert mul.inputs == ("x",) and [p.name for p in mul.params] == ["c"]


@pytest.mark.parametrize(("nodes", "inits", "message"), [
    ([helper.make_node("Tile", ["x", "r"], ["y"], name="tiler")], [_init("r", np.array([1, 1, 1, 1], np.int64))],
     r"bad\.onnx: node 'tiler': unsupported op 'Tile'"),
    ([helper.make_node("Relu", ["x"], ["y"], domain="com.example", name="custom")], [],
     r"node 'custom': unsupported op 'com\.example::Relu'"),
    ([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Mystery", ["x", "s"], ["y"], domain="com.example",
                                                                name="odd")], [],
     r"node 'odd': unsupported op 'com\.example::Mystery' \(an op of another domain"),
    ([helper.make_node("CumSum", ["x", "axis"], ["y"], name="cs")], [_init("axis", np.array(1, np.int64))],
     r"node 'cs': unsupported op 'CumSum' \(its inputs are not constant"),
    ([helper.make_node("Relu", ["ghost"], ["y"], name="r")], [], r"input 'ghost' is produced by no node and is neither an initializer nor a graph input"),
])
def test_bad_models_are_refused_in_one_line(nodes: list, inits: list, message: str) -> None:
    with pytest.raises(InputError, match=message) as caught:
        import_model(_model(nodes, inits, X), source="bad.onnx")
    assert "\n" not in str(caught.value)


def test_unknown_shape_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Reshape to a shape that is a graph input: shape inference cannot know the output.
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")], "t",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, X),
                               helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(InputError, match=r"tensor '(y|s)'"):
        import_model(model, source="u.onnx")


def test_missing_and_garbage_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match="no such ONNX file"):
        import_onnx(tmp_path / "nope.onnx")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00\xffnot a model at all" * 10)
    with pytest.raises(InputError, match=r"garbage\.onnx: not a readable ONNX model"):
        import_onnx(garbage)


@pytest.mark.parametrize(("nodes", "message"), [
    ([helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Sigmoid", ["x"], ["y"], name="b")],
     r"node 'b': its output 'y' is defined twice"),
    ([helper.make_node("Relu", ["x"], ["r"], name="twin"), helper.make_node("Sigmoid", ["r"], ["y"], name="twin")],
     r"node 'twin': two nodes have this name"),
    ([helper.make_node("Relu", ["x"], ["x"], name="over"), helper.make_node("Relu", ["x"], ["y"])],
     r"node 'over': its output 'x' is defined twice"),
])
def test_models_onnx_runtime_refuses_to_load_are_refused_at_import(nodes: list, message: str) -> None:
    """Two definitions of a tensor, or two nodes of one name: ONNX Runtime refuses the model, and ``sbrs check``
    passed it while ``sbrs build`` stopped with an internal error (exit 1) when its sessions loaded."""
    with pytest.raises(InputError, match=message) as caught:
        import_model(_model(nodes, [], X), source="bad.onnx")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("opset", [5, 6, onnx.defs.onnx_opset_version() + 1])
def test_an_operator_set_onnx_runtime_cannot_run_is_refused_in_one_line(opset: int) -> None:
    """Relu-1 of opset 1-5 has no ONNX Runtime kernel, an opset newer than ``onnx`` knows does not load: both
    passed ``sbrs check`` and failed ``sbrs build`` with an internal error."""
    with pytest.raises(InputError, match=rf"bad\.onnx: the model uses ONNX operator set {opset}; sbrs runs 7 to "):
        import_model(_model([helper.make_node("Relu", ["x"], ["y"])], [], X, opset=opset), source="bad.onnx")


def test_an_initializer_whose_data_does_not_fit_its_dims_is_refused_in_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A header claiming 10^13 elements over 432 floats of data was numpy's reshape error, exit 1."""
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"])], [_init("w", _w(4, 4, 3, 3))], X)
    del model.graph.initializer[0].dims[:]
    model.graph.initializer[0].dims.extend([1 << 20, 1 << 20, 3, 3])
    onnx.save(model, str(tmp_path / "lying.onnx"))
    with pytest.raises(InputError, match=r"lying\.onnx: initializer 'w': its data does not hold a \[1048576, "
                                         r"1048576, 3, 3\] tensor of type FLOAT"):
        import_onnx(tmp_path / "lying.onnx")
