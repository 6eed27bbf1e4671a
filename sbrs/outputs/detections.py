"""Detector outputs → boxes in the frame's pixels, scores and classes: decoding and class-aware NMS in numpy.

Two layouts (``DetectionsSpec.format``):

- ``yolo``: one tensor ``[1, 4 + classes, anchors]``, per anchor a box then one score per class (ultralytics'
  exports: boxes ``cx, cy, w, h`` in input pixels, class scores already sigmoid probabilities);
- ``ssd``: ``boxes [1, anchors, 4]`` and ``scores [1, anchors, classes]``, already decoded from the anchors.

Each anchor keeps its best class (one label per box, as ultralytics' default). Anchors whose score is above
``confidence`` are the candidates (at most ``max_candidates``, the best); greedy non-maximum suppression then
runs per class: in decreasing score, a box is dropped when a kept box of its class overlaps it with an IoU
above ``iou``. The first ``max_detections`` survivors are returned, best first, their boxes ``[x1, y1, x2, y2]``
clipped to the frame. Ties in score keep anchor order.

No Python loop runs per box: the suppression is the fixed point of ``keep[i] = no kept j < i of i's class
overlaps i``, computed for all boxes at once from their IoU matrix, repeated until it no longer changes. The
equation determines keep[0], then keep[1], ... one after the other, so each pass fixes at least one more
entry and the passes stop at the longest chain of boxes suppressing each other (a handful in practice),
with the very result of the greedy loop. Coordinates and IoUs are computed in float64.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from sbrs.outputs.spec import DetectionsSpec


@dataclass(frozen=True)
class Detections:
    """A frame's detections, best first: ``boxes`` ``[n, 4]`` float32 ``x1, y1, x2, y2`` in the frame's pixels,
    ``scores`` ``[n]`` float32, ``classes`` ``[n]`` int64."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def to_list(self) -> list[dict[str, Any]]:
        """``[{"box": [x1, y1, x2, y2], "score": s, "class": c}, ...]`` (boxes to 0.01 px, scores to 1e-6)."""
        return [{"box": [round(float(v), 2) for v in box], "score": round(float(score), 6), "class": int(label)}
                for box, score, label in zip(self.boxes, self.scores, self.classes, strict=True)]


def empty_detections() -> Detections:
    return Detections(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64))


def detect(outputs: Mapping[str, np.ndarray], spec: DetectionsSpec, frame_size: tuple[int, int],
           model_size: tuple[int, int] | None = None) -> Detections:
    """The detections of one frame's ``outputs`` under ``spec``; ``frame_size`` is (height, width) in pixels,
    ``model_size`` the model's input size where the scenario resizes the frame (app.yaml ``input_size``)."""
    if spec.format == "yolo":
        name = spec.output if spec.output is not None else next(iter(outputs))
        prediction = outputs[name][0]
        boxes, class_scores = prediction[:4].T, prediction[4:]
    else:
        boxes, class_scores = outputs[spec.boxes][0], outputs[spec.scores][0].T
    return decode(boxes, class_scores, spec, frame_size, model_size)


def decode(boxes: np.ndarray, class_scores: np.ndarray, spec: DetectionsSpec,
           frame_size: tuple[int, int], model_size: tuple[int, int] | None = None) -> Detections:
    """``boxes`` ``[anchors, 4]`` as ``spec.box_layout`` writes them, ``class_scores`` ``[classes, anchors]``
    → the detections (module docstring). Boxes in the pixels of a model input of ``model_size`` (a scenario
    that resizes the frame) are scaled to the frame's."""
    scores = _activated(np.asarray(class_scores), spec.activation)
    if spec.background is not None and spec.background < scores.shape[0]:
        scores = scores.copy()
        scores[spec.background] = -np.inf
    best = scores.argmax(axis=0)
    confidence = np.take_along_axis(scores, best[None], axis=0)[0].astype(np.float64)  # thresholds are float64
    candidates = np.flatnonzero(confidence > spec.confidence)
    if candidates.size == 0:
        return empty_detections()
    order = np.argsort(-confidence[candidates], kind="stable")[:spec.max_candidates]
    candidates = candidates[order]  # best first, ties in anchor order
    corners = _corners(np.asarray(boxes)[candidates].astype(np.float64), spec.box_layout)
    height, width = frame_size
    if spec.normalized:
        corners *= np.array([width, height, width, height], np.float64)
    elif model_size is not None and tuple(model_size) != (height, width):
        across, down = width / model_size[1], height / model_size[0]
        corners *= np.array([across, down, across, down], np.float64)
    kept = class_aware_nms(corners, confidence[candidates], best[candidates], spec.iou)
    kept = kept[:spec.max_detections]
    clipped = np.clip(corners[kept], 0.0, np.array([width, height, width, height], np.float64))
    return Detections(clipped.astype(np.float32), confidence[candidates][kept].astype(np.float32),
                      best[candidates][kept].astype(np.int64))


def class_aware_nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float) -> np.ndarray:
    """Indices of ``boxes`` (``[n, 4]`` ``x1, y1, x2, y2``) that greedy per-class NMS keeps, best first.

    A box goes when a kept box of the same class with a higher score (or an equal score and a lower index)
    overlaps it with an IoU above ``iou``. Vectorised over the boxes (module docstring).
    """
    count = scores.shape[0]
    if count == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(-scores, kind="stable")
    ordered, labels = boxes[order], classes[order]
    overlaps = (pairwise_iou(ordered) > iou) & (labels[:, None] == labels[None, :])
    overlaps = np.triu(overlaps, 1)  # overlaps[j, i], j before i: j, if kept, suppresses i
    keep = np.ones(count, bool)
    while True:
        updated = ~(overlaps & keep[:, None]).any(axis=0)
        if np.array_equal(updated, keep):
            return order[keep]
        keep = updated


def pairwise_iou(boxes: np.ndarray) -> np.ndarray:
    """``[n, n]`` intersection over union of boxes ``x1, y1, x2, y2`` (0 where both are empty)."""
    x1, y1, x2, y2 = (boxes[:, i] for i in range(4))
    area = np.clip(x2 - x1, 0.0, None) * np.clip(y2 - y1, 0.0, None)
    width = np.clip(np.minimum(x2[:, None], x2[None, :]) - np.maximum(x1[:, None], x1[None, :]), 0.0, None)
    height = np.clip(np.minimum(y2[:, None], y2[None, :]) - np.maximum(y1[:, None], y1[None, :]), 0.0, None)
    intersection = width * height
    union = area[:, None] + area[None, :] - intersection
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, intersection / union, 0.0)


def _corners(boxes: np.ndarray, layout: str) -> np.ndarray:
    if layout == "xyxy":
        return boxes
    centre, size = boxes[:, :2], boxes[:, 2:]
    return np.concatenate([centre - size / 2, centre + size / 2], axis=1)


def _activated(scores: np.ndarray, activation: str) -> np.ndarray:
    if activation == "sigmoid":
        return 1.0 / (1.0 + np.exp(-scores.astype(np.float64)))
    if activation == "softmax":
        shifted = np.exp(scores.astype(np.float64) - scores.max(axis=0, keepdims=True))
        return shifted / shifted.sum(axis=0, keepdims=True)
    return scores
