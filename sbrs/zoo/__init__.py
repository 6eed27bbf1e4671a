"""Reference model zoo: deterministic ONNX builds of common CNNs with seeded, name-keyed weights.

Every model is float32 NCHW at opset 17 with one input ``input`` and one output ``output`` (logits). Weights
are random but reproducible: a parameter's values depend only on the seed and the parameter's name, so the
variants of one family (``drop_blocks``, ``exit_stage``, ``head_width``, ``conv_layers`` ...) built with the
same seed share the layers they keep bit for bit, like scenarios derived from one backbone.

    >>> from sbrs import zoo
    >>> [e.name for e in zoo.list_models()][:2]
    ['mobilenet_v1', 'mobilenet_v2']
    >>> model = zoo.build("resnet18", drop_blocks=[1, 3], seed=7)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from sbrs.cache import cached_file, content_key, write_atomic
from sbrs.errors import InputError
from sbrs.zoo.builder import GraphBuilder, trainable_parameter_count
from sbrs.zoo.dsl import compile_layers
from sbrs.zoo.efficientnet import efficientnet_b0
from sbrs.zoo.har import har_cnn
from sbrs.zoo.mobilenet import mobilenet_v1, mobilenet_v2
from sbrs.zoo.resnet import cifar_resnet, resnet18, resnet50
from sbrs.zoo.squeezenet import squeezenet1_1
from sbrs.zoo.yolo import yolo_detector

__all__ = [
    "ZOO_VERSION",
    "GraphBuilder",
    "OptionSpec",
    "ZooEntry",
    "build",
    "cached_export",
    "compile_layers",
    "export",
    "get_model",
    "list_models",
    "normalize_options",
    "parse_option_text",
    "trainable_parameter_count",
]

# Bump when any build's bytes change for the same name and options: it keys the export cache.
ZOO_VERSION = "1"

OPTION_TYPES = ("int", "float", "bool", "str", "int_list")


@dataclass(frozen=True)
class OptionSpec:
    """One build option: ``type`` is one of int, float, bool, str, int_list; a None default means optional."""

    type: str
    default: Any
    help: str


@dataclass(frozen=True)
class ZooEntry:
    """A zoo model: its registry name, a one-line description and its options."""

    name: str
    description: str
    options: dict[str, OptionSpec] = field(default_factory=dict)


def _common(resolution: int | None, classes: int) -> dict[str, OptionSpec]:
    specs = {"seed": OptionSpec("int", 0, "seed of the name-keyed weight generator")}
    if resolution is not None:
        specs["resolution"] = OptionSpec("int", resolution, "input height and width in pixels")
    specs["classes"] = OptionSpec("int", classes, "number of output classes")
    return specs


def _family(stages: int, droppable: str) -> dict[str, OptionSpec]:
    return {
        "drop_blocks": OptionSpec(
            "int_list", [], f"blocks to skip (identity-shortcut blocks only: {droppable})"
        ),
        "exit_stage": OptionSpec(
            "int",
            None,
            f"early exit after stage 1..{stages - 1}: global pool and a new "
            "classifier head (default: the full model)",
        ),
        "head_width": OptionSpec(
            "int", 0, "width of an extra hidden fully connected layer before the classifier (0: none)"
        ),
    }


def _registry() -> dict[str, tuple[ZooEntry, Callable[..., onnx.ModelProto]]]:
    """Every zoo model with its builder, in listing order (built afresh on each call: no shared state)."""
    width = {"width": OptionSpec("float", 1.0, "width multiplier α applied to every layer's channels")}
    rows: list[tuple[str, str, dict[str, OptionSpec], Callable[..., onnx.ModelProto]]] = [
        (
            "mobilenet_v1",
            "MobileNetV1 (Howard et al. 2017), 4.23 M parameters at width 1.0",
            {**_common(224, 1000), **width, **_family(4, "2, 4, 6-10, 12")},
            mobilenet_v1,
        ),
        (
            "mobilenet_v2",
            "MobileNetV2 (torchvision layout), 3.50 M parameters at width 1.0",
            {**_common(224, 1000), **width, **_family(7, "2, 4, 5, 7, 8, 9, 11, 12, 14, 15")},
            mobilenet_v2,
        ),
        (
            "resnet18",
            "ResNet-18 (torchvision layout), 11.69 M parameters",
            {**_common(224, 1000), **_family(4, "0, 1, 3, 5, 7")},
            resnet18,
        ),
        (
            "resnet50",
            "ResNet-50 v1.5 (torchvision layout), 25.56 M parameters",
            {**_common(224, 1000), **_family(4, "all of 0-15 but 0, 3, 7, 13")},
            resnet50,
        ),
        (
            "squeezenet1_1",
            "SqueezeNet 1.1 (torchvision layout), 1.24 M parameters",
            _common(224, 1000),
            squeezenet1_1,
        ),
        (
            "efficientnet_b0",
            "EfficientNet-B0 (torchvision layout, SiLU as Sigmoid*x), 5.29 M parameters",
            {**_common(224, 1000), **_family(7, "2, 4, 6, 7, 9, 10, 12, 13, 14")},
            efficientnet_b0,
        ),
        (
            "cifar_resnet",
            "CIFAR-10 ResNet of He et al. (depth 6n+2, option-A shortcuts), 0.27 M at depth 20",
            {
                "depth": OptionSpec("int", 20, "depth 6n+2: 20, 32, 44, 56, 110"),
                "width": OptionSpec("int", 16, "channels of the first stage (stages: width, 2x, 4x)"),
                **_common(32, 10),
                **_family(3, "every block but the first of stages 2 and 3"),
            },
            cifar_resnet,
        ),
        (
            "har_cnn",
            "PAMAP2-style 1-D activity CNN on [1, channels, window, 1] sensor windows, 12 classes",
            {
                "seed": OptionSpec("int", 0, "seed of the name-keyed weight generator"),
                "channels": OptionSpec("int", 40, "sensor channels"),
                "window": OptionSpec("int", 100, "samples per window (3 s at 30 Hz)"),
                "classes": OptionSpec("int", 12, "number of activity classes"),
                "conv_layers": OptionSpec(
                    "int", 4, "temporal conv layers kept, 1..4 (a prefix of the base's)"
                ),
                "filters": OptionSpec("int", 64, "filters per conv layer"),
                "head_width": OptionSpec("int", 512, "width of the two hidden fully connected layers"),
            },
            har_cnn,
        ),
        (
            "yolo_detector",
            "YOLO-style detector (CSP backbone, PAN neck, DFL head), output [1, 4 + classes, anchors] as "
            "ultralytics exports: cx, cy, w, h in pixels and class scores",
            {
                **_common(320, 80),
                "neck_width": OptionSpec(
                    "float", 1.0, "width multiplier of the neck and head (the backbone is shared by all widths)"
                ),
                "class_bias": OptionSpec(
                    "float", -6.0, "initial bias of the class logits (random weights: a few boxes per frame)"
                ),
            },
            yolo_detector,
        ),
    ]
    return {name: (ZooEntry(name, desc, opts), fn) for name, desc, opts, fn in rows}


def list_models() -> list[ZooEntry]:
    """Every zoo model, in a stable order."""
    return [entry for entry, _ in _registry().values()]


def get_model(name: str) -> ZooEntry:
    """The entry of one model; InputError naming the valid models when ``name`` is unknown."""
    registry = _registry()
    if name not in registry:
        raise InputError(f"unknown zoo model {name!r}; valid: {', '.join(registry)}", field="model")
    return registry[name][0]


def _check_type(spec: OptionSpec, value: object) -> bool:
    if value is None:
        return spec.default is None
    if spec.type == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if spec.type == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if spec.type == "bool":
        return isinstance(value, bool)
    if spec.type == "str":
        return isinstance(value, str)
    return isinstance(value, (list, tuple)) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    )


def normalize_options(name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """All options of ``name`` with defaults filled in and types checked (InputError if not)."""
    entry = get_model(name)
    out: dict[str, Any] = {}
    for key, value in options.items():
        spec = entry.options.get(key)
        if spec is None:
            raise InputError(
                f"unknown option {key!r} for zoo model {name}; valid: {', '.join(entry.options)}", field=key
            )
        if not _check_type(spec, value):
            kind = spec.type + (" or null" if spec.default is None else "")
            raise InputError(f"option of zoo model {name} must be {kind}, got {value!r}", field=key)
        out[key] = (
            list(value) if spec.type == "int_list" else (float(value) if spec.type == "float" else value)
        )
    for key, spec in entry.options.items():
        out.setdefault(key, list(spec.default) if isinstance(spec.default, list) else spec.default)
    return out


def parse_option_text(name: str, key: str, text: str) -> Any:
    """Convert a command-line value (``"1,3"``, ``"0.5"``, ``"none"``) to the type of option ``key``."""
    entry = get_model(name)
    spec = entry.options.get(key)
    if spec is None:
        raise InputError(
            f"unknown option {key!r} for zoo model {name}; valid: {', '.join(entry.options)}", field=key
        )
    raw = text.strip()
    if raw.lower() in ("none", "null") and spec.default is None:
        return None
    try:
        if spec.type == "int":
            return int(raw)
        if spec.type == "float":
            return float(raw)
        if spec.type == "bool":
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(raw)
            return raw.lower() in ("true", "1", "yes")
        if spec.type == "int_list":
            raw = raw.strip("[]")
            return [int(part) for part in raw.split(",") if part.strip()]
        return raw
    except ValueError:
        raise InputError(f"option of zoo model {name} must be {spec.type}, got {text!r}", field=key) from None


def build(name: str, **options: Any) -> onnx.ModelProto:
    """Build zoo model ``name`` with ``options`` (see ``list_models()``); InputError on bad input."""
    values = normalize_options(name, options)
    builder = _registry()[name][1]
    try:
        model = builder(**values)
    except InputError as err:
        raise InputError(f"zoo model {name}: {err.detail}", field=err.field) from None
    meta = {
        "sbrs.zoo.model": name,
        "sbrs.zoo.version": ZOO_VERSION,
        "sbrs.zoo.options": json.dumps(values, sort_keys=True),
    }
    for key, value in meta.items():
        prop = model.metadata_props.add()
        prop.key, prop.value = key, value
    return model


def export(name: str, path: str | os.PathLike[str], **options: Any) -> Path:
    """Build ``name`` and write it to ``path`` (atomically); returns the path."""
    target = Path(path)
    if not target.parent.is_dir():
        problem = "is not a directory" if target.parent.exists() else "does not exist"
        raise InputError(f"{str(target.parent)!r} {problem}", field="output")
    write_atomic(target, build(name, **options).SerializeToString())
    return target


def cached_export(name: str, options: Mapping[str, Any] | None = None) -> Path:
    """The path of ``name`` built with ``options`` in the cache, exporting it on first use.

    The file is ``{name}-{key}.onnx`` where key is a short sha256 of (zoo version, name, all options with
    defaults filled in), so equivalent option sets share one file.
    """
    values = normalize_options(name, options or {})
    key = content_key(ZOO_VERSION, name, sorted(values.items()))
    return cached_file("zoo", name, key, lambda: build(name, **values).SerializeToString())
