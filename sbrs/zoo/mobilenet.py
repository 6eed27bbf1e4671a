"""MobileNetV1 (Howard et al. 2017, Keras layout) and MobileNetV2 (torchvision layout).

At a width other than 1.0 every layer name starts with ``w{width}.`` (all shapes change). Blocks are numbered
from 0 in execution order; MobileNetV2 may drop inverted-residual blocks that have the identity shortcut,
MobileNetV1 (no shortcuts) may drop depthwise-separable blocks whose input and output shapes agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from sbrs.zoo.builder import GraphBuilder
from sbrs.zoo.common import (
    check_drop_blocks,
    check_exit_stage,
    check_positive,
    classifier_head,
    make_divisible,
    scope_for_width,
)

# MobileNetV1 depthwise-separable blocks: (pointwise output channels, depthwise stride).
V1_BLOCKS = (
    (64, 1),
    (128, 2),
    (128, 1),
    (256, 2),
    (256, 1),
    (512, 2),
    (512, 1),
    (512, 1),
    (512, 1),
    (512, 1),
    (512, 1),
    (1024, 2),
    (1024, 1),
)
# Stage boundaries of V1 for early exits: the number of blocks after each stage (resolution 1/4 .. 1/32).
V1_STAGE_ENDS = (3, 5, 11, 13)

# MobileNetV2 inverted residual settings: expansion t, channels c, repeats n, first stride s.
V2_SETTINGS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def _check_width(width: float) -> None:
    check_positive(width, "width", minimum=0.05)


def mobilenet_v1(
    *,
    width: float = 1.0,
    resolution: int = 224,
    classes: int = 1000,
    seed: int = 0,
    drop_blocks: Sequence[int] = (),
    exit_stage: int | None = None,
    head_width: int = 0,
) -> onnx.ModelProto:
    """MobileNetV1 with width multiplier α (4.23 M parameters at α = 1, 1000 classes).

    13 depthwise-separable blocks (0..12); droppable: 2, 4, 6..10, 12. Early exits after stages 1..3 end
    after blocks 2, 4, 10 (strides 4, 8, 16).
    """
    _check_width(width)
    check_positive(resolution, "resolution", minimum=32)
    scope = scope_for_width(width)
    last = check_exit_stage(exit_stage, len(V1_STAGE_ENDS))
    present = V1_STAGE_ENDS[last - 1]
    chans = [max(1, int(32 * width))] + [max(1, int(c * width)) for c, _ in V1_BLOCKS]
    droppable = [i for i, (_, s) in enumerate(V1_BLOCKS) if s == 1 and chans[i] == chans[i + 1]]
    dropped = check_drop_blocks(drop_blocks, droppable, len(V1_BLOCKS), present)

    b = GraphBuilder((1, 3, resolution, resolution), seed=seed, graph_name="mobilenet_v1")
    x = b.conv_bn(
        b.input,
        chans[0],
        3,
        stride=2,
        name=f"{scope}conv1",
        bn_name=f"{scope}conv1.bn",
        act="relu",
        act_name=f"{scope}conv1.relu",
    )
    for i, (_, stride) in enumerate(V1_BLOCKS[:present]):
        if i in dropped:
            continue
        p = f"{scope}blocks.{i}"
        x = b.conv_bn(
            x,
            chans[i],
            3,
            stride=stride,
            groups=chans[i],
            name=f"{p}.dw",
            bn_name=f"{p}.dw.bn",
            act="relu",
            act_name=f"{p}.dw.relu",
        )
        x = b.conv_bn(
            x,
            chans[i + 1],
            1,
            pad=0,
            name=f"{p}.pw",
            bn_name=f"{p}.pw.bn",
            act="relu",
            act_name=f"{p}.pw.relu",
        )
    y = classifier_head(
        b,
        x,
        classes=classes,
        head_width=head_width,
        default_in=chans[-1],
        default_classes=1000,
        exit_stage=exit_stage,
        scope=scope,
    )
    return b.build_model(y)


def _v2_plan(width: float) -> list[tuple[int, int, int, int, int]]:
    """MobileNetV2 blocks as (stage, input channels, output channels, stride, expansion)."""
    plan = []
    inp = make_divisible(32 * width, 8)
    for stage, (t, c, n, s) in enumerate(V2_SETTINGS, start=1):
        out = make_divisible(c * width, 8)
        for j in range(n):
            plan.append((stage, inp, out, s if j == 0 else 1, t))
            inp = out
    return plan


def mobilenet_v2(
    *,
    width: float = 1.0,
    resolution: int = 224,
    classes: int = 1000,
    seed: int = 0,
    drop_blocks: Sequence[int] = (),
    exit_stage: int | None = None,
    head_width: int = 0,
) -> onnx.ModelProto:
    """MobileNetV2 (torchvision; 3.50 M parameters at width 1.0, 1000 classes).

    17 inverted-residual blocks (``features.1`` .. ``features.17`` are blocks 0..16); droppable at width 1.0:
    2, 4, 5, 7, 8, 9, 11, 12, 14, 15. ``exit_stage`` k in 1..6 ends after the k-th of the seven settings rows
    (without the final 1x1 conv to 1280 channels).
    """
    _check_width(width)
    check_positive(resolution, "resolution", minimum=32)
    scope = scope_for_width(width)
    last = check_exit_stage(exit_stage, len(V2_SETTINGS))
    plan = _v2_plan(width)
    droppable = [i for i, (_, inp, out, s, _) in enumerate(plan) if s == 1 and inp == out]
    present = sum(1 for p in plan if p[0] <= last)
    dropped = check_drop_blocks(drop_blocks, droppable, len(plan), present)
    last_channel = make_divisible(1280 * max(1.0, width), 8)

    b = GraphBuilder((1, 3, resolution, resolution), seed=seed, graph_name="mobilenet_v2")
    x = b.conv_bn(
        b.input,
        plan[0][1],
        3,
        stride=2,
        name=f"{scope}features.0.0",
        bn_name=f"{scope}features.0.1",
        act="relu6",
        act_name=f"{scope}features.0.2",
    )
    for i, (_, inp, out, stride, t) in enumerate(plan[:present]):
        if i in dropped:
            continue
        p = f"{scope}features.{i + 1}.conv"
        hidden = round(inp * t)
        y = x
        k = 0
        if t != 1:
            y = b.conv_bn(
                y, hidden, 1, pad=0, name=f"{p}.0.0", bn_name=f"{p}.0.1", act="relu6", act_name=f"{p}.0.2"
            )
            k = 1
        y = b.conv_bn(
            y,
            hidden,
            3,
            stride=stride,
            groups=hidden,
            name=f"{p}.{k}.0",
            bn_name=f"{p}.{k}.1",
            act="relu6",
            act_name=f"{p}.{k}.2",
        )
        y = b.conv_bn(y, out, 1, pad=0, name=f"{p}.{k + 1}", bn_name=f"{p}.{k + 2}", gamma=0.5)
        if stride == 1 and inp == out:
            y = b.add(x, y, name=f"{scope}features.{i + 1}.add")
        x = y
    if exit_stage is None:
        n = len(plan) + 1
        x = b.conv_bn(
            x,
            last_channel,
            1,
            pad=0,
            name=f"{scope}features.{n}.0",
            bn_name=f"{scope}features.{n}.1",
            act="relu6",
            act_name=f"{scope}features.{n}.2",
        )
    y = classifier_head(
        b,
        x,
        classes=classes,
        head_width=head_width,
        default_in=last_channel,
        default_classes=1000,
        exit_stage=exit_stage,
        scope=scope,
        name="classifier.1",
    )
    return b.build_model(y)
