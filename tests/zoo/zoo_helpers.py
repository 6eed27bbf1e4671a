"""Shared helpers of the zoo tests: run a model in ONNX Runtime, read its initializers."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from tests.conftest import ort_session


def input_shape(model: onnx.ModelProto) -> list[int]:
    """Static shape of the model's single input."""
    return [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


def run_ort(model: onnx.ModelProto, x: np.ndarray | None = None, seed: int = 0) -> np.ndarray:
    """Run ``model`` on CPU with ``x`` (default: a standard normal input) and return its only output."""
    session = ort_session(model)
    if x is None:
        x = np.random.default_rng(seed).standard_normal(input_shape(model), dtype=np.float32)
    return session.run(["output"], {"input": x})[0]


def initializers(model: onnx.ModelProto) -> dict[str, bytes]:
    """Initializer name → raw little-endian bytes of its values."""
    return {t.name: numpy_helper.to_array(t).tobytes() for t in model.graph.initializer}


def check_graph_names(model: onnx.ModelProto) -> None:
    """Node names are unique and non-empty; every tensor is produced once; I/O is ``input``/``output``."""
    names = [n.name for n in model.graph.node]
    assert all(names) and len(set(names)) == len(names)
    produced = [o for n in model.graph.node for o in n.output]
    inits = [t.name for t in model.graph.initializer]
    assert len(set(inits)) == len(inits)
    everything = produced + inits + ["input"]
    assert len(set(everything)) == len(everything)
    assert [i.name for i in model.graph.input] == ["input"]
    assert [o.name for o in model.graph.output] == ["output"]
