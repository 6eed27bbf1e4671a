"""The zoo's YOLO-style detector: its in-graph decoding against numpy, the backbone its widths share, and the
detection example built on it (every scenario equal to ONNX Runtime, the backbone one shared unit)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from sbrs import zoo
from sbrs.app import load_app
from sbrs.moc import derive_moc
from sbrs.runtime import runtime_for
from sbrs.zoo.yolo import REG_MAX, STRIDES
from tests.conftest import REPO
from tests.runtime.conftest import References, assert_equivalent, random_frame
from tests.zoo.zoo_helpers import initializers, run_ort


def _with_head_outputs(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str], list[str]]:
    """``model`` also returning every level's raw box and class maps (the last convolutions of the head)."""
    boxes = [n.output[0] for n in model.graph.node if n.name.endswith("box_pred")]
    scores = [n.output[0] for n in model.graph.node if ".cls_pred" in n.name]
    for name in boxes + scores:
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return model, boxes, scores


def test_the_output_is_the_dfl_decoding_of_the_head() -> None:
    """Per anchor: softmax over each side's 16 bins, expected bin = distance in cells from the cell centre,
    box = (centre of the corners, their difference) x stride; scores = sigmoid of the class logits."""
    model, box_names, score_names = _with_head_outputs(zoo.build("yolo_detector", resolution=96, classes=3))
    from tests.conftest import ort_session

    session = ort_session(model)
    frame = np.random.default_rng(0).standard_normal((1, 3, 96, 96)).astype(np.float32)
    values = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"input": frame}), strict=True))
    boxes, scores = [], []
    for stride, box_name, score_name in zip(STRIDES, box_names, score_names, strict=True):
        raw, logits = values[box_name][0], values[score_name][0]  # [64, h, w], [3, h, w]
        cells = raw.shape[1]
        bins = raw.reshape(4, REG_MAX, cells * cells).astype(np.float64)
        probabilities = np.exp(bins - bins.max(axis=1, keepdims=True))
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        distance = (probabilities * np.arange(REG_MAX)[None, :, None]).sum(axis=1)  # [4, anchors]
        ys, xs = np.divmod(np.arange(cells * cells), cells)
        centre = np.stack([xs + 0.5, ys + 0.5])
        top_left, bottom_right = centre - distance[:2], centre + distance[2:]
        boxes.append(np.concatenate([(top_left + bottom_right) / 2, bottom_right - top_left]) * stride)
        scores.append(1 / (1 + np.exp(-logits.reshape(3, -1).astype(np.float64))))
    want = np.concatenate([np.concatenate(boxes, axis=1), np.concatenate(scores, axis=1)])
    got = values["output"][0]
    assert got.shape == (4 + 3, 12 * 12 + 6 * 6 + 3 * 3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)
    assert (got[2:4] > 0).all() and 0 < got[4:].max() < 1


def test_widths_share_the_backbone_and_nothing_else() -> None:
    large = initializers(zoo.build("yolo_detector", resolution=64))
    small = initializers(zoo.build("yolo_detector", resolution=64, neck_width=0.5))
    backbone = {name for name in large if name.startswith("backbone.")}
    assert backbone and backbone <= small.keys() and all(large[name] == small[name] for name in backbone)
    learned = {name for name in large.keys() & small.keys() if name.endswith((".weight", ".bias"))}
    assert learned == {name for name in backbone if name.endswith((".weight", ".bias"))}


def test_random_weights_give_a_few_confident_anchors() -> None:
    """What makes the example's output look like detections: some anchors pass 0.3, most do not."""
    output = run_ort(zoo.build("yolo_detector"), seed=5)[0]
    confident = int((output[4:].max(axis=0) > 0.3).sum())
    assert 0 < confident < 100 and output.shape == (84, 2100)


@pytest.fixture(scope="module")
def detect_app():  # type: ignore[no-untyped-def]
    return load_app(REPO / "apps" / "detect.yaml")


def test_the_example_shares_the_backbone_in_one_unit(detect_app) -> None:  # type: ignore[no-untyped-def]
    moc = derive_moc(detect_app.models, detect_app.config.adaptive)
    shared = [layer for layer in moc.layers if len(layer.scenarios) == 2]
    backbone = [layer for layer in detect_app.models["large"].compute_layers if layer.name.startswith("backbone.")]
    assert len(shared) >= len(backbone) > 50
    with runtime_for(detect_app, use_build=False) as runtime:
        assert any(set(unit.scenarios) == {"large", "small"} for unit in runtime.plan.units)
        references = References(detect_app)
        for index, scenario in enumerate(("large", "small", "large")):
            runtime.switch(scenario)
            frame = random_frame(detect_app, index)
            result = next(runtime.process([frame]))
            assert result.scenario == scenario
            assert_equivalent(result.outputs, references.outputs(scenario, frame), scenario)
            assert {d["class"] for d in result.value.to_list()} <= set(range(80))
