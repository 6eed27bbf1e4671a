"""EfficientNet-B0 (torchvision layout): MBConv blocks with squeeze-excitation, SiLU as Sigmoid + Mul.

Stochastic depth (drop-connect) is a training-time device and is absent at inference. MBConv blocks are
numbered 0..15 in execution order; those with the identity shortcut may be dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from sbrs.zoo.builder import GraphBuilder
from sbrs.zoo.common import check_drop_blocks, check_exit_stage, check_positive, classifier_head

# (expand ratio, kernel, stride, input channels, output channels, repeats), one row per stage features.1..7.
B0_SETTINGS = (
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
)


def _mbconv(b: GraphBuilder, x: str, p: str, expand: int, kernel: int, stride: int, out: int) -> str:
    """torchvision MBConv: [1x1 expand] → depthwise k×k → squeeze-excitation → 1x1 project (+ identity)."""
    inp = b.channels(x)
    hidden = inp * expand
    y = x
    k = 0
    if expand != 1:
        y = b.conv_bn(
            y,
            hidden,
            1,
            pad=0,
            name=f"{p}.block.0.0",
            bn_name=f"{p}.block.0.1",
            act="silu",
            act_name=f"{p}.block.0.2",
        )
        k = 1
    y = b.conv_bn(
        y,
        hidden,
        kernel,
        stride=stride,
        groups=hidden,
        name=f"{p}.block.{k}.0",
        bn_name=f"{p}.block.{k}.1",
        act="silu",
        act_name=f"{p}.block.{k}.2",
    )
    se = f"{p}.block.{k + 1}"
    s = b.global_avgpool(y, name=f"{se}.avgpool")
    s = b.silu(b.conv(s, max(1, inp // 4), 1, pad=0, name=f"{se}.fc1"), name=f"{se}.activation")
    s = b.sigmoid(b.conv(s, hidden, 1, pad=0, name=f"{se}.fc2"), name=f"{se}.scale_activation")
    y = b.mul(y, s, name=f"{se}.scale")
    y = b.conv_bn(y, out, 1, pad=0, name=f"{p}.block.{k + 2}.0", bn_name=f"{p}.block.{k + 2}.1", gamma=0.5)
    if stride == 1 and inp == out:
        y = b.add(y, x, name=f"{p}.add")
    return y


def efficientnet_b0(
    *,
    seed: int = 0,
    resolution: int = 224,
    classes: int = 1000,
    drop_blocks: Sequence[int] = (),
    exit_stage: int | None = None,
    head_width: int = 0,
) -> onnx.ModelProto:
    """EfficientNet-B0 (5.29 M parameters at 1000 classes).

    Droppable blocks: 2, 4, 6, 7, 9, 10, 12, 13, 14. ``exit_stage`` k in 1..6 ends after stage
    ``features.k`` (without the final 1x1 conv to 1280 channels).
    """
    check_positive(resolution, "resolution", minimum=32)
    last = check_exit_stage(exit_stage, len(B0_SETTINGS))
    plan = []
    for stage, (t, k, s, inp, out, n) in enumerate(B0_SETTINGS, start=1):
        for j in range(n):
            plan.append((stage, j, t, k, s if j == 0 else 1, inp if j == 0 else out, out))
    droppable = [i for i, p in enumerate(plan) if p[4] == 1 and p[5] == p[6]]
    present = sum(1 for p in plan if p[0] <= last)
    dropped = check_drop_blocks(drop_blocks, droppable, len(plan), present)

    b = GraphBuilder((1, 3, resolution, resolution), seed=seed, graph_name="efficientnet_b0")
    x = b.conv_bn(
        b.input,
        32,
        3,
        stride=2,
        name="features.0.0",
        bn_name="features.0.1",
        act="silu",
        act_name="features.0.2",
    )
    for i, (stage, j, t, k, s, _, out) in enumerate(plan[:present]):
        if i not in dropped:
            x = _mbconv(b, x, f"features.{stage}.{j}", t, k, s, out)
    if exit_stage is None:
        x = b.conv_bn(
            x,
            1280,
            1,
            pad=0,
            name="features.8.0",
            bn_name="features.8.1",
            act="silu",
            act_name="features.8.2",
        )
    y = classifier_head(
        b,
        x,
        classes=classes,
        head_width=head_width,
        default_in=1280,
        default_classes=1000,
        exit_stage=exit_stage,
        name="classifier.1",
        hidden_act="silu",
    )
    return b.build_model(y)
