"""App and scenario YAML → ``AppConfig``: validated, with every scenario resolved to an ONNX file.

Validation is strict and every error is one line ``file:line: field: message`` (an ``InputError``).
Scenario CNNs come from an ONNX path (relative to the YAML that names it), an inline ``layers:`` list
(compiled with seeded weights) or the zoo (``zoo: {name: ..., options}``); the last two are exported into
the cache on first use, so every scenario ends up with its own ONNX file: the ground truth of later stages.
The dataclasses it makes are ``sbrs.app.settings``'s (named here too).
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbrs.app.environment import EnvironmentConfig, check_sources, parse_env_source
from sbrs.app.settings import (
    DEFAULT_PREPROCESS,
    TEMPERATURE_RANGE_C,
    UNIT_DEFAULTS_CPU,
    UNIT_DEFAULTS_GPU,
    AppConfig,
    BatteryRule,
    DeclaredCharacteristics,
    InputSpec,
    MetricsConfig,
    PolicyConfig,
    Preprocess,
    RequirementSet,
    RuntimeOptions,
    ScenarioConfig,
    TemperatureRule,
    default_session,
    is_loopback_host,
)
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

#: The configuration's dataclasses (``sbrs.app.settings``), named here too: ``sbrs.app.config.AppConfig``.
__all__ = [
    "UNIT_DEFAULTS_CPU",
    "UNIT_DEFAULTS_GPU",
    "AppConfig",
    "BatteryRule",
    "DeclaredCharacteristics",
    "InputSpec",
    "MetricsConfig",
    "PolicyConfig",
    "RequirementSet",
    "RuntimeOptions",
    "ScenarioConfig",
    "TemperatureRule",
    "is_loopback_host",
    "load_app_config",
    "resolve_input",
    "resolve_source",
]


def _validate(model: type[BaseModel], data: Any, doc: LocatedYaml, base: Path_ = ()) -> Any:
    from sbrs.app.schema import validate

    return validate(model, data, doc, base)


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
        _check_battery_threshold(rule.below, float(entry.hysteresis.battery), doc, index)
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
        _check_temperature_threshold(hot_rule.above, float(entry.hysteresis.temperature), doc, index)
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


def _check_battery_threshold(below: float, hysteresis: float, doc: LocatedYaml, index: int) -> None:
    """A ``policy.battery`` threshold that a battery level in [0, 1] makes active (below it) and releases (above it
    plus ``hysteresis``): at 0 it would be accepted and never act; released only above 1, a battery charged full
    again would keep its rule for ever."""
    field = ("policy", "battery", index, "below")
    if below <= 0.0:
        raise doc.error(field, f"a battery level is never below {below:g}: this threshold would never be active")
    if below + hysteresis >= 1.0:
        raise doc.error(field, f"released only above {below + hysteresis:g} (below + policy.hysteresis.battery "
                               f"{hysteresis:g}), which a battery level (at most 1) never is: lower the threshold "
                               "or the hysteresis")


def _check_temperature_threshold(above: float, hysteresis: float, doc: LocatedYaml, index: int) -> None:
    """A ``policy.temperature`` threshold that a temperature in ``TEMPERATURE_RANGE_C`` makes active (above it) and
    releases (below it minus ``hysteresis``), as ``_check_battery_threshold`` for the battery."""
    low, high = TEMPERATURE_RANGE_C
    field = ("policy", "temperature", index, "above")
    if above >= high:
        raise doc.error(field, f"a temperature is never above {above:g} °C (at most {high:g}): this threshold would "
                               "never be active")
    if above - hysteresis <= low:
        raise doc.error(field, f"released only below {above - hysteresis:g} °C (above − policy.hysteresis.temperature "
                               f"{hysteresis:g}), which a temperature (at least {low:g}) never is: raise the "
                               "threshold or lower the hysteresis")


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
    session = app.runtime.session or default_session(app.runtime.providers)
    if session == "one":
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
                               session),
        memory_limit_mb=app.memory_limit_mb,
        policy=_resolve_policy(app.policy, names, scenarios[names.index(initial)].requirements, doc),
        metrics=_resolve_metrics(app.metrics, doc),
        environment=_resolve_environment(app.environment, doc),
        source=resolve_source(app.source, doc),
    )
