"""A parameter operand of an element-wise layer that differs from row to row (a detector's ``[1, 1, 16, 1]``
bin weights) makes the layer read its input whole; one constant along the height keeps it row-local."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from sbrs.model import import_model
from sbrs.reduction.rows import layer_row_maps
from sbrs.runtime.engine import Runtime
from tests.conftest import ort_session
from tests.runtime.conftest import assert_equivalent


def _scaled(constant_shape: tuple[int, ...]) -> onnx.ModelProto:
    """input [1, 3, 8, 8] → Conv 3x3 → Mul by a constant of ``constant_shape`` → Relu."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((3, 3, 3, 3)).astype(np.float32)
    scale = rng.standard_normal(constant_shape).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Mul", ["c", "scale"], ["m"], name="scale"),
         helper.make_node("Relu", ["m"], ["output"], name="relu")],
        "scaled", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, 8, 8])],
        initializer=[numpy_helper.from_array(weight, "w"), numpy_helper.from_array(scale, "scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_constant_varying_along_the_height_is_read_whole_and_runs_by_parts() -> None:
    for shape, kind in (((1, 1, 8, 1), "whole"), ((1, 3, 1, 1), "window"), ((8, 8), "whole"), ((8,), "window")):
        source = _scaled(shape)
        model = import_model(source)
        layer = next(layer for layer in model.layers if layer.name == "scale")
        assert {row_map.kind for row_map in layer_row_maps(model, layer).values()} == {kind}, shape
        frame = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
        with Runtime.from_models({"only": model}, {"only": {"conv": 2, "scale": 2, "relu": 2}}) as runtime:
            got = runtime.infer(frame)
        session = ort_session(source)
        assert_equivalent(got, {"output": session.run(None, {"input": frame})[0]}, str(shape))
