"""SqueezeNet 1.1 (torchvision layout): fire modules, ceil-mode max pooling, convolutional classifier."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import onnx

from sbrs.zoo.builder import GraphBuilder
from sbrs.zoo.common import check_positive, tag

# features index → (squeeze, expand1x1, expand3x3) channels; max pools sit at features 2, 5 and 8.
FIRES: Mapping[int, tuple[int, int, int]] = MappingProxyType(
    {
        3: (16, 64, 64),
        4: (16, 64, 64),
        6: (32, 128, 128),
        7: (32, 128, 128),
        9: (48, 192, 192),
        10: (48, 192, 192),
        11: (64, 256, 256),
        12: (64, 256, 256),
    }
)
POOLS = (2, 5, 8)


def _fire(b: GraphBuilder, x: str, p: str, squeeze: int, e1: int, e3: int) -> str:
    """Fire module: 1x1 squeeze → relu → (1x1 expand ‖ 3x3 expand), each relu, concatenated on channels."""
    s = b.relu(b.conv(x, squeeze, 1, pad=0, name=f"{p}.squeeze"), name=f"{p}.squeeze_activation")
    a = b.relu(b.conv(s, e1, 1, pad=0, name=f"{p}.expand1x1"), name=f"{p}.expand1x1_activation")
    c = b.relu(b.conv(s, e3, 3, pad=1, name=f"{p}.expand3x3"), name=f"{p}.expand3x3_activation")
    return b.concat([a, c], name=f"{p}.cat")


def squeezenet1_1(*, seed: int = 0, resolution: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """SqueezeNet 1.1 (1.24 M parameters at 1000 classes)."""
    check_positive(resolution, "resolution", minimum=32)
    check_positive(classes, "classes")
    b = GraphBuilder((1, 3, resolution, resolution), seed=seed, graph_name="squeezenet1_1")
    x = b.relu(b.conv(b.input, 64, 3, stride=2, pad=0, name="features.0"), name="features.1")
    for i in range(2, 13):
        if i in POOLS:
            x = b.maxpool(x, 3, stride=2, ceil_mode=True, name=f"features.{i}")
        else:
            x = _fire(b, x, f"features.{i}", *FIRES[i])
    x = b.conv(x, classes, 1, pad=0, name=tag("classifier.1", (512, classes), (512, 1000)))
    x = b.relu(x, name="classifier.2")
    x = b.flatten(b.global_avgpool(x, name="classifier.3"), name="flatten")
    return b.build_model(x)
