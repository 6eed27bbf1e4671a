"""Scenario families: variants built with one seed share the layers they keep, bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest

from sbrs import zoo
from sbrs.errors import InputError
from tests.zoo.zoo_helpers import check_graph_names, initializers, run_ort

# (model, base options, variant options); resolutions are small to keep ONNX Runtime fast.
FAMILIES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("resnet18", {"resolution": 64}, {"drop_blocks": [1, 3, 5]}),
    ("resnet18", {"resolution": 64}, {"exit_stage": 2, "head_width": 64}),
    ("resnet50", {"resolution": 64}, {"drop_blocks": [2, 5, 9, 10, 15]}),
    ("resnet50", {"resolution": 64}, {"exit_stage": 3}),
    ("cifar_resnet", {}, {"drop_blocks": [1, 2, 4, 8]}),
    ("cifar_resnet", {}, {"exit_stage": 2}),
    ("cifar_resnet", {"depth": 32}, {"depth": 20}),
    ("mobilenet_v2", {"resolution": 64}, {"drop_blocks": [2, 5, 8, 12, 15]}),
    ("mobilenet_v2", {"resolution": 64}, {"exit_stage": 4, "head_width": 256}),
    ("mobilenet_v1", {"resolution": 64}, {"drop_blocks": [6, 7, 8]}),
    ("efficientnet_b0", {"resolution": 64}, {"drop_blocks": [2, 4, 7, 10, 14]}),
    ("efficientnet_b0", {"resolution": 64}, {"exit_stage": 5}),
    ("har_cnn", {}, {"conv_layers": 2, "head_width": 128}),
    ("har_cnn", {}, {"head_width": 128}),
    ("har_cnn", {}, {"conv_layers": 3, "head_width": 256}),
    ("yolo_detector", {"resolution": 64}, {"neck_width": 0.5}),
    ("yolo_detector", {"resolution": 64, "neck_width": 2.0}, {"neck_width": 1.0, "classes": 20}),
]


@pytest.mark.parametrize(("name", "base", "variant"), FAMILIES)
def test_variant_shares_kept_weights(name: str, base: dict[str, Any], variant: dict[str, Any]) -> None:
    full = zoo.build(name, seed=3, **base)
    small = zoo.build(name, seed=3, **{**base, **variant})
    onnx.checker.check_model(small, full_check=True)
    check_graph_names(small)
    a, b = initializers(full), initializers(small)
    shared = a.keys() & b.keys()
    assert len(shared) >= 4
    assert all(a[k] == b[k] for k in shared)
    assert zoo.trainable_parameter_count(small) < zoo.trainable_parameter_count(full)
    y = run_ort(small)
    assert np.isfinite(y).all() and y.std() > 1e-3


def test_kept_layers_keep_their_names() -> None:
    full = initializers(zoo.build("resnet18", resolution=64))
    small = initializers(zoo.build("resnet18", resolution=64, drop_blocks=[1]))
    assert "layer1.1.conv1.weight" in full and "layer1.1.conv1.weight" not in small
    assert "layer2.0.conv1.weight" in small  # later blocks are not renumbered
    assert set(small) < set(full)


def test_har_family_of_four_shares_convolutions() -> None:
    variants = [{}, {"conv_layers": 3}, {"conv_layers": 2, "head_width": 256}, {"head_width": 128}]
    models = [initializers(zoo.build("har_cnn", seed=5, **v)) for v in variants]
    for model in models[1:]:
        assert models[0]["conv1.weight"] == model["conv1.weight"]
        assert models[0]["conv2.weight"] == model["conv2.weight"]


def test_one_name_never_means_two_tensors() -> None:
    """Across many option sets of one seed, a parameter name always holds the same bytes (shape included)."""
    builds = [
        ("resnet18", {"classes": 10}),
        ("resnet18", {"head_width": 64}),
        ("resnet18", {"exit_stage": 1}),
        ("resnet18", {"exit_stage": 1, "classes": 7}),
        ("resnet18", {}),
        ("cifar_resnet", {"width": 8}),
        ("cifar_resnet", {"depth": 44}),
        ("cifar_resnet", {"classes": 100}),
        ("cifar_resnet", {"exit_stage": 1, "head_width": 16}),
        ("cifar_resnet", {}),
        ("mobilenet_v2", {"width": 0.75}),
        ("mobilenet_v2", {"classes": 5}),
        ("mobilenet_v2", {}),
        ("mobilenet_v1", {"width": 0.5}),
        ("mobilenet_v1", {}),
        ("efficientnet_b0", {"classes": 20}),
        ("efficientnet_b0", {}),
        ("squeezenet1_1", {"classes": 10}),
        ("squeezenet1_1", {}),
        ("har_cnn", {"window": 60}),
        ("har_cnn", {"channels": 9}),
        ("har_cnn", {"classes": 6}),
        ("har_cnn", {"conv_layers": 1}),
        ("har_cnn", {}),
        ("yolo_detector", {"neck_width": 0.5}),
        ("yolo_detector", {"classes": 20}),
        ("yolo_detector", {"class_bias": -3.0}),
        ("yolo_detector", {}),
    ]
    seen: dict[tuple[str, str], tuple[bytes, str]] = {}
    for name, options in builds:
        family = "resnet" if name.startswith("resnet") else name
        for key, value in initializers(
            zoo.build(name, resolution=64, **options)
            if "resolution" in zoo.get_model(name).options and name != "cifar_resnet"
            else zoo.build(name, **options)
        ).items():
            first = seen.setdefault((family, key), (value, f"{name} {options}"))
            assert first[0] == value, f"{key}: {first[1]} vs {name} {options}"


@pytest.mark.parametrize(
    ("name", "options", "field"),
    [
        ("resnet18", {"drop_blocks": [2]}, "drop_blocks"),
        ("resnet18", {"drop_blocks": [8]}, "drop_blocks"),
        ("resnet18", {"drop_blocks": [1, 1]}, "drop_blocks"),
        ("resnet50", {"drop_blocks": [0]}, "drop_blocks"),
        ("cifar_resnet", {"drop_blocks": [3]}, "drop_blocks"),
        ("cifar_resnet", {"drop_blocks": [7], "exit_stage": 2}, "drop_blocks"),
        ("mobilenet_v2", {"drop_blocks": [0]}, "drop_blocks"),
        ("mobilenet_v1", {"drop_blocks": [1]}, "drop_blocks"),
        ("efficientnet_b0", {"drop_blocks": [3]}, "drop_blocks"),
        ("resnet18", {"exit_stage": 0}, "exit_stage"),
        ("mobilenet_v2", {"exit_stage": 7}, "exit_stage"),
        ("cifar_resnet", {"depth": 21}, "depth"),
        ("har_cnn", {"conv_layers": 5}, "conv_layers"),
        ("har_cnn", {"window": 12}, "window"),
        ("resnet18", {"classes": 0}, "classes"),
        ("resnet18", {"head_width": -1}, "head_width"),
        ("mobilenet_v2", {"width": 0.0}, "width"),
        ("squeezenet1_1", {"resolution": 16}, "resolution"),
        ("yolo_detector", {"resolution": 100}, "resolution"),
        ("yolo_detector", {"neck_width": 0.1}, "neck_width"),
        ("yolo_detector", {"classes": 0}, "classes"),
    ],
)
def test_bad_family_options_name_the_option(name: str, options: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as err:
        zoo.build(name, **options)
    assert err.value.field == field
    assert name in str(err.value) and "\n" not in str(err.value)


def test_droppable_blocks_are_listed_in_the_error() -> None:
    with pytest.raises(InputError, match=r"droppable: 0, 1, 3, 5, 7"):
        zoo.build("resnet18", drop_blocks=[4])
