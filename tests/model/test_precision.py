"""A float32 model at int8 or fp16 by ONNX Runtime's tools (``sbrs.model.precision``): the forms they write
(QDQ, int8 weights per channel, uint8 activations; float16 weights with float32 I/O), the same bytes for the
same frames, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sbrs.errors import InputError
from sbrs.model.precision import convert_fp16, quantize_int8_static


@pytest.fixture(scope="module")
def fp32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sbrs import zoo

    path = tmp_path_factory.mktemp("precision") / "mobilenet_v2.onnx"
    zoo.export("mobilenet_v2", path, width=0.35, resolution=64, classes=10)
    return path


def _frames(count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.standard_normal((1, 3, 64, 64)).astype(np.float32) for _ in range(count)]


def test_int8_static_is_qdq_with_per_channel_int8_weights(fp32: Path) -> None:
    model = onnx.load_from_string(quantize_int8_static(fp32, _frames(2)))
    ops = [node.op_type for node in model.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    assert not any(op.startswith("QLinear") for op in ops)  # the QDQ format, not QOperator
    initializers = {init.name: init for init in model.graph.initializer}
    conv_weights = [node.input[1] for node in model.graph.node if node.op_type == "Conv"]
    weight_dq = {node.output[0]: node for node in model.graph.node if node.op_type == "DequantizeLinear"}
    assert conv_weights and all(name in weight_dq for name in conv_weights)
    for name in conv_weights:
        node = weight_dq[name]
        assert initializers[node.input[0]].data_type == TensorProto.INT8
        scale = numpy_helper.to_array(initializers[node.input[1]])
        assert scale.ndim == 1 and scale.size > 1  # one scale per output channel
    activation_zero_points = [initializers[node.input[2]] for node in model.graph.node
                              if node.op_type == "QuantizeLinear" and node.input[2] in initializers]
    assert activation_zero_points and {z.data_type for z in activation_zero_points} == {TensorProto.UINT8}
    # BatchNormalization folded into the convolutions by the pre-processing
    assert "BatchNormalization" not in ops


def test_the_same_frames_give_the_same_model(fp32: Path) -> None:
    assert quantize_int8_static(fp32, _frames(2)) == quantize_int8_static(fp32, _frames(2))
    assert quantize_int8_static(fp32, _frames(2)) != quantize_int8_static(fp32, _frames(3))


def test_fp16_keeps_a_float32_input_and_output(fp32: Path) -> None:
    model = onnx.load_from_string(convert_fp16(fp32))
    assert [v.type.tensor_type.elem_type for v in (*model.graph.input, *model.graph.output)] == [TensorProto.FLOAT] * 2
    types = {init.data_type for init in model.graph.initializer if numpy_helper.to_array(init).size > 1}
    assert TensorProto.FLOAT16 in types and TensorProto.FLOAT not in types


def test_two_data_inputs_are_refused_in_one_line(tmp_path: Path) -> None:
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "two",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in "ab"],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(InputError, match="the model has 2 data inputs; a derived scenario needs exactly one"):
        quantize_int8_static(path, [np.zeros((1, 4), np.float32)])


@pytest.mark.parametrize("derive", [convert_fp16, lambda path: quantize_int8_static(path, [])],
                         ids=["fp16", "int8-static"])
def test_an_unreadable_source_is_one_line(tmp_path: Path, derive) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"not an onnx model")
    with pytest.raises(InputError, match="cannot read the source model: ") as caught:
        derive(path)
    assert "\n" not in str(caught.value) and caught.value.file == str(path)
