"""Every zoo model: valid ONNX, runs in ONNX Runtime with finite non-trivial output, exact parameter counts."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from sbrs import zoo
from sbrs.zoo.builder import IR_VERSION, OPSET
from tests.zoo.zoo_helpers import check_graph_names, initializers, run_ort

# one worker runs this module: its module-scoped builds are made once, not once on each xdist worker
pytestmark = pytest.mark.xdist_group("zoo-models")

# torchvision ``sum(p.numel() for p in model.parameters())`` (Keras trainable count for MobileNetV1).
PUBLISHED = {
    "mobilenet_v1": 4_231_976,
    "mobilenet_v2": 3_504_872,
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "squeezenet1_1": 1_235_496,
    "efficientnet_b0": 5_288_548,
    "cifar_resnet": 269_722,  # ResNet-20, option A (He et al. 2016: 0.27 M)
}
# Small resolutions keep the ONNX Runtime runs fast; ResNet-50 and MobileNetV2 also run at 224 below.
SMALL = {
    "mobilenet_v1": {"resolution": 64},
    "mobilenet_v2": {"resolution": 64},
    "resnet18": {"resolution": 64},
    "resnet50": {"resolution": 64},
    "squeezenet1_1": {"resolution": 64},
    "efficientnet_b0": {"resolution": 64},
    "cifar_resnet": {},
    "har_cnn": {},
    "yolo_detector": {"resolution": 64},
}
OUT_CLASSES = {"cifar_resnet": 10, "har_cnn": 12}
#: Detectors: [1, 4 + classes, anchors]; at 64x64 the stride-8, -16 and -32 cells are 8² + 4² + 2² = 84.
OUT_SHAPES = {"yolo_detector": (1, 84, 84)}
NAMES = [entry.name for entry in zoo.list_models()]


@pytest.fixture(scope="module")
def defaults() -> dict[str, onnx.ModelProto]:
    """Every model built once with default options."""
    return {name: zoo.build(name) for name in NAMES}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_published(defaults: dict[str, onnx.ModelProto], name: str) -> None:
    count = zoo.trainable_parameter_count(defaults[name])
    assert abs(count - PUBLISHED[name]) <= 0.005 * PUBLISHED[name]
    assert count == PUBLISHED[name]


def test_cifar_resnet_depths_match_paper() -> None:
    # He et al. 2016, Table 6: 0.27 M, 0.46 M, 0.66 M, 0.85 M, 1.7 M.
    for depth, millions in ((20, 0.27), (32, 0.46), (44, 0.66), (56, 0.85), (110, 1.7)):
        count = zoo.trainable_parameter_count(zoo.build("cifar_resnet", depth=depth))
        assert round(count / 1e6, 2 if depth < 110 else 1) == millions


@pytest.mark.parametrize("name", NAMES)
def test_default_build_is_valid_onnx(defaults: dict[str, onnx.ModelProto], name: str) -> None:
    model = defaults[name]
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == IR_VERSION
    assert [(o.domain, o.version) for o in model.opset_import] == [("", OPSET)]
    check_graph_names(model)
    assert {p.key: p.value for p in model.metadata_props}["sbrs.zoo.model"] == name


@pytest.mark.parametrize("name", NAMES)
def test_runs_in_onnxruntime(name: str) -> None:
    model = zoo.build(name, **SMALL[name])
    onnx.checker.check_model(model, full_check=True)
    y = run_ort(model)
    assert y.shape == OUT_SHAPES.get(name, (1, OUT_CLASSES.get(name, 1000)))
    assert np.isfinite(y).all()
    assert y.std() > 1e-3


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2"])
def test_runs_at_default_resolution(defaults: dict[str, onnx.ModelProto], name: str) -> None:
    y = run_ort(defaults[name])
    assert y.shape == (1, 1000)
    assert np.isfinite(y).all() and y.std() > 1e-3 and np.abs(y).max() < 1e4


@pytest.mark.parametrize("name", NAMES)
def test_build_is_deterministic(defaults: dict[str, onnx.ModelProto], name: str) -> None:
    assert zoo.build(name).SerializeToString() == defaults[name].SerializeToString()


def test_seed_changes_every_weight() -> None:
    a = initializers(zoo.build("cifar_resnet", seed=0))
    b = initializers(zoo.build("cifar_resnet", seed=1))
    assert a.keys() == b.keys()
    float_params = [k for k in a if k.endswith((".weight", ".bias", ".running_mean", ".running_var"))]
    assert float_params and all(a[k] != b[k] for k in float_params)


def test_har_cnn_input_layout() -> None:
    model = zoo.build("har_cnn")
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 40, 100, 1]
    ops = {n.op_type for n in model.graph.node}
    assert ops == {"Conv", "Relu", "MaxPool", "Flatten", "Gemm"}


def test_width_and_resolution_options() -> None:
    half = zoo.build("mobilenet_v2", width=0.5, resolution=96, classes=10)
    assert zoo.trainable_parameter_count(half) < 1_000_000
    assert run_ort(half).shape == (1, 10)
    assert all(t.name.startswith("w0.5.") for t in half.graph.initializer if not t.name.startswith("const."))
    v1 = zoo.build("mobilenet_v1", width=0.25, resolution=128)
    assert run_ort(v1).shape == (1, 1000)
    # Published MobileNetV1 0.25 (Keras trainable): 0.47 M.
    assert round(zoo.trainable_parameter_count(v1) / 1e6, 2) == 0.47
