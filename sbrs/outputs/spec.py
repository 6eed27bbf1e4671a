"""What an app's ``postprocess:`` asks for, resolved: one frozen dataclass per kind, plain JSON in a build.

The app stage validates the YAML (``sbrs.app.schema``, ``sbrs.app.config``) and turns it into these; a build
stores them in its manifest (``AppConfig.to_dict``) and ``spec_from_dict`` reads them back, so ``sbrs run``
needs neither YAML nor pydantic to know what to do with a frame's outputs. Every spec remembers where it was
written (``origin``, ``field``, ``line``) so that an error found only when the run starts (a user function that
does not import) still names the file, line and field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

#: The kinds ``postprocess:`` takes; a string ``module:function`` is the short form of kind ``function``.
KINDS: tuple[str, ...] = ("top-k", "detections", "raw", "function")
#: How a detector lays out its outputs: one ``[1, 4 + classes, anchors]`` tensor (YOLO, as ultralytics exports
#: it), or a pair ``boxes [1, anchors, 4]`` + ``scores [1, anchors, classes]`` (SSD style).
DETECTION_FORMATS: tuple[str, ...] = ("yolo", "ssd")
BOX_FORMATS: tuple[str, ...] = ("cxcywh", "xyxy")
SCORE_ACTIVATIONS: tuple[str, ...] = ("none", "sigmoid", "softmax")


@dataclass(frozen=True)
class SpecLocation:
    """Where a ``postprocess:`` was written: the app file (the default of every scenario) or a scenario's own
    entry (``scenario``: the file that defines the scenario), its field path and line."""

    origin: str = "app"
    field: str = "postprocess"
    line: int | None = None


@dataclass(frozen=True)
class TopKSpec:
    """The ``k`` best classes of every ``[1, C]`` output (classifiers; the default)."""

    k: int = 5
    at: SpecLocation = SpecLocation()
    kind: str = field(default="top-k", init=False)


@dataclass(frozen=True)
class DetectionsSpec:
    """Boxes, scores and classes decoded from a detector's outputs, kept by ``confidence`` and class-aware
    non-maximum suppression (``sbrs.outputs.detections``).

    ``format``: ``yolo`` reads ``output`` (default: the model's only output) as ``[1, 4 + classes, anchors]``;
    ``ssd`` reads ``boxes`` ``[1, anchors, 4]`` and ``scores`` ``[1, anchors, classes]``. ``box_format``: how a
    box is written (default ``cxcywh`` for yolo, ``xyxy`` for ssd); ``normalized``: coordinates are fractions of
    the input's width and height instead of pixels. ``activation`` turns the class scores into probabilities
    (``none``: they already are). ``background``: a class index never reported (SSD's class 0).
    A candidate needs a score above ``confidence``; of two boxes of one class overlapping with an IoU above
    ``iou``, the lower-scored one goes. At most ``max_candidates`` (the best) enter the suppression and
    ``max_detections`` come out.
    """

    format: str = "yolo"
    output: str | None = None
    boxes: str = "boxes"
    scores: str = "scores"
    box_format: str | None = None
    normalized: bool = False
    activation: str = "none"
    background: int | None = None
    confidence: float = 0.25
    iou: float = 0.45
    max_detections: int = 100
    max_candidates: int = 1000
    at: SpecLocation = SpecLocation()
    kind: str = field(default="detections", init=False)

    @property
    def box_layout(self) -> str:
        """The box format in force (``box_format``, else the format's usual one)."""
        return self.box_format or ("cxcywh" if self.format == "yolo" else "xyxy")


@dataclass(frozen=True)
class RawSpec:
    """The outputs as nested lists (for small outputs: at most ``max_elements`` numbers a frame in all)."""

    max_elements: int = 10_000
    at: SpecLocation = SpecLocation()
    kind: str = field(default="raw", init=False)


@dataclass(frozen=True)
class FunctionSpec:
    """The user's own Python: ``function`` is ``module:function``, imported once when the runtime starts (a
    ``module.py`` beside the app file, else an importable module) and called per frame."""

    function: str
    at: SpecLocation = SpecLocation()
    kind: str = field(default="function", init=False)


PostprocessSpec = TopKSpec | DetectionsSpec | RawSpec | FunctionSpec
DEFAULT_SPEC = TopKSpec()

_BY_KIND: dict[str, type[TopKSpec] | type[DetectionsSpec] | type[RawSpec] | type[FunctionSpec]] = {
    "top-k": TopKSpec, "detections": DetectionsSpec, "raw": RawSpec, "function": FunctionSpec}


def spec_from_dict(data: Mapping[str, Any] | None) -> PostprocessSpec:
    """A spec from its ``dataclasses.asdict`` form (a build's manifest); None (a build made before
    ``postprocess:`` existed) is the default, top-5."""
    if data is None:
        return DEFAULT_SPEC
    values = dict(data)
    kind = values.pop("kind")
    location = SpecLocation(**values.pop("at", {}))
    cls = _BY_KIND[kind]
    known = {f.name for f in fields(cls) if f.init}
    return cls(at=location, **{key: value for key, value in values.items() if key in known})  # type: ignore[arg-type]


def describe(spec: PostprocessSpec) -> str:
    """One short name of what a spec does, for messages: ``top-5``, ``detections (yolo)``, ``raw``,
    ``mod:fn``."""
    if isinstance(spec, TopKSpec):
        return f"top-{spec.k}"
    if isinstance(spec, DetectionsSpec):
        return f"detections ({spec.format})"
    if isinstance(spec, RawSpec):
        return "raw"
    return spec.function
