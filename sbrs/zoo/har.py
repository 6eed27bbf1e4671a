"""A 1-D CNN for human activity recognition in the style of the thesis' PAMAP2 baseline (CNN-2).

Input: one window of ``window`` samples (100 = 3 s at 30 Hz) of ``channels`` sensor channels (40 for the
PAMAP2 body-worn IMUs), laid out NCHW as ``[1, channels, window, 1]``, so the temporal convolutions are 2-D
convolutions with kernel (k, 1) and the graph stays in the usual 2-D op set. Layout: conv-conv-pool-conv-conv-
pool (valid padding, ReLU), flatten, two hidden fully connected layers, classifier (12 activities).

Family options: ``conv_layers`` (1..4, a prefix of the base's conv stack) and ``head_width`` (hidden FC width)
give scenarios that share the kept convolutions bit for bit.
"""

from __future__ import annotations

import onnx

from sbrs.errors import InputError
from sbrs.zoo.builder import GraphBuilder, window_out
from sbrs.zoo.common import check_positive, tag

MAX_CONV_LAYERS = 4
KERNEL = 5


def _time_steps(window: int, conv_layers: int) -> int:
    """Temporal length after ``conv_layers`` valid convolutions with pooling after the 2nd and 4th."""
    t = window
    for i in range(1, conv_layers + 1):
        t = window_out(t, KERNEL, 1, 0, 0)
        if i % 2 == 0:
            t //= 2
    return t


def har_cnn(
    *,
    seed: int = 0,
    channels: int = 40,
    window: int = 100,
    classes: int = 12,
    conv_layers: int = 4,
    filters: int = 64,
    head_width: int = 512,
) -> onnx.ModelProto:
    """PAMAP2-style activity CNN; about 1.0 M parameters with the defaults."""
    check_positive(channels, "channels")
    check_positive(classes, "classes")
    check_positive(filters, "filters")
    check_positive(head_width, "head_width")
    if not 1 <= conv_layers <= MAX_CONV_LAYERS:
        raise InputError(f"must be between 1 and {MAX_CONV_LAYERS}, got {conv_layers}", field="conv_layers")
    if _time_steps(window, conv_layers) < 1:
        raise InputError(
            f"window of {window} samples is too short for {conv_layers} conv layers", field="window"
        )
    scope = "" if (channels, filters) == (40, 64) else f"c{channels}f{filters}."

    b = GraphBuilder((1, channels, window, 1), seed=seed, graph_name="har_cnn")
    x = b.input
    for i in range(1, conv_layers + 1):
        x = b.conv(x, filters, (KERNEL, 1), pad=0, name=f"{scope}conv{i}")
        x = b.relu(x, name=f"{scope}relu{i}")
        if i % 2 == 0:
            x = b.maxpool(x, (2, 1), name=f"{scope}pool{i // 2}")
    x = b.flatten(x, name=f"{scope}flatten")
    features = b.shape(x)[1]
    default_features = filters * _time_steps(100, MAX_CONV_LAYERS)
    x = b.relu(
        b.gemm(
            x, head_width, name=tag(f"{scope}fc1", (features, head_width), (default_features, 512)), gain=2.0
        ),
        name=f"{scope}fc1.relu",
    )
    x = b.relu(
        b.gemm(x, head_width, name=tag(f"{scope}fc2", (head_width,), (512,)), gain=2.0),
        name=f"{scope}fc2.relu",
    )
    x = b.gemm(x, classes, name=tag(f"{scope}fc3", (head_width, classes), (512, 12)))
    return b.build_model(x)
