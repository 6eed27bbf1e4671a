"""Post-processors: what a scenario's ``postprocess:`` makes of a frame's outputs, and how that reads as JSON.

The runtime holds one post-processor per scenario (``postprocessors_for``, built when it starts: a user
function is imported then, once) and hands the table to every ``FrameResult``; nothing runs until the caller
reads ``result.value`` (``value_of``), so a switch's response delay never includes it: the caller holds the raw
outputs first and pays for decoding, suppression or its own function on its own time.

    top-k       {output: [(class, score), ...]} for every [1, C] output, the k best
    detections  ``Detections`` (``sbrs.outputs.detections``): boxes in the frame's pixels, scores, classes
    raw         {output: nested lists}
    function    whatever ``module:function(outputs, frame)`` returns; ``frame`` is a ``FrameMeta``

``check_outputs`` is the app stage's check of a spec against a scenario's output shapes (``sbrs check``,
``sbrs build``), so a detector spec that cannot read the model is refused with the file and line.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sbrs.digest import sha256
from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.outputs.detections import Detections, detect
from sbrs.outputs.spec import (
    DEFAULT_SPEC,
    DetectionsSpec,
    FunctionSpec,
    PostprocessSpec,
    RawSpec,
    SpecLocation,
    TopKSpec,
    describe,
)

#: Classes in a top-k summary when nothing else is asked (``sbrs run``'s JSON lines, ``TopKSpec.k``).
TOP_K = 5


class PostprocessError(SbrsRuntimeError):
    """A frame's post-processing failed (the user's function raised, or returned what JSON cannot hold). One
    line; ``sbrs run`` writes it as the frame's ``error`` and goes on with the next frame."""


@dataclass(frozen=True)
class FrameMeta:
    """What a user function learns about the frame besides its outputs: its index in the stream, the scenario
    that computed it, its latency in seconds and, on the first frame of a new scenario, the switch record."""

    index: int
    scenario: str
    latency_s: float
    switch: Any = None


class PostProcessor:
    """Turns a frame's outputs into a value (``__call__``) and that value into JSON (``to_json``), written under
    ``json_key`` in ``sbrs run``'s line (None: the line's ``outputs`` summary already says it all). ``top``: the
    classes a ``[1, C]`` output's summary lists."""

    json_key: str | None = None
    top: int = TOP_K

    def __init__(self, spec: PostprocessSpec) -> None:
        self.spec = spec
        self.name = describe(spec)

    def __call__(self, outputs: Mapping[str, np.ndarray], frame: FrameMeta) -> Any:
        raise NotImplementedError

    def to_json(self, value: Any) -> Any:
        return jsonable(value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class TopK(PostProcessor):
    def __init__(self, spec: TopKSpec) -> None:
        super().__init__(spec)
        self.top = spec.k

    def __call__(self, outputs: Mapping[str, np.ndarray], frame: FrameMeta) -> dict[str, list[tuple[int, float]]]:
        return {name: top_k(value[0], self.top) for name, value in outputs.items()
                if value.ndim == 2 and value.shape[0] == 1 and np.issubdtype(value.dtype, np.number)}


class DetectionDecoder(PostProcessor):
    json_key = "detections"

    def __init__(self, spec: DetectionsSpec, frame_size: tuple[int, int],
                 model_size: tuple[int, int] | None = None) -> None:
        super().__init__(spec)
        self.detections = spec
        self.frame_size = frame_size
        self.model_size = model_size  # the scenario's own input size, where it resizes the frame

    def __call__(self, outputs: Mapping[str, np.ndarray], frame: FrameMeta) -> Detections:
        return detect(outputs, self.detections, self.frame_size, self.model_size)

    def to_json(self, value: Detections) -> list[dict[str, Any]]:
        return value.to_list()


class Raw(PostProcessor):
    json_key = "raw"

    def __call__(self, outputs: Mapping[str, np.ndarray], frame: FrameMeta) -> dict[str, Any]:
        return {name: value.tolist() for name, value in outputs.items()}


class UserFunction(PostProcessor):
    json_key = "value"

    def __init__(self, spec: FunctionSpec, function: Callable[..., Any]) -> None:
        super().__init__(spec)
        self.function = function

    def __call__(self, outputs: Mapping[str, np.ndarray], frame: FrameMeta) -> Any:
        try:
            return self.function(outputs, frame)
        except Exception as error:
            raise PostprocessError(f"postprocess {self.name} failed on frame {frame.index} ({frame.scenario}): "
                                   f"{type(error).__name__}: {error}") from error

    def to_json(self, value: Any) -> Any:
        try:
            return jsonable(value)
        except TypeError as error:
            raise PostprocessError(f"postprocess {self.name} returned a value JSON cannot hold: {error}") from None


def top_k(row: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The ``k`` largest entries of ``row`` as (index, value), largest first, ties in index order."""
    best = np.argsort(-row, kind="stable")[:k]
    return [(int(i), float(row[i])) for i in best]


def jsonable(value: Any) -> Any:
    """``value`` with numpy arrays and scalars as lists and numbers, tuples as lists, and NaN or infinity as
    None (JSON has neither); TypeError names anything else that JSON cannot hold."""
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, Detections):
        return value.to_list()
    raise TypeError(f"a {type(value).__name__} is not JSON (return dicts, lists, numbers, strings or arrays)")


def value_of(postprocessors: Mapping[str, PostProcessor] | None, outputs: Mapping[str, np.ndarray],
             frame: FrameMeta) -> Any:
    """The post-processed value of one frame (``FrameResult.value``): its scenario's post-processor, top-5 for
    a scenario the table does not name."""
    processor = postprocessors.get(frame.scenario) if postprocessors is not None else None
    return (processor or DEFAULT_PROCESSOR)(outputs, frame)


DEFAULT_PROCESSOR = TopK(DEFAULT_SPEC)


def frame_size_of(input_shape: Sequence[int]) -> tuple[int, int]:
    """(height, width) of an image input ``[N, C, H, W]``; (1, 1) for inputs of another rank (no pixels)."""
    return (int(input_shape[2]), int(input_shape[3])) if len(input_shape) == 4 else (1, 1)


def postprocessors_for(specs: Mapping[str, PostprocessSpec], input_shape: Sequence[int], app_path: str,
                       defined_in: Mapping[str, str],
                       model_sizes: Mapping[str, tuple[int, int] | None] | None = None) -> dict[str, PostProcessor]:
    """Scenario → its post-processor (one object per distinct spec and model input size, so a user function
    shared by every scenario is imported once). ``app_path``: the app file (user modules are looked up beside
    it, and errors of the app's own ``postprocess:`` name it); ``defined_in``: the file of each scenario's entry;
    ``model_sizes``: each scenario's ``input_size`` where it has one. A user function that does not import is
    an ``InputError`` naming the file, line and field."""
    made: dict[tuple[PostprocessSpec, tuple[int, int] | None], PostProcessor] = {}
    table: dict[str, PostProcessor] = {}
    for scenario, spec in specs.items():
        model_size = (model_sizes or {}).get(scenario) if isinstance(spec, DetectionsSpec) else None
        if (spec, model_size) not in made:
            where = app_path if spec.at.origin == "app" else defined_in.get(scenario, app_path)
            made[spec, model_size] = make_postprocessor(spec, input_shape, Path(app_path).parent, where, model_size)
        table[scenario] = made[spec, model_size]
    return table


def make_postprocessor(spec: PostprocessSpec, input_shape: Sequence[int], search_dir: Path,
                       file: str | None = None, model_size: tuple[int, int] | None = None) -> PostProcessor:
    """The post-processor of ``spec`` (a function spec imports its module now; ``file`` names where the spec
    was written in the error if it cannot); ``model_size``: the scenario's own input size, if it has one."""
    if isinstance(spec, TopKSpec):
        return TopK(spec)
    if isinstance(spec, DetectionsSpec):
        return DetectionDecoder(spec, frame_size_of(input_shape), model_size)
    if isinstance(spec, RawSpec):
        return Raw(spec)
    return UserFunction(spec, load_function(spec.function, search_dir, file, spec.at))


def load_function(text: str, search_dir: Path, file: str | None = None,
                  at: SpecLocation | None = None) -> Callable[..., Any]:
    """``module:function``: ``module`` from ``search_dir/module.py`` (dots are folders) when that file exists,
    else by Python's import; each module once per process (a file's under a name of its own in ``sys.modules``,
    ``sbrs_user_<module>_<hash of its path>``: two apps' ``post.py`` in two folders are two modules)."""
    module_name = text.partition(":")[0]
    candidate = search_dir.joinpath(*module_name.split(".")).with_suffix(".py")

    def fail(message: str) -> InputError:
        return InputError(message, file=file, line=at.line if at else None, field=at.field if at else "postprocess")

    private_name = ""
    if candidate.is_file():
        path_hash = sha256(str(candidate.resolve()).encode()).hexdigest()[:12]
        private_name = f"sbrs_user_{module_name.replace('.', '_')}_{path_hash}"
        if private_name in sys.modules:
            return _function_of(sys.modules[private_name], text, fail)
    try:
        if private_name:
            module_spec = importlib.util.spec_from_file_location(private_name, candidate)
            if module_spec is None or module_spec.loader is None:
                raise ImportError(f"cannot load {candidate}")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[private_name] = module
            try:
                module_spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(private_name, None)
                raise
        else:
            module = importlib.import_module(module_name)
    except (Exception, SystemExit) as error:  # a module calling sys.exit() at import must not end the run
        where = f"{candidate} or an importable module" if not candidate.is_file() else str(candidate)
        raise fail(f"cannot import '{module_name}' ({where}): {type(error).__name__}: {error}") from None
    return _function_of(module, text, fail)


def _function_of(module: Any, text: str, fail: Callable[[str], InputError]) -> Callable[..., Any]:
    """The function ``text`` (``module:function``) names in ``module``."""
    module_name, _, function_name = text.partition(":")
    function = getattr(module, function_name, None)
    if function is None:
        raise fail(f"module '{module_name}' has no '{function_name}'")
    if not callable(function):
        raise fail(f"'{text}' is a {type(function).__name__}, not a function")
    return function


OutputShapes = Mapping[str, tuple[tuple[int, ...], str]]


def check_outputs(spec: PostprocessSpec, outputs: OutputShapes, input_shape: Sequence[int]) -> str | None:
    """Why ``spec`` cannot read a model with ``outputs`` (name → (shape, dtype)) and this input, or None."""
    if isinstance(spec, RawSpec):
        elements = sum(math.prod(shape) for shape, _ in outputs.values())
        if elements > spec.max_elements:
            return (f"raw writes every output as lists: {elements} numbers a frame, above max_elements "
                    f"{spec.max_elements} (raise it, or keep whole outputs with sbrs run --save-outputs)")
        return None
    if not isinstance(spec, DetectionsSpec):
        return None
    if len(input_shape) != 4:
        return f"detections need an image input [1, C, H, W]; the app's input is {list(input_shape)}"
    names = ", ".join(outputs)

    def tensor(name: str, key: str) -> tuple[tuple[int, ...], str] | str:
        if name not in outputs:
            return f"{key}: the model has no output '{name}' (outputs: {names})"
        dtype = outputs[name][1]
        if not dtype.startswith("float"):
            return f"output '{name}' is {dtype}; detections read float scores and boxes"
        return outputs[name]

    if spec.format == "yolo":
        if spec.output is None and len(outputs) != 1:
            return f"the model has {len(outputs)} outputs ({names}): name the one to decode with output:"
        found = tensor(spec.output or next(iter(outputs)), "output")
        if isinstance(found, str):
            return found
        shape = found[0]
        if len(shape) != 3 or shape[0] != 1 or shape[1] < 5:
            return (f"format yolo reads [1, 4 + classes, anchors]; output '{spec.output or next(iter(outputs))}' is "
                    f"{list(shape)}")
        classes = shape[1] - 4
    else:
        boxes, scores = tensor(spec.boxes, "boxes"), tensor(spec.scores, "scores")
        for found in (boxes, scores):
            if isinstance(found, str):
                return found
        box_shape, score_shape = boxes[0], scores[0]  # type: ignore[index]
        if len(box_shape) != 3 or box_shape[0] != 1 or box_shape[2] != 4:
            return f"format ssd reads boxes [1, anchors, 4]; '{spec.boxes}' is {list(box_shape)}"
        if len(score_shape) != 3 or score_shape[0] != 1 or score_shape[1] != box_shape[1]:
            return (f"format ssd reads scores [1, anchors, classes] with the anchors of boxes {list(box_shape)}; "
                    f"'{spec.scores}' is {list(score_shape)}")
        classes = score_shape[2]
    if spec.background is not None and spec.background >= classes:
        return f"background class {spec.background} does not exist (the model has {classes} classes)"
    return None
