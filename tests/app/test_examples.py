"""Every example app loads; every scenario's CNN model agrees with ONNX shape inference and ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from sbrs.app import load_app
from sbrs.cli import main
from sbrs.model import memory_figures, params_bytes
from sbrs.model.input_size import with_input_resize
from sbrs.model.onnx_import import load_onnx
from tests.conftest import APPS, ort_session


def test_there_are_example_apps() -> None:
    assert {p.stem for p in APPS} >= {"drone", "pamap2", "cifar10", "multi-cnn", "tiny"}


@pytest.mark.parametrize("app_path", APPS, ids=[p.stem for p in APPS])
def test_example_app_models_match_onnx(app_path: Path) -> None:
    app = load_app(app_path)
    assert len(app.models) >= 2
    rng = np.random.default_rng(0)
    frame = rng.standard_normal(app.config.input.shape).astype(np.float32)
    for scenario in app.config.scenarios:
        model = app.models[scenario.name]
        source = load_onnx(scenario.model_path)
        if scenario.input_size is not None:  # the scenario's model is the documented Resize, then the file's
            source = with_input_resize(source, model.graph_inputs[0], app.config.input.shape, scenario.input_size,
                                       "input_size")
        inferred = onnx.shape_inference.infer_shapes(source, strict_mode=True)
        declared = {v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
                    for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]}
        for name, spec in model.tensors.items():
            assert spec.shape == declared[name], (scenario.name, name)
        session = ort_session(source)
        outputs = session.run(None, {session.get_inputs()[0].name: frame})
        for name, value in zip(model.graph_outputs, outputs, strict=True):
            assert value.shape == model.tensors[name].shape
            assert np.isfinite(value).all()
        arrays = (onnx.numpy_helper.to_array(i) for i in source.graph.initializer)
        initializers = {(a.dtype.str, a.shape, a.tobytes()): a.nbytes for a in arrays}  # equal tensors count once
        assert memory_figures(model).params_bytes == sum(initializers.values())
        assert memory_figures(model).naive_buffer_bytes == sum(e.spec.nbytes for e in model.edges)
    # Scenarios of a weight-sharing family store shared tensors once.
    assert params_bytes(app.models.values()) <= sum(memory_figures(m).params_bytes for m in app.models.values())


def test_family_scenarios_share_weights() -> None:
    app = load_app(next(p for p in APPS if p.stem == "drone"))
    total = sum(memory_figures(m).params_bytes for m in app.models.values())
    assert params_bytes(app.models.values()) < 0.4 * total


@pytest.mark.parametrize("app_path", APPS, ids=[p.stem for p in APPS])
def test_check_command_on_examples(app_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(app_path), "--json"]) == 0
    assert '"params_bytes"' in capsys.readouterr().out
