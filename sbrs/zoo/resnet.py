"""ResNet-18 / ResNet-50 (torchvision layout, v1.5 strides) and the CIFAR-10 ResNets of He et al. (2016).

Layer names follow torchvision (``layer2.0.conv1``, ``layer2.0.downsample.0``), so a variant that drops
blocks or exits early keeps the names, hence the weights, of every layer it keeps. Blocks are numbered
globally from 0 in execution order; only blocks whose shortcut is the identity may be dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from sbrs.errors import InputError
from sbrs.zoo.builder import GraphBuilder
from sbrs.zoo.common import check_drop_blocks, check_exit_stage, check_positive, classifier_head

# Residual branches end with a BatchNormalization whose scale is drawn around this value: deep stacks of
# random residual blocks then keep activations in a moderate range instead of doubling their
# variance per block.
BRANCH_GAMMA = 0.5


def _basic_block(b: GraphBuilder, x: str, planes: int, stride: int, prefix: str, downsample: bool) -> str:
    """torchvision BasicBlock: 3x3 conv-bn-relu, 3x3 conv-bn, shortcut, add, relu."""
    y = b.conv_bn(
        x,
        planes,
        3,
        stride=stride,
        name=f"{prefix}.conv1",
        bn_name=f"{prefix}.bn1",
        act="relu",
        act_name=f"{prefix}.relu1",
    )
    y = b.conv_bn(y, planes, 3, name=f"{prefix}.conv2", bn_name=f"{prefix}.bn2", gamma=BRANCH_GAMMA)
    short = x
    if downsample:
        short = b.conv_bn(
            x,
            planes,
            1,
            stride=stride,
            pad=0,
            name=f"{prefix}.downsample.0",
            bn_name=f"{prefix}.downsample.1",
        )
    return b.relu(b.add(y, short, name=f"{prefix}.add"), name=f"{prefix}.relu2")


def _bottleneck(b: GraphBuilder, x: str, planes: int, stride: int, prefix: str, downsample: bool) -> str:
    """torchvision Bottleneck (v1.5, stride on the 3x3): 1x1, 3x3, 1x1 (4x planes), shortcut, add, relu."""
    y = b.conv_bn(
        x,
        planes,
        1,
        pad=0,
        name=f"{prefix}.conv1",
        bn_name=f"{prefix}.bn1",
        act="relu",
        act_name=f"{prefix}.relu1",
    )
    y = b.conv_bn(
        y,
        planes,
        3,
        stride=stride,
        name=f"{prefix}.conv2",
        bn_name=f"{prefix}.bn2",
        act="relu",
        act_name=f"{prefix}.relu2",
    )
    y = b.conv_bn(
        y, planes * 4, 1, pad=0, name=f"{prefix}.conv3", bn_name=f"{prefix}.bn3", gamma=BRANCH_GAMMA
    )
    short = x
    if downsample:
        short = b.conv_bn(
            x,
            planes * 4,
            1,
            stride=stride,
            pad=0,
            name=f"{prefix}.downsample.0",
            bn_name=f"{prefix}.downsample.1",
        )
    return b.relu(b.add(y, short, name=f"{prefix}.add"), name=f"{prefix}.relu3")


def _imagenet_resnet(
    bottleneck: bool,
    layers: Sequence[int],
    graph_name: str,
    *,
    seed: int,
    resolution: int,
    classes: int,
    drop_blocks: Sequence[int],
    exit_stage: int | None,
    head_width: int,
) -> onnx.ModelProto:
    check_positive(resolution, "resolution", minimum=32)
    expansion = 4 if bottleneck else 1
    last = check_exit_stage(exit_stage, 4)
    # Plan the blocks: (stage, index within stage, planes, stride, needs downsample).
    plan = []
    inplanes = 64
    for stage, (count, planes) in enumerate(zip(layers, (64, 128, 256, 512), strict=True), start=1):
        for j in range(count):
            stride = 2 if stage > 1 and j == 0 else 1
            plan.append((stage, j, planes, stride, stride != 1 or inplanes != planes * expansion))
            inplanes = planes * expansion
    droppable = [i for i, p in enumerate(plan) if not p[4]]
    present = sum(1 for p in plan if p[0] <= last)
    dropped = check_drop_blocks(drop_blocks, droppable, len(plan), present)

    b = GraphBuilder((1, 3, resolution, resolution), seed=seed, graph_name=graph_name)
    x = b.conv_bn(b.input, 64, 7, stride=2, pad=3, name="conv1", bn_name="bn1", act="relu", act_name="relu")
    x = b.maxpool(x, 3, stride=2, pad=1, name="maxpool")
    block = _bottleneck if bottleneck else _basic_block
    for i, (stage, j, planes, stride, downsample) in enumerate(plan[:present]):
        if i not in dropped:
            x = block(b, x, planes, stride, f"layer{stage}.{j}", downsample)
    y = classifier_head(
        b,
        x,
        classes=classes,
        head_width=head_width,
        default_in=512 * expansion,
        default_classes=1000,
        exit_stage=exit_stage,
    )
    return b.build_model(y)


def resnet18(
    *,
    seed: int = 0,
    resolution: int = 224,
    classes: int = 1000,
    drop_blocks: Sequence[int] = (),
    exit_stage: int | None = None,
    head_width: int = 0,
) -> onnx.ModelProto:
    """ResNet-18 (11.69 M parameters at 1000 classes). Blocks 0..7; droppable: 0, 1, 3, 5, 7."""
    return _imagenet_resnet(
        False,
        (2, 2, 2, 2),
        "resnet18",
        seed=seed,
        resolution=resolution,
        classes=classes,
        drop_blocks=drop_blocks,
        exit_stage=exit_stage,
        head_width=head_width,
    )


def resnet50(
    *,
    seed: int = 0,
    resolution: int = 224,
    classes: int = 1000,
    drop_blocks: Sequence[int] = (),
    exit_stage: int | None = None,
    head_width: int = 0,
) -> onnx.ModelProto:
    """ResNet-50 v1.5 (25.56 M parameters). Blocks 0..15; droppable: all but 0, 3, 7, 13."""
    return _imagenet_resnet(
        True,
        (3, 4, 6, 3),
        "resnet50",
        seed=seed,
        resolution=resolution,
        classes=classes,
        drop_blocks=drop_blocks,
        exit_stage=exit_stage,
        head_width=head_width,
    )


def _cifar_block(b: GraphBuilder, x: str, planes: int, stride: int, prefix: str) -> str:
    """He et al. CIFAR basic block with option-A shortcut (subsample + zero-pad channels, no parameters)."""
    y = b.conv_bn(
        x,
        planes,
        3,
        stride=stride,
        name=f"{prefix}.conv1",
        bn_name=f"{prefix}.bn1",
        act="relu",
        act_name=f"{prefix}.relu1",
    )
    y = b.conv_bn(y, planes, 3, name=f"{prefix}.conv2", bn_name=f"{prefix}.bn2", gamma=BRANCH_GAMMA)
    short = x
    inplanes = b.channels(x)
    if stride != 1 or inplanes != planes:
        _, _, h, w = b.shape(x)
        short = b.slice(
            x,
            starts=[0, 0],
            ends=[h, w],
            axes=[2, 3],
            steps=[stride, stride],
            name=f"{prefix}.shortcut.subsample",
        )
        extra = planes - inplanes
        short = b.pad(
            short, [0, extra // 2, 0, 0, 0, extra - extra // 2, 0, 0], name=f"{prefix}.shortcut.pad"
        )
    return b.relu(b.add(y, short, name=f"{prefix}.add"), name=f"{prefix}.relu2")


def cifar_resnet(
    *,
    depth: int = 20,
    width: int = 16,
    seed: int = 0,
    resolution: int = 32,
    classes: int = 10,
    drop_blocks: Sequence[int] = (),
    exit_stage: int | None = None,
    head_width: int = 0,
) -> onnx.ModelProto:
    """CIFAR-10 ResNet-``depth`` (depth = 6n + 2: 20, 32, 44, 56, 110), stages of width, 2x, 4x channels.

    ResNet-20 has 0.27 M parameters. Blocks are numbered 0..3n-1; the first block of stages 2 and 3
    (subsampling shortcut) cannot be dropped. Layers are named ``layer{stage}.{j}``, so a deeper model shares
    every layer of a shallower one built with the same seed and width.
    """
    if depth < 8 or (depth - 2) % 6:
        raise InputError(f"must be 6n+2 with n >= 1 (20, 32, 44, 56, 110), got {depth}", field="depth")
    check_positive(width, "width")
    check_positive(resolution, "resolution", minimum=4)
    n = (depth - 2) // 6
    last = check_exit_stage(exit_stage, 3)
    droppable = [i for i in range(3 * n) if i not in (n, 2 * n)]
    dropped = check_drop_blocks(drop_blocks, droppable, 3 * n, last * n)
    scope = "" if width == 16 else f"w{width}."

    b = GraphBuilder((1, 3, resolution, resolution), seed=seed, graph_name=f"cifar_resnet{depth}")
    x = b.conv_bn(
        b.input, width, 3, name=f"{scope}conv1", bn_name=f"{scope}bn1", act="relu", act_name=f"{scope}relu"
    )
    for stage in range(1, last + 1):
        planes = width * 2 ** (stage - 1)
        for j in range(n):
            i = (stage - 1) * n + j
            if i not in dropped:
                x = _cifar_block(b, x, planes, 2 if stage > 1 and j == 0 else 1, f"{scope}layer{stage}.{j}")
    y = classifier_head(
        b,
        x,
        classes=classes,
        head_width=head_width,
        default_in=4 * width,
        default_classes=10,
        exit_stage=exit_stage,
        scope=scope,
    )
    return b.build_model(y)
