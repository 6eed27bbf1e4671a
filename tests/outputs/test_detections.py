"""Decoding and class-aware NMS (``sbrs.outputs.detections``) against a plain reference written box by box.

The reference below is the textbook greedy loop over Python floats: best class per anchor, keep scores above
the confidence, sort by score (ties in anchor order), walk down the list keeping a box unless a kept box of
its class overlaps it with an IoU above the threshold, take the first ``max_detections``, clip to the frame.
It shares no code with the vectorised implementation. The crafted cases place boxes by hand at the edges
that matter: overlap just above and at the IoU threshold, scores at the confidence, one class or two, a chain
where a suppressed box must not suppress the next one (greedy NMS, not "any better box overlaps").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbrs.outputs.detections import class_aware_nms, detect
from sbrs.outputs.spec import DetectionsSpec

FRAME = (100, 200)  # height, width


def reference_iou(a: list[float], b: list[float]) -> float:
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    union = max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1]) + max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def reference(boxes: list[list[float]], class_scores: list[list[float]], *, confidence: float, iou: float,
              max_detections: int, layout: str, frame: tuple[int, int] = FRAME,
              normalized: bool = False) -> list[tuple[list[float], float, int]]:
    """``boxes[anchor]`` as ``layout``, ``class_scores[anchor][class]`` → [(box xyxy, score, class)], best first."""
    height, width = frame
    candidates = []
    for anchor, (box, scores) in enumerate(zip(boxes, class_scores, strict=True)):
        best = 0
        for label in range(len(scores)):
            if scores[label] > scores[best]:
                best = label
        score = float(scores[best])
        if not score > confidence:
            continue
        values = [float(v) for v in box]
        if layout == "cxcywh":
            cx, cy, w, h = values
            values = [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]
        if normalized:
            values = [values[0] * width, values[1] * height, values[2] * width, values[3] * height]
        candidates.append((score, anchor, best, values))
    candidates.sort(key=lambda item: (-item[0], item[1]))
    kept: list[tuple[float, int, int, list[float]]] = []
    for candidate in candidates:
        if all(not (other[2] == candidate[2] and reference_iou(other[3], candidate[3]) > iou) for other in kept):
            kept.append(candidate)
    result = []
    for score, _, label, (x1, y1, x2, y2) in kept[:max_detections]:
        clipped = [min(max(x1, 0.0), width), min(max(y1, 0.0), height), min(max(x2, 0.0), width),
                   min(max(y2, 0.0), height)]
        result.append((clipped, score, label))
    return result


def yolo_output(boxes: list[list[float]], class_scores: list[list[float]]) -> dict[str, np.ndarray]:
    """The [1, 4 + classes, anchors] tensor of ``boxes`` (cx, cy, w, h) and ``class_scores`` per anchor."""
    rows = np.concatenate([np.array(boxes, np.float32), np.array(class_scores, np.float32)], axis=1)
    return {"output": rows.T[None].copy()}


def check_against_reference(outputs: dict[str, np.ndarray], spec: DetectionsSpec, boxes: list[list[float]],
                            class_scores: list[list[float]], frame: tuple[int, int] = FRAME) -> list[Any]:
    got = detect(outputs, spec, frame)
    # the reference reads the very float32 values the implementation reads
    boxes32 = np.array(boxes, np.float32).tolist()
    scores32 = np.array(class_scores, np.float32).tolist()
    want = reference(boxes32, scores32, confidence=spec.confidence, iou=spec.iou,
                     max_detections=spec.max_detections, layout=spec.box_layout, frame=frame,
                     normalized=spec.normalized)
    assert len(got) == len(want), (got.to_list(), want)
    for (box, score, label), got_box, got_score, got_label in zip(want, got.boxes, got.scores, got.classes,
                                                                  strict=True):
        np.testing.assert_allclose(got_box, box, rtol=1e-6, atol=1e-4)
        assert got_score == np.float32(score) and got_label == label
    return want


def test_an_overlapping_box_of_the_same_class_is_suppressed_and_of_another_class_kept() -> None:
    # anchor 0: the best; anchor 1: IoU 0.6 with it, same class; anchor 2: the same box as 1, class 1
    boxes = [[50, 50, 40, 40], [54, 50, 40, 40], [54, 50, 40, 40], [150, 50, 20, 20]]
    scores = [[0.9, 0.0], [0.8, 0.0], [0.0, 0.7], [0.6, 0.1]]
    want = check_against_reference(yolo_output(boxes, scores), DetectionsSpec(iou=0.45), boxes, scores)
    assert [(score, label) for _, score, label in want] == [(pytest.approx(0.9), 0), (pytest.approx(0.7), 1),
                                                            (pytest.approx(0.6), 0)]


def test_iou_at_the_threshold_keeps_both_boxes_and_just_above_suppresses() -> None:
    # [0, 0, 4, 1] and [0, 0, 2, 1]: intersection 2, union 4, IoU exactly 0.5
    boxes = [[2, 0.5, 4, 1], [1, 0.5, 2, 1]]
    scores = [[0.9], [0.8]]
    outputs = yolo_output(boxes, scores)
    assert len(check_against_reference(outputs, DetectionsSpec(iou=0.5), boxes, scores)) == 2
    assert len(check_against_reference(outputs, DetectionsSpec(iou=0.4999), boxes, scores)) == 1


def test_a_score_at_the_confidence_is_dropped_and_just_above_kept() -> None:
    boxes = [[20, 20, 10, 10], [60, 20, 10, 10]]
    scores = [[0.25], [float(np.nextafter(np.float32(0.25), np.float32(1)))]]
    want = check_against_reference(yolo_output(boxes, scores), DetectionsSpec(confidence=0.25), boxes, scores)
    assert [box for box, _, _ in want] == [[55.0, 15.0, 65.0, 25.0]]


def test_a_suppressed_box_does_not_suppress_the_next_one() -> None:
    """A (best) suppresses B; B overlaps C but is gone, so C stays (greedy NMS; "any better box overlaps
    it" would drop C too)."""
    boxes = [[10, 50, 20, 20], [22, 50, 20, 20], [34, 50, 20, 20]]  # A-B and B-C overlap (IoU 0.25), A-C not
    scores = [[0.9], [0.8], [0.7]]
    want = check_against_reference(yolo_output(boxes, scores), DetectionsSpec(iou=0.2), boxes, scores)
    assert [score for _, score, _ in want] == [pytest.approx(0.9), pytest.approx(0.7)]


def test_equal_scores_keep_anchor_order() -> None:
    boxes = [[50, 50, 20, 20], [52, 50, 20, 20], [150, 50, 20, 20]]
    scores = [[0.5], [0.5], [0.5]]
    want = check_against_reference(yolo_output(boxes, scores), DetectionsSpec(), boxes, scores)
    assert [box[0] for box, _, _ in want] == [40.0, 140.0]  # anchor 0 beats anchor 1, anchor 2 is apart


def test_max_detections_keeps_the_best_and_boxes_are_clipped_to_the_frame() -> None:
    boxes = [[10 + 30 * k, 50, 20, 20] for k in range(6)] + [[195, 98, 20, 20]]  # the last sticks out
    scores = [[0.3 + 0.05 * k] for k in range(6)] + [[0.99]]
    spec = DetectionsSpec(max_detections=3)
    want = check_against_reference(yolo_output(boxes, scores), spec, boxes, scores)
    assert len(want) == 3 and want[0][0] == [185.0, 88.0, 200.0, 100.0]


def test_no_candidates_give_empty_detections() -> None:
    got = detect(yolo_output([[5, 5, 2, 2]], [[0.1]]), DetectionsSpec(), FRAME)
    assert len(got) == 0 and got.boxes.shape == (0, 4) and got.to_list() == []


def test_ssd_layout_with_normalised_corners_softmax_and_a_background_class() -> None:
    boxes = [[0.1, 0.1, 0.3, 0.5], [0.12, 0.1, 0.32, 0.5], [0.6, 0.2, 0.9, 0.9]]
    logits = [[0.0, 3.0, 0.0], [0.0, 2.5, 0.0], [5.0, 0.0, 4.5]]  # anchor 2: background best, class 2 next
    spec = DetectionsSpec(format="ssd", normalized=True, activation="softmax", background=0, confidence=0.3)
    outputs = {"boxes": np.array([boxes], np.float32), "scores": np.array([logits], np.float32)}
    got = detect(outputs, spec, FRAME)
    shifted = np.exp(np.array(logits, np.float64) - np.max(logits, axis=1, keepdims=True))
    probabilities = shifted / shifted.sum(axis=1, keepdims=True)
    probabilities[:, 0] = -np.inf  # the background class never wins
    want = reference(np.array(boxes, np.float32).tolist(), probabilities.tolist(), confidence=0.3, iou=0.45,
                     max_detections=100, layout="xyxy", normalized=True)
    assert got.classes.tolist() == [label for _, _, label in want] == [1, 2]
    np.testing.assert_allclose(got.boxes, [box for box, _, _ in want], rtol=1e-5)
    np.testing.assert_allclose(got.scores, [score for _, score, _ in want], rtol=1e-6)


def test_sigmoid_activation_turns_logits_into_scores() -> None:
    boxes = [[50, 50, 20, 20]]
    got = detect(yolo_output(boxes, [[0.0, 2.0]]), DetectionsSpec(activation="sigmoid"), FRAME)
    assert got.classes.tolist() == [1] and got.scores[0] == pytest.approx(1 / (1 + np.exp(-2.0)))


def test_nms_alone_on_empty_input() -> None:
    assert class_aware_nms(np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64), 0.5).tolist() == []


# coordinates on a coarse grid give exact ties, touching boxes and IoUs exactly at thresholds
coordinate = st.integers(0, 40).map(lambda v: v * 5.0)
size = st.integers(0, 16).map(lambda v: v * 5.0)
score = st.integers(0, 20).map(lambda v: v / 20)
anchor = st.tuples(coordinate, coordinate, size, size, st.lists(score, min_size=3, max_size=3))


@settings(max_examples=200, deadline=None)
@given(anchors=st.lists(anchor, min_size=0, max_size=40), iou=st.sampled_from([0.0, 0.25, 0.45, 0.5, 1.0]),
       confidence=st.sampled_from([0.0, 0.25, 0.5]), max_detections=st.integers(1, 50))
def test_random_layouts_agree_with_the_reference(anchors: list[Any], iou: float, confidence: float,
                                                 max_detections: int) -> None:
    boxes = [[cx, cy, w, h] for cx, cy, w, h, _ in anchors]
    scores = [list(s) for *_, s in anchors]
    spec = DetectionsSpec(iou=iou, confidence=confidence, max_detections=max_detections)
    if not anchors:
        outputs = {"output": np.zeros((1, 7, 0), np.float32)}
        assert len(detect(outputs, spec, FRAME)) == 0
        return
    check_against_reference(yolo_output(boxes, scores), spec, boxes, scores)


def test_boxes_of_a_resized_scenario_are_scaled_from_its_input_to_the_frame() -> None:
    """A scenario with ``input_size: [50, 50]`` on frames of 100 x 200: its boxes are in the model's pixels."""
    boxes, scores = [[25, 25, 10, 10], [45, 10, 10, 4]], [[0.9], [0.8]]
    got = detect(yolo_output(boxes, scores), DetectionsSpec(), FRAME, model_size=(50, 50))
    np.testing.assert_allclose(got.boxes, [[80, 40, 120, 60], [160, 16, 200, 24]], rtol=1e-6)
    same = detect(yolo_output(boxes, scores), DetectionsSpec(), FRAME, model_size=FRAME)
    np.testing.assert_allclose(same.boxes, detect(yolo_output(boxes, scores), DetectionsSpec(), FRAME).boxes)
    normalised = DetectionsSpec(normalized=True)  # corners in [0, 1] are the frame's whatever the input size
    unit = [[0.5, 0.5, 0.2, 0.2]]
    np.testing.assert_allclose(detect(yolo_output(unit, [[0.9]]), normalised, FRAME, model_size=(50, 50)).boxes,
                               detect(yolo_output(unit, [[0.9]]), normalised, FRAME).boxes)
