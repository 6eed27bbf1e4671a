"""The Resize a scenario with its own ``input_size`` gets in front of its model (``sbrs.model.input_size``)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from sbrs.errors import InputError
from sbrs.model.input_size import resized_name, with_input_resize
from sbrs.model.onnx_import import import_model
from tests.runtime.conftest import resize_session

FRAME = (1, 3, 24, 32)


def conv_model(height: int | str = "H", width: int | str = "W", opset: int = 17) -> onnx.ModelProto:
    weight = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["image", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["out"])],
        "m", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, height, width])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


@settings(max_examples=12, deadline=None)
@given(height=st.integers(1, 40), width=st.integers(1, 40))
def test_the_rewritten_model_equals_resize_then_the_model(height: int, width: int) -> None:
    model = conv_model()
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rewritten = with_input_resize(conv_model(), "image", FRAME, (height, width), "input_size")
    frame = np.random.default_rng(height * 41 + width).standard_normal(FRAME).astype(np.float32)
    resized = resize_session(FRAME, (height, width)).run(None, {"frame": frame})[0]
    want = reference.run(None, {"image": resized})[0]
    got = ort.InferenceSession(rewritten.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"image": frame})[0]
    assert got.shape == (1, 4, height, width)
    np.testing.assert_array_equal(got, want)  # the same kernels on the same values
    imported = import_model(rewritten)
    assert imported.compute_layers[0].op == "Resize"
    assert imported.tensors[resized_name("image", (height, width))].shape == (1, 3, height, width)


def test_a_model_exported_at_the_scenario_size_is_accepted_and_one_at_another_is_refused() -> None:
    with_input_resize(conv_model(12, 16), "image", FRAME, (12, 16), "input_size")
    with pytest.raises(InputError, match=r"input_size: the model's input 'image' dim 3 is 16, input_size says 18"):
        with_input_resize(conv_model(12, 16), "image", FRAME, (12, 18), "input_size")
    with pytest.raises(InputError, match=r"dim 1 is 3, the app's input.shape says 1"):
        with_input_resize(conv_model(), "image", (1, 1, 24, 32), (12, 16), "input_size")


def test_an_old_opset_is_refused_naming_the_opset() -> None:
    with pytest.raises(InputError, match="needs a model of opset 13 or later \\(this one: opset 11\\)"):
        with_input_resize(conv_model(opset=11), "image", FRAME, (12, 16), "input_size", "old.onnx")
