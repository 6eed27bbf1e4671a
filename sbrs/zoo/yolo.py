"""A small YOLO-style detector: CSP backbone, PAN neck, decoupled anchor-free head with decoding in the graph.

The output is what ultralytics' ONNX exports give: ``[1, 4 + classes, anchors]``, per anchor a box ``cx, cy,
w, h`` in input pixels and one sigmoid score per class; anchors are the cells of the stride-8, -16 and -32
maps, in that order (a 320x320 input: 40² + 20² + 10² = 2100). Boxes come out of a distribution-focal head
(``reg_max`` = 16 bins per side, softmax, expectation) the way ultralytics' ``DFL`` and ``dist2bbox`` compute
them, so the graph holds the same kinds of nodes as such an export (Reshape, Softmax, ReduceSum, Slice,
Sub/Add/Mul, Concat, Sigmoid; no op outside sbrs' supported set).

Backbone (``backbone.*``, YOLOv5-style C3 blocks with SiLU, channels 16-256 like a "nano" model, SPPF) never
depends on ``neck_width``: two builds with one seed and different neck widths share every backbone layer bit
for bit, and Algorithm 5 merges them into one shared unit. ``neck_width`` scales the neck and head channels
(their names carry ``w{neck_width}.`` when it is not 1). Weights are seeded random: the class scores start
from a bias of ``class_bias`` (sigmoid(-6) ≈ 0.0025), so that random weights give a few boxes above a usual
confidence on a random frame, not hundreds; the detections mean nothing.
"""

from __future__ import annotations

import numpy as np
import onnx

from sbrs.errors import InputError
from sbrs.zoo.builder import GraphBuilder
from sbrs.zoo.common import check_positive, make_divisible, scope_for_width, tag

STRIDES = (8, 16, 32)
REG_MAX = 16
#: Backbone channels (stem, stage 1..4) and C3 repeats per stage.
BACKBONE_CHANNELS = (16, 32, 64, 128, 256)
BACKBONE_REPEATS = (1, 2, 2, 1)
DEFAULT_CLASSES = 80
DEFAULT_CLASS_BIAS = -6.0
#: Weight gains of the last 1x1 convolutions of the head. The features reaching them from a deep stack of random
#: layers are small (logits of std 0.02-0.09 at the usual gain of 1); these gains spread the box bins (boxes of
#: varied sizes) and the class logits (std ~1) so that, with ``class_bias``, a handful of anchors pass a usual
#: confidence on a random frame.
BOX_GAIN = 400.0
CLASS_GAIN = 200.0


def _conv(b: GraphBuilder, x: str, out: int, kernel: int, name: str, stride: int = 1) -> str:
    """Conv → BatchNormalization → SiLU (ultralytics' ``Conv``)."""
    return b.conv_bn(x, out, kernel, stride=stride, name=f"{name}.conv", bn_name=f"{name}.bn", act="silu",
                     act_name=f"{name}.act")


def _c3(b: GraphBuilder, x: str, out: int, repeats: int, name: str, shortcut: bool = True) -> str:
    """YOLOv5's C3: two 1x1 branches, bottlenecks on one, concatenated, 1x1 to ``out``."""
    hidden = out // 2
    left = _conv(b, x, hidden, 1, f"{name}.cv1")
    right = _conv(b, x, hidden, 1, f"{name}.cv2")
    for index in range(repeats):
        y = _conv(b, left, hidden, 1, f"{name}.m.{index}.cv1")
        y = _conv(b, y, hidden, 3, f"{name}.m.{index}.cv2")
        left = b.add(left, y, name=f"{name}.m.{index}.add") if shortcut else y
    return _conv(b, b.concat([left, right], name=f"{name}.cat"), out, 1, f"{name}.cv3")


def _sppf(b: GraphBuilder, x: str, out: int, name: str) -> str:
    """Spatial pyramid pooling, fast: three chained 5x5 max pools, concatenated."""
    y = _conv(b, x, b.channels(x) // 2, 1, f"{name}.cv1")
    pools = [y]
    for index in range(3):
        pools.append(b.maxpool(pools[-1], 5, stride=1, pad=2, name=f"{name}.pool{index}"))
    return _conv(b, b.concat(pools, name=f"{name}.cat"), out, 1, f"{name}.cv2")


def _backbone(b: GraphBuilder) -> tuple[str, str, str]:
    """The feature maps at strides 8, 16 and 32."""
    stem, *stages = BACKBONE_CHANNELS
    x = _conv(b, b.input, stem, 3, "backbone.stem", stride=2)
    features = []
    for index, (channels, repeats) in enumerate(zip(stages, BACKBONE_REPEATS, strict=True), start=1):
        x = _conv(b, x, channels, 3, f"backbone.down{index}", stride=2)
        x = _c3(b, x, channels, repeats, f"backbone.c3_{index}")
        features.append(x)
    p5 = _sppf(b, features[3], stages[-1], "backbone.sppf")
    return features[1], features[2], p5


def _neck(b: GraphBuilder, p3: str, p4: str, p5: str, width: float, scope: str) -> tuple[str, str, str]:
    """PAN: top-down (upsample, concatenate, C3) then bottom-up (strided conv, concatenate, C3)."""
    c3, c4, c5 = (make_divisible(c * width, 8) for c in BACKBONE_CHANNELS[2:])
    n4 = _c3(b, b.concat([b.resize(p5, 2, name=f"{scope}neck.up5"), p4], name=f"{scope}neck.cat4"), c4, 1,
             f"{scope}neck.td4", shortcut=False)
    out3 = _c3(b, b.concat([b.resize(n4, 2, name=f"{scope}neck.up4"), p3], name=f"{scope}neck.cat3"), c3, 1,
               f"{scope}neck.td3", shortcut=False)
    down3 = _conv(b, out3, c3, 3, f"{scope}neck.down3", stride=2)
    out4 = _c3(b, b.concat([down3, n4], name=f"{scope}neck.cat_bu4"), c4, 1, f"{scope}neck.bu4", shortcut=False)
    down4 = _conv(b, out4, c4, 3, f"{scope}neck.down4", stride=2)
    out5 = _c3(b, b.concat([down4, p5], name=f"{scope}neck.cat_bu5"), c5, 1, f"{scope}neck.bu5", shortcut=False)
    return out3, out4, out5


def _anchor_grid(resolution: int) -> tuple[np.ndarray, np.ndarray]:
    """Cell centres ``[1, 2, anchors]`` (x, y in cells) and strides ``[1, 1, anchors]``, level by level."""
    centres, strides = [], []
    for stride in STRIDES:
        cells = resolution // stride
        ys, xs = np.meshgrid(np.arange(cells, dtype=np.float32) + 0.5, np.arange(cells, dtype=np.float32) + 0.5,
                             indexing="ij")
        centres.append(np.stack([xs.ravel(), ys.ravel()]))
        strides.append(np.full((1, cells * cells), stride, np.float32))
    return np.concatenate(centres, axis=1)[None], np.concatenate(strides, axis=1)[None]


def yolo_detector(
    *,
    seed: int = 0,
    resolution: int = 320,
    classes: int = DEFAULT_CLASSES,
    neck_width: float = 1.0,
    class_bias: float = DEFAULT_CLASS_BIAS,
) -> onnx.ModelProto:
    """The detector (module docstring); ``resolution`` a multiple of 32, at least 64."""
    check_positive(classes, "classes")
    if resolution < 64 or resolution % 32:
        raise InputError(f"must be a multiple of 32 and at least 64, got {resolution}", field="resolution")
    if not 0.125 <= neck_width <= 4.0:
        raise InputError(f"must be between 0.125 and 4, got {neck_width}", field="neck_width")
    scope = scope_for_width(neck_width)
    b = GraphBuilder((1, 3, resolution, resolution), seed=seed, graph_name="yolo_detector")
    levels = _neck(b, *_backbone(b), neck_width, scope)

    box_channels = make_divisible(64 * neck_width, 8)
    class_channels = make_divisible(max(64, min(classes, 100)) * neck_width, 8)
    usual_class_channels = make_divisible(max(64, min(DEFAULT_CLASSES, 100)) * neck_width, 8)
    box_maps, class_maps = [], []
    bias_tag = "" if class_bias == DEFAULT_CLASS_BIAS else f"_bias{class_bias:g}"
    for index, level in enumerate(levels):
        _, _, height, width = b.shape(level)
        head = f"{scope}head.{index}"
        box = _conv(b, _conv(b, level, box_channels, 3, f"{head}.box1"), box_channels, 3, f"{head}.box2")
        box = b.conv(box, 4 * REG_MAX, 1, name=f"{head}.box_pred", pad=0, gain=BOX_GAIN)
        branch = tag(f"{head}.cls", (class_channels,), (usual_class_channels,))  # its width follows the classes
        score = _conv(b, _conv(b, level, class_channels, 3, f"{branch}1"), class_channels, 3, f"{branch}2")
        score = b.conv(score, classes, 1, pad=0, gain=CLASS_GAIN, bias_mean=class_bias,
                       name=tag(f"{head}.cls_pred", (classes,), (DEFAULT_CLASSES,)) + bias_tag)
        box_maps.append(b.reshape(box, (1, 4 * REG_MAX, height * width), name=f"{head}.box_flat"))
        class_maps.append(b.reshape(score, (1, classes, height * width),
                                    name=tag(f"{head}.cls_flat", (classes,), (DEFAULT_CLASSES,))))
    anchors = sum(b.shape(m)[2] for m in box_maps)

    # distribution focal loss head: softmax over each side's 16 bins, expected bin = distance in cells
    boxes = b.concat(box_maps, axis=2, name="decode.box_cat")
    bins = b.softmax(b.reshape(boxes, (1, 4, REG_MAX, anchors), name="decode.dfl_bins"), axis=2,
                     name="decode.dfl_softmax")
    weights = b.constant("decode.dfl_weights", np.arange(REG_MAX, dtype=np.float32).reshape(1, 1, REG_MAX, 1))
    distances = b.reduce_sum(b.elementwise("Mul", bins, weights, name="decode.dfl_weighted"), 2,
                             name="decode.dfl_expectation")
    centres, strides = _anchor_grid(resolution)
    centre = b.constant("decode.anchor_centres", centres)
    near = b.slice(distances, starts=[0], ends=[2], axes=[1], steps=[1], name="decode.left_top")
    far = b.slice(distances, starts=[2], ends=[4], axes=[1], steps=[1], name="decode.right_bottom")
    top_left = b.elementwise("Sub", centre, near, name="decode.x1y1")
    bottom_right = b.elementwise("Add", centre, far, name="decode.x2y2")
    half = b.constant("decode.half", np.array(0.5, np.float32))
    middle = b.elementwise("Mul", b.elementwise("Add", top_left, bottom_right, name="decode.corner_sum"), half,
                           name="decode.cxcy")
    size = b.elementwise("Sub", bottom_right, top_left, name="decode.wh")
    cells = b.concat([middle, size], axis=1, name="decode.cxcywh_cells")
    pixels = b.elementwise("Mul", cells, b.constant("decode.strides", strides), name="decode.cxcywh")
    scores = b.sigmoid(b.concat(class_maps, axis=2, name="decode.cls_cat"), name="decode.scores")
    output = b.concat([pixels, scores], axis=1, name="decode.output")
    return b.build_model(output, doc="YOLO-style detector, seeded random weights (sbrs.zoo.yolo)")
