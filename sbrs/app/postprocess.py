"""``postprocess:`` of an app file (the default of every scenario) or of one scenario → a ``PostprocessSpec``.

Short forms: ``top-k``, ``detections``, ``raw`` (each with its defaults) or ``module:function``; long form:
a mapping with ``kind`` and that kind's keys (``sbrs.app.schema``: ``TopKEntry``, ``DetectionsEntry``,
``RawEntry``, ``FunctionEntry``). Errors are one line ``file:line: field: message`` like every other field's.
``check_model_outputs`` is the part that needs the imported models (``sbrs.app.app.load_app``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sbrs.errors import InputError
from sbrs.outputs.spec import (
    KINDS,
    DetectionsSpec,
    FunctionSpec,
    PostprocessSpec,
    RawSpec,
    SpecLocation,
    TopKSpec,
    describe,
)

if TYPE_CHECKING:
    from sbrs.app.settings import AppConfig
    from sbrs.app.yaml_lines import LocatedYaml, Path_
    from sbrs.model import CnnModel

SHORT_FORMS = ("top-k", "detections", "raw")
ALLOWED = "top-k, detections, raw, or module:function (a Python function of yours)"


def resolve_postprocess(raw: Any, doc: LocatedYaml, path: Path_, origin: str) -> PostprocessSpec:
    """The spec written at ``path`` of ``doc`` (``origin``: ``app`` or ``scenario``)."""
    from sbrs.app.schema import FUNCTION_PATTERN, DetectionsEntry, FunctionEntry, RawEntry, TopKEntry, validate
    from sbrs.app.yaml_lines import format_path

    at = SpecLocation(origin, format_path(path), doc.line_of(path))
    if isinstance(raw, str):
        if raw in SHORT_FORMS:
            raw = {"kind": raw}
        elif ":" in raw:
            if not re.match(FUNCTION_PATTERN, raw):
                raise doc.error(path, f"'{raw}' is not module:function (a dotted module name, a colon, a name)")
            raw = {"kind": "function", "function": raw}
        else:
            raise doc.error(path, f"unknown post-processor '{raw}' (allowed: {ALLOWED})")
    if not isinstance(raw, dict):
        raise doc.error(path, f"expected {ALLOWED}, or a mapping with 'kind'; got {type(raw).__name__}")
    kind = raw.get("kind")
    if kind is None:
        raise doc.error((*path, "kind"), f"required key is missing (one of {', '.join(KINDS)})")
    if kind not in KINDS:
        raise doc.error((*path, "kind"), f"unknown kind {kind!r} (allowed: {', '.join(KINDS)})")
    if kind == "function" and isinstance(raw.get("function"), str) and not re.match(FUNCTION_PATTERN, raw["function"]):
        raise doc.error((*path, "function"), f"'{raw['function']}' is not module:function")
    if kind == "top-k":
        entry = validate(TopKEntry, raw, doc, path)
        return TopKSpec(k=entry.k, at=at)
    if kind == "raw":
        entry = validate(RawEntry, raw, doc, path)
        return RawSpec(max_elements=entry.max_elements, at=at)
    if kind == "function":
        entry = validate(FunctionEntry, raw, doc, path)
        return FunctionSpec(function=entry.function, at=at)
    entry = validate(DetectionsEntry, raw, doc, path)
    given = entry.model_dump(exclude={"kind"}, exclude_none=True)
    for key in ("confidence", "iou"):
        if key in given:
            given[key] = float(given[key])
    return DetectionsSpec(**given, at=at)


def check_model_outputs(config: AppConfig, models: dict[str, CnnModel]) -> None:
    """Refuse a scenario whose post-processor cannot read its model's outputs (one line: file, line, field)."""
    from sbrs.outputs.postprocess import check_outputs

    for scenario in config.scenarios:
        spec = scenario.postprocess
        model = models[scenario.name]
        outputs = {name: (model.tensors[name].shape, model.tensors[name].dtype) for name in model.graph_outputs}
        why = check_outputs(spec, outputs, config.input.shape)
        if why is not None:
            file = config.path if spec.at.origin == "app" else scenario.defined_in
            raise InputError(f"scenario '{scenario.name}' ({describe(spec)}): {why}", file=file, line=spec.at.line,
                             field=spec.at.field)
