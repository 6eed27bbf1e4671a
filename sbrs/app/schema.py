"""Strict schemas of the app and scenario YAML files (pydantic; unknown keys and wrong types are errors).

The app file's minimum contract is in DESIGN.md ("The app file"); later stages add sections here. ``validate``
checks data read from a file against one of them.
"""

from __future__ import annotations

import math
import typing
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AllowInfNan,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

if TYPE_CHECKING:
    from sbrs.app.yaml_lines import LocatedYaml, Path_

#: A finite number: YAML's ``.inf`` passes every bound of the form "> 0" and broke what read it (a declared fps of
#: ``.inf`` made the policy's min-max normalisation NaN; ``memory_limit_mb: .inf`` an OverflowError in the build)
Number = Annotated[StrictFloat, AllowInfNan(False)] | StrictInt
NonNegative = Annotated[Number, Field(ge=0)]
Weight = Annotated[Number, Field(ge=0, le=1)]
Name = Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")]

ADAPTIVE_ATTRIBUTES = ("I", "O", "par")
KNOWN_PROVIDERS = ("CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider")
DTYPES = ("float32", "float16", "float64", "uint8", "int8", "int32", "int64")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Requirements(Strict):
    """Thesis Section 5.6: weights (r_a, r_t, r_m, r_e) in [0, 1] summing to 1; an omitted weight is 0."""

    accuracy: Weight = 0.0
    throughput: Weight = 0.0
    memory: Weight = 0.0
    energy: Weight = 0.0

    @model_validator(mode="after")
    def _sum_to_one(self) -> Requirements:
        total = self.accuracy + self.throughput + self.memory + self.energy
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(f"requirement weights must sum to 1, they sum to {total:g}")
        return self


class Characteristics(Strict):
    """Declared (not measured) characteristics of a scenario, as in thesis Table 5.4."""

    accuracy: NonNegative | None = None
    fps: Annotated[Number, Field(gt=0)] | None = None
    energy_j: NonNegative | None = None
    memory_mb: NonNegative | None = None


Pixels = Annotated[StrictInt, Field(gt=0, le=16384)]

#: Why ``from`` and ``quantize`` come together (``sbrs.app.config`` names the one given in the error).
DERIVE_PAIR = ("'from' and 'quantize' go together: 'from: SCENARIO' names the scenario to derive from, "
               "'quantize: {mode: int8-static|fp16}' the precision")


class QuantizeEntry(Strict):
    """``quantize:`` of a derived scenario: the precision (``sbrs.model.precision.MODES``) and, for int8, the
    folder of calibration frames (``.npy`` files or images, relative to the file that declares the scenario)."""

    mode: Literal["int8-static", "fp16"]
    calibration: Annotated[StrictStr, Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _calibration_for_int8(self) -> QuantizeEntry:
        if self.calibration is not None and self.mode != "int8-static":
            raise ValueError(f"'calibration' applies to mode int8-static only; mode {self.mode} is not calibrated")
        return self


class ScenarioEntry(Strict):
    """One scenario: its CNN (exactly one of ``model``, ``layers``, ``zoo``, or ``from`` another scenario with
    ``quantize``) and its requirements."""

    name: Name
    model: Annotated[StrictStr, Field(min_length=1)] | None = None
    layers: list[dict[str, Any]] | None = None
    zoo: dict[str, Any] | None = None
    # ``from`` is a Python keyword: the field is ``from_``, the key the user writes is ``from``
    from_: Name | None = Field(default=None, alias="from")
    quantize: QuantizeEntry | None = None
    seed: StrictInt = 0
    requirements: Requirements = Requirements(accuracy=1.0)
    characteristics: Characteristics = Characteristics()
    postprocess: Any = None  # this scenario's own; checked by sbrs.app.postprocess (one model per kind)
    #: ``[H, W]``: the scenario runs at this input size; frames (at the app's ``input.shape``) are resized first
    input_size: Annotated[list[Pixels], Field(min_length=2, max_length=2)] | None = None

    @model_validator(mode="after")
    def _one_model_source(self) -> ScenarioEntry:
        given = [key for key in ("model", "layers", "zoo") if getattr(self, key) is not None]
        if self.from_ is not None:
            given.append("from")
        if len(given) != 1:
            raise ValueError("give exactly one of 'model' (ONNX path), 'layers' (inline list), 'zoo' or 'from'"
                             " (another scenario, with 'quantize')" + (f"; got {', '.join(given)}" if given else ""))
        if (self.from_ is None) != (self.quantize is None):
            raise ValueError(DERIVE_PAIR)
        return self


class ScenarioFileRef(Strict):
    file: Annotated[StrictStr, Field(min_length=1)]


MAX_INPUT_ELEMENTS = 1 << 26
"""Elements of one input frame at most (a 4K RGB frame has 25 M): checked before anything is allocated."""


class PreprocessEntry(Strict):
    """``input.preprocess``: how a picture becomes the input (``sbrs.app.preprocess``); every key optional."""

    resize: Literal["stretch", "letterbox", "center-crop"] = "stretch"
    pad_value: Annotated[StrictInt, Field(ge=0, le=255)] = 114
    colors: Literal["RGB", "BGR"] = "RGB"
    scale: Annotated[Number, Field(gt=0)] | None = None
    mean: Annotated[list[Number], Field(min_length=1, max_length=3)] | None = None
    std: Annotated[list[Annotated[Number, Field(gt=0)]], Field(min_length=1, max_length=3)] | None = None

    @field_validator("mean", "std", mode="before")
    @classmethod
    def _one_value_for_every_channel(cls, value: Any) -> Any:
        """``mean: 0.5`` is ``[0.5]``, one value for every channel (a bool stays what it is: refused)."""
        return [value] if isinstance(value, int | float) and not isinstance(value, bool) else value


class InputSpecEntry(Strict):
    name: Annotated[StrictStr, Field(min_length=1)] = "input"
    shape: Annotated[list[Annotated[StrictInt, Field(gt=0)]], Field(min_length=1, max_length=8)]
    dtype: Literal[DTYPES] = "float32"  # type: ignore[valid-type]
    preprocess: PreprocessEntry | None = None

    @field_validator("shape")
    @classmethod
    def _not_too_large(cls, shape: list[int]) -> list[int]:
        elements = math.prod(shape)
        if elements > MAX_INPUT_ELEMENTS:
            raise ValueError(f"{elements} elements per frame; sbrs accepts at most {MAX_INPUT_ELEMENTS}")
        return shape


class RuntimeEntry(Strict):
    providers: Annotated[list[Literal[KNOWN_PROVIDERS]], Field(min_length=1)] = ["CPUExecutionProvider"]  # type: ignore[valid-type]
    threads: Annotated[StrictInt, Field(ge=1, le=1024)] | None = None
    granularity: Literal["auto", "layer"] = "auto"
    transition: Literal["sbrs-tp", "naive"] = "sbrs-tp"
    share_min_mb: NonNegative | None = None  # None: the provider's default (sbrs.app.settings.UNIT_DEFAULTS_*)
    switch_steps: Annotated[StrictInt, Field(ge=1, le=64)] | None = None
    on_switch: Literal["finish", "cancel", "resume"] = "finish"
    threads_scope: Literal["session", "process"] = "session"
    streams: Literal[1, 2, "auto"] = "auto"
    session: Literal["units", "one", "auto"] | None = None  # None: the first provider's (settings.default_session)


class BatteryThresholdEntry(Strict):
    """``policy.battery[i]``: below this battery level, force ``scenario`` or rank by ``requirements``."""

    below: Weight
    scenario: Name | None = None
    requirements: Requirements | None = None

    @model_validator(mode="after")
    def _one_action(self) -> BatteryThresholdEntry:
        if (self.scenario is None) == (self.requirements is None):
            raise ValueError("give exactly one of 'scenario' (forced) or 'requirements' (weights to rank by)")
        return self


class TemperatureThresholdEntry(Strict):
    """``policy.temperature[i]``: above this temperature (°C), force ``scenario`` or rank by ``requirements``."""

    above: Annotated[Number, Field(ge=-273.15, le=1000)]
    scenario: Name | None = None
    requirements: Requirements | None = None

    @model_validator(mode="after")
    def _one_action(self) -> TemperatureThresholdEntry:
        if (self.scenario is None) == (self.requirements is None):
            raise ValueError("give exactly one of 'scenario' (forced) or 'requirements' (weights to rank by)")
        return self


class HysteresisEntry(Strict):
    """``policy.hysteresis``: absolute battery margin, relative fps margin, temperature margin in °C (see
    ``sbrs.control.policy``)."""

    battery: Annotated[Number, Field(ge=0, le=1)] = 0.05
    fps: Annotated[Number, Field(ge=0, lt=1)] = 0.1
    temperature: Annotated[Number, Field(ge=0, le=100)] = 5.0


class PolicyEntry(Strict):
    """``policy:``: how environment values choose a scenario (``sbrs.control.policy``); every key optional."""

    battery: list[BatteryThresholdEntry] = []
    temperature: list[TemperatureThresholdEntry] = []
    hysteresis: HysteresisEntry = HysteresisEntry()
    high_power: list[Name] = []
    default_requirements: Requirements | None = None


class MetricsEntry(Strict):
    """``metrics:``: the Prometheus endpoint of ``sbrs run`` (``sbrs.metrics``); off while ``port`` is null."""

    port: Annotated[StrictInt, Field(ge=1, le=65535)] | None = None
    address: Annotated[StrictStr, Field(min_length=1, max_length=255)] = "127.0.0.1"
    allow_remote: StrictBool = False


Seconds = Annotated[Number, Field(ge=0.01, le=86400)]


class EnvironmentEntry(Strict):
    """``environment:``: sensor sources (``sbrs.app.environment``, the grammar of ``sbrs run --env-source``), how
    often polled sources are read, how long a value lives without a new reading, and ``min_fps``."""

    sources: list[Annotated[StrictStr, Field(min_length=1, max_length=512)]] = []
    poll_s: Seconds = 1.0
    max_age_s: Seconds | None = 10.0
    min_fps: Annotated[Number, Field(ge=0)] | Literal["source"] | None = None


class AppEntry(Strict):
    name: Name
    input: InputSpecEntry
    adaptive: list[Literal[ADAPTIVE_ATTRIBUTES]] = list(ADAPTIVE_ATTRIBUTES)  # type: ignore[valid-type]
    initial: Name | None = None
    scenarios: Annotated[list[dict[str, Any]], Field(min_length=1)]
    runtime: RuntimeEntry = RuntimeEntry()
    memory_limit_mb: Annotated[Number, Field(gt=0)] | None = None
    policy: PolicyEntry = PolicyEntry()
    environment: EnvironmentEntry = EnvironmentEntry()
    metrics: MetricsEntry = MetricsEntry()
    postprocess: Any = None  # every scenario's unless it names its own; checked by sbrs.app.postprocess
    #: where ``sbrs run`` takes its frames when ``--source`` is not given (``sbrs.run.sources``)
    source: Annotated[StrictStr, Field(min_length=1, max_length=4096)] | None = None

    @field_validator("adaptive")
    @classmethod
    def _no_duplicates(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("duplicate entry")
        return value


# ``postprocess:`` (sbrs.app.postprocess picks the model by ``kind``; a bare string is a short form)
PostprocessKind = Literal["top-k", "detections", "raw", "function"]
FUNCTION_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
OutputName = Annotated[StrictStr, Field(min_length=1, max_length=1024)]
Fraction = Annotated[Number, Field(ge=0, le=1)]


class TopKEntry(Strict):
    """``postprocess: {kind: top-k, k: 5}``: the k best classes of every [1, C] output."""

    kind: Literal["top-k"]
    k: Annotated[StrictInt, Field(ge=1, le=1000)] = 5


class DetectionsEntry(Strict):
    """``postprocess: {kind: detections, ...}`` (``sbrs.outputs.spec.DetectionsSpec``)."""

    kind: Literal["detections"]
    format: Literal["yolo", "ssd"] = "yolo"
    output: OutputName | None = None
    boxes: OutputName | None = None
    scores: OutputName | None = None
    box_format: Literal["cxcywh", "xyxy"] | None = None
    normalized: StrictBool = False
    activation: Literal["none", "sigmoid", "softmax"] = "none"
    background: Annotated[StrictInt, Field(ge=0)] | None = None
    confidence: Fraction = 0.25
    iou: Fraction = 0.45
    max_detections: Annotated[StrictInt, Field(ge=1, le=100_000)] = 100
    max_candidates: Annotated[StrictInt, Field(ge=1, le=10_000)] = 1000

    @model_validator(mode="after")
    def _keys_of_the_format(self) -> DetectionsEntry:
        if self.format == "yolo" and (self.boxes is not None or self.scores is not None):
            raise ValueError("'boxes' and 'scores' name the outputs of format ssd; format yolo reads one 'output'")
        if self.format == "ssd" and self.output is not None:
            raise ValueError("'output' names the one output of format yolo; format ssd reads 'boxes' and 'scores'")
        return self


class RawEntry(Strict):
    """``postprocess: {kind: raw, max_elements: N}``: the outputs as lists (small outputs only)."""

    kind: Literal["raw"]
    max_elements: Annotated[StrictInt, Field(ge=1, le=1 << 24)] = 10_000


class FunctionEntry(Strict):
    """``postprocess: {kind: function, function: module:function}`` (short form: the string itself)."""

    kind: Literal["function"]
    function: Annotated[StrictStr, Field(pattern=FUNCTION_PATTERN, max_length=256)]


def _model_class(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as ``Optional[list[Model]]``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = _model_class(argument)
        if found is not None:
            return found
    return None


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    current: type[BaseModel] | None = model
    for part in loc[:-1]:
        if current is None:
            return []
        if isinstance(part, str):
            field = current.model_fields.get(part)
            current = _model_class(field.annotation) if field else None
    # a field's key in the file is its alias where it has one (``from``, a Python keyword, is the field ``from_``)
    return sorted(info.alias or name for name, info in current.model_fields.items()) if current else []


def _data_path(data: Any, loc: tuple[Any, ...]) -> Path_:
    """The part of a pydantic error location that names keys and indexes of ``data``.

    Pydantic inserts the member of a union it tried (``fps.float``) and validator tags into locations; they
    are not keys the user wrote. An unknown key (extra_forbidden) is kept: it is in the data.
    """
    path: list[str | int] = []
    node = data
    for part in loc:
        in_mapping = isinstance(node, dict) and isinstance(part, str)
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if (in_mapping and part in node) or in_list:
            node = node[part]
            path.append(part)
        elif in_mapping:
            path.append(part)  # a key the data lacks (missing or unknown): the deepest place that names it
            break
    return tuple(path)


def validate(model: type[BaseModel], data: Any, doc: LocatedYaml, base: Path_ = ()) -> Any:
    """Validate ``data`` against ``model`` (one of the entries above); the first error becomes a one-line
    ``InputError`` naming the file, line and field (``doc.error``), ``base`` the path of ``data`` in ``doc``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = _data_path(data, error["loc"])
        kind = error["type"]
        if kind == "extra_forbidden":
            allowed = _allowed_keys(model, loc)
            message = "unknown key" + (f" (allowed: {', '.join(allowed)})" if allowed else "")
        elif kind == "missing":
            message = "required key is missing"
        else:
            message = error["msg"].removeprefix("Value error, ")
            if kind not in ("value_error", "assertion_error") and "input" in error:
                message += f" (got {error['input']!r})"
        raise doc.error((*base, *loc), message) from None
