"""App and scenario YAML → ``AppConfig``: validated, with every scenario resolved to an ONNX file.

Validation is strict and every error is one line ``file:line: field: message`` (an ``InputError``).
Scenario CNNs come from an ONNX path (relative to the YAML that names it), an inline ``layers:`` list
(compiled with seeded weights) or the zoo (``zoo: {name: ..., options}``); the last two are exported into
the cache on first use, so every scenario ends up with its own ONNX file: the ground truth of later stages.
"""

from __future__ import annotations

import typing
from contextlib import suppress
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbrs.app.environment import EnvironmentConfig, check_sources, parse_env_source
from sbrs.app.preprocess import DEFAULT_PREPROCESS, Preprocess
from sbrs.cache import cached_file, content_key
from sbrs.errors import InputError
from sbrs.outputs.spec import DEFAULT_SPEC, PostprocessSpec

if TYPE_CHECKING:  # YAML and pydantic read and validate a file; a compiled build (sbrs.artifact.read) needs neither
    from pydantic import BaseModel

    from sbrs.app.schema import (
        AppEntry,
        EnvironmentEntry,
        InputSpecEntry,
        MetricsEntry,
        PolicyEntry,
        Requirements,
        ScenarioEntry,
    )
    from sbrs.app.yaml_lines import LocatedYaml, Path_


@dataclass(frozen=True)
class InputSpec:
    """The app's ``input:``; ``preprocess``: how pictures become this input (``sbrs.app.preprocess``)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    preprocess: Preprocess = DEFAULT_PREPROCESS


@dataclass(frozen=True)
class RequirementSet:
    """Thesis Section 5.6: (r_a, r_t, r_m, r_e)."""

    accuracy: float
    throughput: float
    memory: float
    energy: float


@dataclass(frozen=True)
class DeclaredCharacteristics:
    """What the app's author declares about a scenario (thesis Table 5.4 columns); not measured by sbrs."""

    accuracy: float | None = None
    fps: float | None = None
    energy_j: float | None = None
    memory_mb: float | None = None


@dataclass(frozen=True)
class ScenarioConfig:
    """``derived_from``, ``quantize`` and ``calibration`` are set for a scenario derived from another
    (``from:`` + ``quantize:``, ``sbrs.app.derive``): the source's name, the mode, and the absolute folder of the
    calibration frames (None: synthetic frames, or a mode that needs none)."""

    name: str
    defined_in: str
    model_kind: str  # "onnx" | "layers" | "zoo" | "derived"
    model_path: str
    requirements: RequirementSet
    characteristics: DeclaredCharacteristics
    postprocess: PostprocessSpec = DEFAULT_SPEC  # its own ``postprocess:``, else the app's, else top-5
    derived_from: str | None = None
    quantize: str | None = None
    calibration: str | None = None
    #: ``input_size: [H, W]``: the scenario's own input height and width (frames are resized to it), or None
    input_size: tuple[int, int] | None = None


#: ``runtime.share_min_mb`` and ``runtime.switch_steps`` where the app leaves them out, on the CPU provider and on
#: a GPU one (the first provider decides, as it decides where the arena lives: ``sbrs.runtime.device``). On a GPU
#: every execution unit is a session with a provider instance of its own, about 140 MiB of GPU memory each
#: (measured on an H200: drone's 20 units 3576 MiB, its 5 scenarios as one unit each 1512 MiB, plain ONNX
#: Runtime 1586), and a call the host synchronises with: so there a run of layers is shared only when its
#: weights outweigh a session, and a frame is one step (docs/MEASUREMENTS.md, "On a GPU").
UNIT_DEFAULTS_CPU = (1.0, 4)
UNIT_DEFAULTS_GPU = (140.0, 1)


@dataclass(frozen=True)
class RuntimeOptions:
    """``runtime:`` of the app. ``share_min_mb``: the least weight memory a run of steps must hold to be shared
    by scenarios as one execution unit (``sbrs.compile.units``); smaller runs are compiled into each scenario's
    own units. ``switch_steps``: under SBRS-TP, how many steps of similar work a frame is cut into at most, so
    a switch waits for about 1/switch_steps of the old frame. Both None where the app leaves them out: the
    provider's defaults then (``UNIT_DEFAULTS_CPU``, ``UNIT_DEFAULTS_GPU``; :attr:`unit_share_min_mb`,
    :attr:`unit_switch_steps`). ``on_switch``: what a switch does to the frame in
    flight, ``finish`` it on the old scenario, ``cancel`` it and run it again on the new one, or ``resume`` it on
    the new one from the layers both share (``sbrs.runtime.engine.Runtime``). ``threads``: intra-op threads of a
    session running a whole unit (default: every core); ``threads_scope``: ``session`` (each session its own
    threads, nothing process-wide) or ``process`` (ONNX Runtime's global pool, refusing the application's own
    sessions; ``sbrs.ort_env``). ``streams``: frames in flight at once in ``process`` (``sbrs.runtime.streams``):
    1, one frame at a time; 2, two, each in an arena of its own, on one-thread sessions (execution units) or as
    the search chooses (by parts); ``auto`` (default): for execution units, what ``sbrs build`` measured faster
    (``sbrs.compile.unit_streams``; one stream without a build), by parts the search's choice.
    ``session``: ``units`` (default), the execution units above; ``one``, the app as one ONNX graph run by one
    session (``sbrs.compile.one_graph``)."""

    providers: tuple[str, ...]
    threads: int | None
    granularity: str
    transition: str
    share_min_mb: float | None = None
    switch_steps: int | None = None
    on_switch: str = "finish"
    threads_scope: str = "session"
    streams: int | str = "auto"
    session: str = "units"

    @property
    def unit_share_min_mb(self) -> float:
        """``share_min_mb``, or the default of the app's first provider."""
        return self._unit_defaults()[0] if self.share_min_mb is None else self.share_min_mb

    @property
    def unit_switch_steps(self) -> int:
        """``switch_steps``, or the default of the app's first provider."""
        return self._unit_defaults()[1] if self.switch_steps is None else self.switch_steps

    def _unit_defaults(self) -> tuple[float, int]:
        return UNIT_DEFAULTS_CPU if self.providers[0] == "CPUExecutionProvider" else UNIT_DEFAULTS_GPU

    def max_streams(self, *, by_parts: bool, measured: int | None = None) -> int:
        """The most frames a runtime keeps in flight (``sbrs.runtime.streams``), the one rule for the search,
        the plan and the runtime. One where a switch gives the frame in flight up or resumes it (``on_switch``)
        or the app asks for one (``streams: 1``). Else, by parts, two unless the app keeps its sessions to one
        thread (``threads: 1``), the search choosing between one and two; execution units: two where the app
        asks for them (``streams: 2``: their sessions then have one thread each), and under ``auto`` the
        build's ``measured`` choice (``sbrs.compile.unit_streams``), one where there is none."""
        if self.on_switch != "finish" or self.streams == 1:
            return 1
        if by_parts:
            return 1 if self.threads is not None and self.threads < 2 else 2
        if self.streams == 2:
            return 2
        return measured or 1


@dataclass(frozen=True)
class BatteryRule:
    """``policy.battery[i]``: below battery level ``below`` force ``scenario``, or rank by ``requirements``."""

    below: float
    scenario: str | None = None
    requirements: RequirementSet | None = None


@dataclass(frozen=True)
class TemperatureRule:
    """``policy.temperature[i]``: above ``above`` °C force ``scenario``, or rank by ``requirements``."""

    above: float
    scenario: str | None = None
    requirements: RequirementSet | None = None


@dataclass(frozen=True)
class PolicyConfig:
    """The app's ``policy:`` section, resolved (semantics in ``sbrs.control.policy``).

    ``battery`` is sorted by ``below`` (lowest first), ``temperature`` by ``above`` (highest first).
    ``default_requirements`` is None only in configs built by hand; ``load_app_config`` fills in the initial
    scenario's requirements when the file gives none.
    """

    battery: tuple[BatteryRule, ...] = ()
    battery_hysteresis: float = 0.05
    fps_hysteresis: float = 0.1
    high_power: tuple[str, ...] = ()
    default_requirements: RequirementSet | None = None
    temperature: tuple[TemperatureRule, ...] = ()
    temperature_hysteresis: float = 5.0


@dataclass(frozen=True)
class MetricsConfig:
    """The app's ``metrics:`` section: where ``sbrs run`` serves Prometheus metrics (off while ``port`` is None).

    ``address`` must be a loopback address unless ``allow_remote`` is set (see ``is_loopback_host``).
    """

    port: int | None = None
    address: str = "127.0.0.1"
    allow_remote: bool = False


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (127.0.0.0/8, ::1); False for any other name or address."""
    text = host.strip().strip("[]")
    if text.lower() in ("localhost", "localhost."):
        return True
    try:
        import ipaddress  # only a --listen address needs it

        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class AppConfig:
    name: str
    path: str
    input: InputSpec
    adaptive: tuple[str, ...]
    initial: str
    scenarios: tuple[ScenarioConfig, ...]
    runtime: RuntimeOptions
    memory_limit_mb: float | None
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)
    #: ``source:`` of the app file (``sbrs run``'s frames without ``--source``): a URI, a device, or a path
    #: made absolute from the app file's folder; None: none given
    source: str | None = None

    def scenario(self, name: str) -> ScenarioConfig:
        for scenario in self.scenarios:
            if scenario.name == name:
                return scenario
        raise KeyError(name)

    @property
    def scenario_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.scenarios)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _model_class(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as ``Optional[list[Model]]``, if any."""
    from pydantic import BaseModel

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


def _validate(model: type[BaseModel], data: Any, doc: LocatedYaml, base: Path_ = ()) -> Any:
    from pydantic import ValidationError

    """Validate ``data`` against ``model``; the first error becomes a one-line ``InputError``."""
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


def _as_mapping(doc: LocatedYaml, data: Any, path: Path_, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise doc.error(path, f"expected a mapping ({what}), got {type(data).__name__}")
    return data


def _scenario_shape(entry: ScenarioEntry, app: AppEntry) -> tuple[int, ...]:
    """The input shape the scenario's own model has: the app's, with ``input_size`` as its height and width."""
    shape = tuple(app.input.shape)
    return shape if entry.input_size is None else (*shape[:2], *entry.input_size)


def _compile_layers(entry: ScenarioEntry, app: AppEntry, doc: LocatedYaml, path: Path_) -> Path:
    from sbrs.app.yaml_lines import parse_path
    from sbrs.zoo.dsl import compile_layers

    input_shape = _scenario_shape(entry, app)

    def produce() -> bytes:
        try:
            model = compile_layers(entry.layers or [], input_shape, seed=entry.seed, input_name=app.input.name,
                                   where="layers")
        except InputError as exc:
            field_path = (*path, *parse_path(exc.field)) if exc.field else (*path, "layers")
            raise doc.error(field_path, exc.detail) from None
        return model.SerializeToString()

    key = content_key("layers", entry.layers, entry.seed, input_shape, app.input.name)
    return cached_file("layers", entry.name, key, produce)


def _zoo_export(entry: ScenarioEntry, doc: LocatedYaml, path: Path_) -> Path:
    from sbrs import zoo

    options = dict(entry.zoo or {})
    name = options.pop("name", None)
    if not isinstance(name, str):
        raise doc.error((*path, "zoo", "name"), "the zoo model's name is required (see `sbrs zoo list`)")
    size = entry.input_size
    if size is not None and size[0] == size[1] and "resolution" not in options:
        with suppress(InputError):  # a zoo model with a resolution option is built at the scenario's size
            if "resolution" in zoo.get_model(name).options:
                options["resolution"] = size[0]
    try:
        return Path(zoo.cached_export(name, options))
    except InputError as exc:
        raise doc.error((*path, "zoo"), exc.detail) from None


def _resolve_scenario(entry: ScenarioEntry, app: AppEntry, doc: LocatedYaml, path: Path_,
                      postprocess: PostprocessSpec = DEFAULT_SPEC) -> ScenarioConfig:
    from sbrs.app.postprocess import resolve_postprocess

    if entry.input_size is not None and len(app.input.shape) != 4:
        raise doc.error((*path, "input_size"), f"a scenario's own input size needs an image input: the app's "
                        f"input.shape must be [N, C, H, W] (it is {list(app.input.shape)})")
    if entry.model is not None:
        model_path = (Path(doc.file).parent / entry.model).resolve()
        if not model_path.is_file():
            raise doc.error((*path, "model"), f"no such ONNX file: {entry.model}")
        kind = "onnx"
    elif entry.layers is not None:
        model_path, kind = _compile_layers(entry, app, doc, path), "layers"
    else:
        model_path, kind = _zoo_export(entry, doc, path), "zoo"
    return ScenarioConfig(
        name=entry.name,
        defined_in=doc.file,
        model_kind=kind,
        model_path=str(model_path),
        requirements=RequirementSet(**entry.requirements.model_dump()),
        characteristics=DeclaredCharacteristics(**entry.characteristics.model_dump()),
        postprocess=postprocess if entry.postprocess is None else
        resolve_postprocess(entry.postprocess, doc, (*path, "postprocess"), "scenario"),
        input_size=None if entry.input_size is None else (int(entry.input_size[0]), int(entry.input_size[1])),
    )


def _scenario_entry(raw: Any, app_doc: LocatedYaml, index: int) -> tuple[ScenarioEntry, LocatedYaml, Path_]:
    from sbrs.app.schema import ScenarioEntry, ScenarioFileRef
    from sbrs.app.yaml_lines import load_yaml

    path: Path_ = ("scenarios", index)
    mapping = _as_mapping(app_doc, raw, path, "a scenario, or {file: scenario.yaml}")
    if "file" not in mapping:
        _derive_pair(mapping, app_doc, path)
        return _validate(ScenarioEntry, mapping, app_doc, path), app_doc, path
    ref = _validate(ScenarioFileRef, mapping, app_doc, path)
    scenario_path = Path(app_doc.file).parent / ref.file
    if not scenario_path.is_file():
        raise app_doc.error((*path, "file"), f"no such scenario file: {ref.file}")
    doc = load_yaml(scenario_path)
    _derive_pair(_as_mapping(doc, doc.data, (), "a scenario"), doc, ())
    return _validate(ScenarioEntry, doc.data, doc), doc, ()


def _derive_pair(mapping: dict[str, Any], doc: LocatedYaml, path: Path_) -> None:
    """``from`` without ``quantize`` or the reverse, named at the key given (the schema's check can only name
    the scenario). An unknown key is left to the schema: ``form:`` is a misspelt ``from``, not a missing one."""
    from sbrs.app.schema import DERIVE_PAIR, ScenarioEntry

    if set(mapping) - {info.alias or name for name, info in ScenarioEntry.model_fields.items()}:
        return
    for given, missing in (("from", "quantize"), ("quantize", "from")):
        if given in mapping and missing not in mapping:
            raise doc.error((*path, given), f"'{missing}' is missing: {DERIVE_PAIR}")


def _requirement_set(requirements: Requirements) -> RequirementSet:
    return RequirementSet(**{key: float(value) for key, value in requirements.model_dump().items()})


def _resolve_policy(entry: PolicyEntry, names: list[str], initial: RequirementSet, doc: LocatedYaml) -> PolicyConfig:
    """Check the policy's references (scenario names, distinct thresholds) and resolve it."""
    known = f"scenarios: {', '.join(names)}"
    seen: dict[float, int] = {}
    for index, rule in enumerate(entry.battery):
        if rule.scenario is not None and rule.scenario not in names:
            raise doc.error(("policy", "battery", index, "scenario"), f"unknown scenario '{rule.scenario}' ({known})")
        if rule.below in seen:
            raise doc.error(("policy", "battery", index, "below"),
                            f"duplicate threshold {rule.below:g} (first: policy.battery[{seen[rule.below]}])")
        seen[rule.below] = index
    for index, name in enumerate(entry.high_power):
        if name not in names:
            raise doc.error(("policy", "high_power", index), f"unknown scenario '{name}' ({known})")
        if name in entry.high_power[:index]:
            raise doc.error(("policy", "high_power", index), f"duplicate entry '{name}'")
    hot: dict[float, int] = {}
    for index, hot_rule in enumerate(entry.temperature):
        if hot_rule.scenario is not None and hot_rule.scenario not in names:
            raise doc.error(("policy", "temperature", index, "scenario"),
                            f"unknown scenario '{hot_rule.scenario}' ({known})")
        if hot_rule.above in hot:
            raise doc.error(("policy", "temperature", index, "above"), f"duplicate threshold {hot_rule.above:g} "
                            f"(first: policy.temperature[{hot[hot_rule.above]}])")
        hot[hot_rule.above] = index
    rules = sorted((BatteryRule(float(rule.below), rule.scenario,
                                None if rule.requirements is None else _requirement_set(rule.requirements))
                    for rule in entry.battery), key=lambda rule: rule.below)
    hot_rules = sorted((TemperatureRule(float(rule.above), rule.scenario,
                                        None if rule.requirements is None else _requirement_set(rule.requirements))
                        for rule in entry.temperature), key=lambda rule: -rule.above)
    default = initial if entry.default_requirements is None else _requirement_set(entry.default_requirements)
    return PolicyConfig(battery=tuple(rules), battery_hysteresis=float(entry.hysteresis.battery),
                        fps_hysteresis=float(entry.hysteresis.fps), high_power=tuple(entry.high_power),
                        default_requirements=default, temperature=tuple(hot_rules),
                        temperature_hysteresis=float(entry.hysteresis.temperature))


def _resolve_environment(entry: EnvironmentEntry, doc: LocatedYaml) -> EnvironmentConfig:
    """The ``environment:`` section: every source parsed (a relative path is relative to the app file), at most
    one source of each environment value."""
    base = Path(doc.file).parent
    sources = []
    for index, text in enumerate(entry.sources):
        try:
            sources.append(parse_env_source(text, base=base))
        except InputError as exc:
            raise doc.error(("environment", "sources", index), exc.detail) from None
    try:
        check_sources(tuple(sources))
    except InputError as exc:
        raise doc.error(("environment", "sources"), exc.detail) from None
    min_fps = entry.min_fps if entry.min_fps is None or isinstance(entry.min_fps, str) else float(entry.min_fps)
    return EnvironmentConfig(sources=tuple(sources), poll_s=float(entry.poll_s),
                             max_age_s=None if entry.max_age_s is None else float(entry.max_age_s), min_fps=min_fps)


def _resolve_metrics(entry: MetricsEntry, doc: LocatedYaml) -> MetricsConfig:
    """The ``metrics:`` section; a non-loopback address needs ``allow_remote: true``."""
    if not entry.allow_remote and not is_loopback_host(entry.address):
        raise doc.error(("metrics", "address"), f"'{entry.address}' is not a loopback address; set"
                        " metrics.allow_remote: true to serve metrics beyond this machine")
    return MetricsConfig(port=entry.port, address=entry.address, allow_remote=entry.allow_remote)


def _check_one_session(app: AppEntry, doc: LocatedYaml) -> None:
    """``runtime.session: one`` runs the app as one ONNX graph (``sbrs.compile.one_graph``): not by parts under a
    memory limit (band calls are sessions of their own), and not resuming a frame on another scenario (the one
    session's frame is one call: there is no step both scenarios share to resume after)."""
    if app.memory_limit_mb is not None:
        raise doc.error(("runtime", "session"), "'one' runs the app as one graph, which memory_limit_mb's "
                        "processing by parts cannot be: remove memory_limit_mb or use session: units")
    if app.runtime.on_switch == "resume":
        raise doc.error(("runtime", "session"), "'one' runs a frame as one call, so on_switch: resume has no "
                        "shared step to resume after: use finish or cancel, or session: units")


def resolve_input(entry: InputSpecEntry, doc: LocatedYaml) -> InputSpec:
    """The app's ``input:`` with its ``preprocess:`` checked against the input (an image input; ``mean`` and
    ``std`` with one value or one per channel; no value arithmetic for an integer input)."""
    spec = InputSpec(entry.name, tuple(entry.shape), entry.dtype)
    given = entry.preprocess
    if given is None:
        return spec
    from sbrs.app.preprocess import image_layout

    path = ("input", "preprocess")
    try:
        channels = image_layout(spec, field="input.preprocess")[1]
    except InputError as exc:
        raise doc.error(path, exc.detail) from None
    if not entry.dtype.startswith("float"):
        for key in ("scale", "mean", "std"):
            if getattr(given, key) is not None:
                raise doc.error((*path, key), f"an input of {entry.dtype} takes the pixels as they are; scale, mean "
                                              "and std apply to float inputs")
    for key in ("mean", "std"):
        values = getattr(given, key)
        if values is not None and len(values) not in (1, channels):
            raise doc.error((*path, key), f"{len(values)} values for an input of {channels} channels (give one, "
                                          f"or one per channel)")
    return replace(spec, preprocess=Preprocess(
        resize=given.resize, pad_value=given.pad_value, colors=given.colors,
        scale=DEFAULT_PREPROCESS.scale if given.scale is None else float(given.scale),
        mean=None if given.mean is None else tuple(float(v) for v in given.mean),
        std=None if given.std is None else tuple(float(v) for v in given.std)))


def resolve_source(text: str | None, doc: LocatedYaml) -> str | None:
    """``source:`` of the app file: a path that exists beside the app file, made absolute; anything else (a
    URI, a device, a camera index, a GStreamer pipeline) as written. Checked when ``sbrs run`` opens it."""
    if text is None:
        return None
    candidate = Path(doc.file).parent / text
    if "://" not in text and " ! " not in text and not Path(text).is_absolute() and candidate.exists():
        return str(candidate.resolve())
    return text


def load_app_config(path: str | Path) -> AppConfig:
    """Read and validate an app YAML and its scenario files; resolve every scenario's ONNX file."""
    from sbrs.app.postprocess import resolve_postprocess
    from sbrs.app.schema import AppEntry
    from sbrs.app.yaml_lines import format_path, load_yaml

    doc = load_yaml(path)
    _as_mapping(doc, doc.data, (), "the app")
    app: AppEntry = _validate(AppEntry, doc.data, doc)
    input_spec = resolve_input(app.input, doc)
    postprocess = (DEFAULT_SPEC if app.postprocess is None
                   else resolve_postprocess(app.postprocess, doc, ("postprocess",), "app"))

    entries = []
    first_defined: dict[str, str] = {}
    for index, raw in enumerate(app.scenarios):
        entry, entry_doc, entry_path = _scenario_entry(raw, doc, index)
        if entry.name in first_defined:
            first = first_defined[entry.name]
            raise entry_doc.error((*entry_path, "name"), f"duplicate scenario name '{entry.name}' (first: {first})")
        first_defined[entry.name] = format_path(("scenarios", index))
        entries.append((entry, entry_doc, entry_path))
    # scenarios with a model of their own first, then those derived from them (``from:`` may name a scenario
    # declared later); the app keeps the order of the file
    resolved = {entry.name: _resolve_scenario(entry, app, entry_doc, entry_path, postprocess)
                for entry, entry_doc, entry_path in entries if entry.from_ is None}
    derived = [item for item in entries if item[0].from_ is not None]
    if derived:
        from sbrs.app.derive import derivation_source, derive_scenario

        for entry, entry_doc, entry_path in derived:  # every from: checked before any model is derived
            derivation_source(entry, entries, resolved, entry_doc, entry_path)
        for entry, entry_doc, entry_path in derived:
            resolved[entry.name] = derive_scenario(entry, entries, resolved, app, entry_doc, entry_path,
                                                   input_spec=input_spec)
    scenarios = [resolved[entry.name] for entry, _, _ in entries]

    names = [s.name for s in scenarios]
    initial = app.initial or names[0]
    if initial not in names:
        raise doc.error(("initial",), f"unknown scenario '{initial}' (scenarios: {', '.join(names)})")
    if app.runtime.session == "one":
        _check_one_session(app, doc)

    return AppConfig(
        name=app.name,
        path=str(Path(path).resolve()),
        input=input_spec,
        adaptive=tuple(app.adaptive),
        initial=initial,
        scenarios=tuple(scenarios),
        runtime=RuntimeOptions(tuple(app.runtime.providers), app.runtime.threads, app.runtime.granularity,
                               app.runtime.transition,
                               None if app.runtime.share_min_mb is None else float(app.runtime.share_min_mb),
                               app.runtime.switch_steps,
                               app.runtime.on_switch, app.runtime.threads_scope, app.runtime.streams,
                               app.runtime.session),
        memory_limit_mb=app.memory_limit_mb,
        policy=_resolve_policy(app.policy, names, scenarios[names.index(initial)].requirements, doc),
        metrics=_resolve_metrics(app.metrics, doc),
        environment=_resolve_environment(app.environment, doc),
        source=resolve_source(app.source, doc),
    )
