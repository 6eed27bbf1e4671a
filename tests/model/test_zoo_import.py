"""Every zoo model imports into the CNN model; shapes match ONNX shape inference; the rebuild is exact."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from sbrs import zoo
from sbrs.model import import_model, memory_figures, to_onnx
from tests.conftest import ort_session

NAMES = [entry.name for entry in zoo.list_models()]
SMALL = {"resolution": 64}


def _options(name: str) -> dict[str, int]:
    return SMALL if "resolution" in zoo.get_model(name).options and name != "cifar_resnet" else {}


@pytest.mark.parametrize("name", NAMES)
def test_zoo_model_imports_and_rebuilds_exactly(name: str) -> None:
    source = zoo.build(name, **_options(name))
    model = import_model(source, source=name)
    inferred = onnx.shape_inference.infer_shapes(source, strict_mode=True)
    declared = {v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
                for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]}
    assert {n: s.shape for n, s in model.tensors.items()} == {n: declared[n] for n in model.tensors}
    figures = memory_figures(model)
    assert figures.params_bytes > 0 and figures.naive_buffer_bytes >= figures.tensor_bytes > 0

    rebuilt = to_onnx(model)
    onnx.checker.check_model(rebuilt, full_check=True)
    x = np.random.default_rng(1).standard_normal(model.tensors[model.graph_inputs[0]].shape).astype(np.float32)
    want = ort_session(source).run(None, {"input": x})
    got = ort_session(rebuilt).run(None, {"input": x})
    np.testing.assert_array_equal(want[0], got[0])
