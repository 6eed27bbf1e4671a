"""Models nobody here wrote: torchvision CNNs through both of PyTorch's exporters, and the CNNs the ``onnx``
package ships as backend test data.

The torchvision files under tests/data/torchvision were exported by ``tools/export_torchvision.py`` (see its
docstring) with random weights at 64x64: MobileNetV3-small (SE blocks, HardSwish; width 0.5) with a 10- and a
5-class head on one seeded backbone, and ShuffleNetV2 x0.5 (channel split and shuffle: ``Split`` from the
dynamo exporter, ``Shape``/``Gather``/... chains from the legacy one). For each: import, the canonical form,
the rebuilt model and the sbrs runtime against ONNX Runtime running the file itself; the two heads share
their backbone in the MoC whichever exporter made them.

onnx's "light" models fill their weights with ``ConstantOfShape``; all nine import (checked by hand, see
docs/APP_YAML.md); the ones whose weights expand to less than 150 MB are imported here, to keep CI's time and memory
down (vgg19, alexnet and zfnet512 expand to 240-550 MB).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from sbrs.app import load_app
from sbrs.moc import derive_moc
from sbrs.model import import_model, import_onnx, to_onnx
from sbrs.model.canonical import needs_canonical
from sbrs.runtime import runtime_for
from tests.conftest import ort_session
from tests.runtime.conftest import assert_equivalent

DATA = Path(__file__).resolve().parents[1] / "data" / "torchvision"
EXPORTS = sorted(DATA.glob("*.onnx"))
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
SMALL_LIGHT_MODELS = ("light_squeezenet", "light_shufflenet", "light_inception_v1", "light_densenet121",
                      "light_resnet50", "light_inception_v2")


def _reference(path: Path | onnx.ModelProto, frame: np.ndarray) -> dict[str, np.ndarray]:
    session = ort_session(path if isinstance(path, onnx.ModelProto) else str(path))
    values = session.run(None, {session.get_inputs()[0].name: frame})
    return {out.name: value for out, value in zip(session.get_outputs(), values, strict=True)}


def _frame(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_the_committed_exports_are_there() -> None:
    names = {path.stem for path in EXPORTS}
    for model in ("mobilenet_v3_small", "shufflenet_v2_x0_5", "mobilenet_v3_small-5classes"):
        assert {f"{model}-dynamo-64", f"{model}-legacy-64"} <= names


@pytest.mark.parametrize("path", EXPORTS, ids=[p.stem for p in EXPORTS])
def test_export_imports_and_rebuilds_equal_to_onnx_runtime(path: Path) -> None:
    model = import_onnx(path)
    frame = _frame(model.tensors[model.graph_inputs[0]].shape)
    want = _reference(path, frame)
    got = _reference(to_onnx(model), frame)
    assert_equivalent(got, want, path.stem)
    assert not any(layer.op in ("Shape", "Constant", "ConstantOfShape") for layer in model.layers)
    parameters = {p for layer in model.layers for p in layer.params}
    assert not any(layer.op == "Identity" and set(layer.operands) & parameters for layer in model.layers)


def test_legacy_exports_need_the_canonical_form_and_keep_their_weights() -> None:
    """The legacy exporter's parameter Identity nodes and shape chains are folded away; every weight of the
    file is still there bit for bit (Algorithm 5 compares weights by value)."""
    for path in DATA.glob("*-legacy-64.onnx"):
        source = onnx.load(path)
        assert needs_canonical(source), path.stem
        weights = {onnx.numpy_helper.to_array(t).tobytes() for t in source.graph.initializer if t.raw_data
                   and len(t.raw_data) > 4096}
        model = import_onnx(path)
        imported = {model.weights[ref.digest].tobytes() for layer in model.layers for ref in layer.params}
        assert weights <= imported, path.stem


@pytest.mark.parametrize("exporter", [pytest.param("dynamo", marks=pytest.mark.slow), "legacy"])  # 6 s each; both
def test_two_heads_on_one_backbone_share_it_and_run_equal_to_onnx_runtime(exporter: str, tmp_path: Path) -> None:
    ten, five = DATA / f"mobilenet_v3_small-{exporter}-64.onnx", DATA / f"mobilenet_v3_small-5classes-{exporter}-64.onnx"
    app_file = tmp_path / "heads.yaml"
    app_file.write_text(f"""name: heads
input: {{name: input, shape: [1, 3, 64, 64], dtype: float32}}
initial: ten
runtime: {{share_min_mb: 0}}
scenarios:
  - {{name: ten, model: {ten}, requirements: {{accuracy: 1.0}}}}
  - {{name: five, model: {five}, requirements: {{throughput: 1.0}}}}
""".replace("name: input", f"name: {onnx.load(ten).graph.input[0].name}"))
    app = load_app(app_file)
    moc = derive_moc(app.models, app.config.adaptive)
    shared = [layer for layer in moc.layers if len(layer.scenarios) == 2]
    compute = len(app.models["ten"].compute_layers)
    assert len(shared) >= compute - 3, f"{exporter}: {len(shared)} of {compute} layers shared"
    frame = _frame(tuple(app.config.input.shape), 3)
    with runtime_for(app) as runtime:
        assert any(len(unit.scenarios) == 2 for unit in runtime.plan.units)  # the backbone: a shared unit
        for scenario, path in (("ten", ten), ("five", five)):
            runtime.switch(scenario)
            assert_equivalent(runtime.infer(frame), _reference(path, frame), f"{exporter} {scenario}")


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow)  # the two longest, 2.7-2.8 s each
                                  if name in ("light_inception_v1", "light_densenet121") else name
                                  for name in SMALL_LIGHT_MODELS])
def test_onnx_shipped_models_import_equal_to_onnx_runtime(name: str) -> None:
    source = onnx.load(LIGHT / f"{name}.onnx")
    parameters = {t.name for t in source.graph.initializer}
    data_input = next(value for value in source.graph.input if value.name not in parameters)
    shape = [d.dim_value for d in data_input.type.tensor_type.shape.dim]
    model = import_model(source, source=name, input_shapes={data_input.name: shape})
    frame = _frame(tuple(shape))
    assert_equivalent(_reference(to_onnx(model), frame), _reference(source, frame), name)
