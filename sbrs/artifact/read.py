"""The compiled build of an app, read back and verified: what ``sbrs run`` and ``Runtime.from_build`` start from.

``sbrs build APP.yaml`` (``sbrs.artifact.write``) writes the folder ``APP.build/`` beside the app file:

``manifest.json``
    format version, sbrs version, the app's resolved configuration, the unit plan with arena offsets (and the
    shadow slots), the transition tables, the model figures, the fingerprint of every input file (app YAML,
    scenario files, model files: path, size, mtime, sha256), the sha256 of every compiled file, and a
    checksum over all of it.
``<unit>.onnx``
    one ONNX model per execution unit; initializers of 1 KiB or more are ONNX external data in
``c<key>.onnx`` (instead of units, for an app that runs by parts)
    one ONNX model per distinct band call of the ``PartsPlan`` the manifest holds (``parts``: band
    heights, band calls, line buffers with their arena offsets, the transition tables), when the app's
    memory limit needs processing by parts (a build by parts has no unit plan);
``one.onnx`` (instead of units, for an app with ``runtime.session: one``)
    the app as one graph (``sbrs.compile.one_graph``), the one unit of the manifest's plan (``execution: one``);
``weights.bin``
    every distinct weight tensor once (deduplicated by content, 4 KiB-aligned), shared by all unit files.
``<name>.opt.onnx`` (beside each model file above, CPU apps) and ``weights.opt.bin``
    ONNX Runtime's fully optimised form of that model, its (reordered) weights in the one shared file (each
    distinct tensor once), valid only on the
    machine and onnxruntime version it was made with (``optimized_for``, ``sbrs.ort_env.machine_key``).
    Where they match, the runtime loads these without optimising again (a start several times faster);
    elsewhere it loads the portable files above and optimises them as it loads them.

Loading (``load_build``) reads only JSON and hashes files: it imports neither ``onnx`` nor the model zoo nor
the reduction search, and holds no weights in Python; ONNX Runtime reads the unit files and the weights file
itself. A build is refused (``InputError``, exit status 2, one line that says to run ``sbrs build``) when the
manifest is not JSON or lacks fields (garbage, truncated), when its checksum or any file's sha256 differs
(tampered, truncated), when it was written by another format or sbrs version, or when an input file changed
since (stale), or when the app sets ``memory_limit_mb`` and the build was made for no limit or a larger one.
An input file whose size and mtime are unchanged is taken as unchanged; otherwise its sha256
decides (a ``touch`` or a fresh checkout does not make a build stale). The compiled files are checked the
same way: size and mtime as recorded, else their sha256 (this catches damage and edits; it is not a defence
against someone who forges a file's mtime).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbrs import digest
from sbrs.errors import InputError

if TYPE_CHECKING:
    from sbrs.app.config import AppConfig
    from sbrs.compile.footprint import Footprint
    from sbrs.compile.parts_plan import PartsPlan
    from sbrs.compile.tables import TransitionPlan
    from sbrs.compile.units import UnitPlan


#: 10: ``runtime.session: auto`` and the build's form of the app with its figures (``session``); 9:
#: ``runtime.streams: auto`` (the default) and the build's choice with its figures (``streams``); 8:
#: ``runtime.share_min_mb``/``switch_steps`` left out default by provider (one unit per scenario on a GPU); 7: edge
#: models of band calls (``BandCall.edge``); 6: the plan's footprint (``footprint``); 5: processing by parts as
#: one PartsPlan (``parts``)
FORMAT = 10
MANIFEST = "manifest.json"
WEIGHTS = "weights.bin"
#: The file name ending of ONNX Runtime's optimised form of a model file of the build (``<stem>`` + this).
OPTIMIZED_SUFFIX = ".opt.onnx"
#: The weights of every optimised model file, each distinct tensor once.
OPTIMIZED_WEIGHTS = "weights.opt.bin"


def build_dir(app_path: str | Path) -> Path:
    """Where the build of ``app_path`` lives: ``APP.build/`` beside ``APP.yaml``, the file a symbolic link leads
    to (the app is loaded from there, ``AppConfig.path``, and is built there: a folder beside the link would never
    be found)."""
    path = Path(app_path).resolve()
    return path.with_name(f"{path.stem}.build")


def file_sha256(path: Path) -> str:
    with open(path, "rb") as stream:
        return digest.file_sha256(stream)


def manifest_checksum(manifest: Mapping[str, Any]) -> str:
    """sha256 of the manifest's canonical JSON without its ``checksum`` field."""
    body = {key: value for key, value in manifest.items() if key != "checksum"}
    return digest.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def input_record(path: Path, base: Path, glob: str | None = None) -> dict[str, Any]:
    """What the fingerprint keeps of one input file (path relative to the build folder's parent); with ``glob``,
    of a folder: the names of its files that match (a file added or removed makes the build stale; the files'
    contents are inputs of their own)."""
    relative = os.path.relpath(path.resolve(), base.resolve())
    if glob is not None:
        return {"path": relative, "glob": glob, "names": _listing(path, glob)}
    stat = path.stat()
    return {"path": relative, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": file_sha256(path)}


def _listing(folder: Path, glob: str) -> list[str]:
    return sorted(path.name for path in folder.glob(glob) if path.is_file())


def changed_input(record: Mapping[str, Any], base: Path) -> str | None:
    """Why the input file (or folder) of ``record`` no longer matches (None when it does)."""
    path = base / record["path"]
    if "glob" in record:
        if not path.is_dir():
            return f"{record['path']} is missing"
        return None if _listing(path, record["glob"]) == record["names"] else \
            f"{record['path']} has other {record['glob']} files than at the build"
    try:
        stat = path.stat()
    except OSError:
        return f"{record['path']} is missing"
    if stat.st_size == record["size"] and stat.st_mtime_ns == record["mtime_ns"]:
        return None
    if stat.st_size != record["size"] or file_sha256(path) != record["sha256"]:
        return f"{record['path']} changed since the build"
    return None


@dataclass(frozen=True)
class LoadedBuild:
    """A verified build: the app's configuration, what it runs and where its model files are.

    A build of execution units has ``plan`` (with ``shadow`` slots under SBRS-TP) and ``transitions``; a build
    by parts has ``parts`` (its band calls, line buffers and tables) instead, and neither of the others.
    """

    folder: Path
    config: AppConfig
    plan: UnitPlan | None
    shadow: Mapping[str, int] | None
    transitions: TransitionPlan | None
    model_bytes: Mapping[str, int]
    scenario_memory_mb: Mapping[str, float]
    granularity: str
    transition: str
    transition_arena: str
    memory_limit_bytes: int | None = None
    parts: PartsPlan | None = None  # band calls instead of units (the app runs by parts)
    optimized_for: str | None = None  # the machine its ONNX Runtime-optimised files are for (None: none made)
    optimized_here: bool = False  # ... and it is this one: the runtime loads those
    footprint: Footprint | None = None  # the plan as sbrs.compile.footprint defines it
    unit_threads: Mapping[str, int] = field(default_factory=dict)  # units measured faster on fewer threads
    streams: int = 1  # frames in flight at once (``runtime.streams``; under auto the build measured them)
    streams_choice: Mapping[str, Any] | None = None  # why (``sbrs.compile.unit_streams.StreamsChoice.to_dict``)

    def model_path(self, name: str) -> str:
        """The file to load for the build's model file ``name`` (``u1.onnx``, ``c<key>.onnx``): its optimised
        form when that was made on this machine, else the portable file."""
        if self.optimized_here:
            name = name.removesuffix(".onnx") + OPTIMIZED_SUFFIX
        return str(self.folder / name)

    def unit_path(self, unit_id: str) -> str:
        return self.model_path(f"{unit_id}.onnx")

    def units(self) -> tuple[UnitPlan, TransitionPlan]:
        """The unit plan and its tables; ``InputError`` for a build by parts, which has none."""
        if self.plan is None or self.transitions is None:
            raise InputError("the build runs by parts (band calls, not units): open it with "
                             "sbrs.runtime_for(APP.yaml) or Runtime.from_build", file=str(self.folder),
                             field="build")
        return self.plan, self.transitions

    def matches(self, granularity: str | None, transition: str, transition_arena: str) -> bool:
        """Whether runtime options ask for what this build was compiled for. A build by parts runs either
        transition mode on its one arena whatever the granularity asked."""
        if self.parts is not None:
            return True
        return ((granularity is None or granularity == self.granularity) and transition == self.transition
                and transition_arena == self.transition_arena)


def refuse(folder: Path, app_path: str | Path, why: str) -> InputError:
    return InputError(f"{why}; run `sbrs build {app_path}` (or `sbrs run --rebuild`)", file=str(folder))


def read_manifest(folder: Path, app_path: str | Path) -> dict[str, Any]:
    """The manifest, checked for shape, checksum, format and version (not yet the files)."""
    from sbrs import __version__

    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise refuse(folder, app_path, f"the build has no {MANIFEST}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise refuse(folder, app_path, f"{MANIFEST} is not a readable build manifest (damaged)") from None
    if not isinstance(manifest, dict) or "checksum" not in manifest:
        raise refuse(folder, app_path, f"{MANIFEST} is not a build manifest (damaged)")
    if manifest_checksum(manifest) != manifest["checksum"]:
        raise refuse(folder, app_path, f"{MANIFEST} does not match its checksum (modified or damaged)")
    if manifest.get("format") != FORMAT or manifest.get("sbrs") != __version__:
        raise refuse(folder, app_path, f"the build was written by another sbrs (format {manifest.get('format')}, "
                                       f"sbrs {manifest.get('sbrs')}; this is format {FORMAT}, sbrs {__version__})")
    return manifest


def verify_build(folder: Path, app_path: str | Path) -> dict[str, Any]:
    """The manifest of a current, intact build; ``InputError`` (module docstring) otherwise."""
    manifest = read_manifest(folder, app_path)
    try:
        for record in manifest["inputs"]:
            why = changed_input(record, folder.parent)
            if why is not None:
                raise refuse(folder, app_path, f"the build is stale: {why}")
        for name, record in manifest["files"].items():
            if changed_input({**record, "path": name}, folder) is not None:
                missing = not (folder / name).is_file()
                raise refuse(folder, app_path, f"{name} is missing from the build" if missing else
                             f"{name} does not match its sha256 (modified or truncated)")
    except (KeyError, TypeError, AttributeError):
        raise refuse(folder, app_path, f"{MANIFEST} lacks fields of a build (damaged)") from None
    return manifest


def _unit_plan(data: Mapping[str, Any]) -> Any:
    """A build's unit plan from its JSON form: the units' (``UnitPlan``) or, ``execution: one``, the one graph's
    (``OnePlan``, whose module a build of units does not load)."""
    if data.get("execution") == "one":
        from sbrs.compile.one_plan import plan_from_dict

        return plan_from_dict(data)
    from sbrs.compile.units import UnitPlan

    return UnitPlan.from_dict(data)


def load_build(app_path: str | Path, folder: Path | None = None) -> LoadedBuild:
    """The verified build of ``app_path`` (``build_dir`` by default)."""
    from sbrs.compile.footprint import Footprint
    from sbrs.compile.tables import TransitionPlan

    folder = folder or build_dir(app_path)
    manifest = verify_build(folder, app_path)
    try:
        options = manifest["options"]
        parts = manifest["parts"]
        if parts is not None:  # the band calls' plan (only a build by parts loads that module)
            from sbrs.compile.parts_plan import PartsPlan

            parts = PartsPlan.from_dict(parts)
        plan, transitions = manifest["plan"], manifest["transitions"]
        build = LoadedBuild(
            folder=folder, config=config_from_dict(manifest["config"]),
            plan=None if plan is None else _unit_plan(plan), shadow=manifest["shadow"],
            transitions=None if transitions is None else TransitionPlan.from_dict(transitions),
            model_bytes=manifest["model_bytes"], scenario_memory_mb=manifest["scenario_memory_mb"],
            granularity=options["granularity"], transition=options["transition"],
            transition_arena=options["transition_arena"], memory_limit_bytes=manifest["memory_limit_bytes"],
            parts=parts,
            optimized_for=manifest["optimized_for"], optimized_here=optimized_here(manifest),
            footprint=Footprint.from_dict(manifest["footprint"]),
            unit_threads={str(u): int(t) for u, t in manifest.get("unit_threads", {}).items()},
            streams=int(manifest["streams"]["streams"]), streams_choice=manifest["streams"])
    except (KeyError, TypeError, ValueError, AttributeError):
        raise refuse(folder, app_path, f"{MANIFEST} lacks fields of a build (damaged)") from None
    why = limit_mismatch(build.config, build.memory_limit_bytes)
    if why is not None:
        raise refuse(folder, app_path, why)
    return build


def optimized_here(manifest: Mapping[str, Any]) -> bool:
    """Whether the build's ONNX Runtime-optimised files were made for this machine, onnxruntime and providers."""
    made_for = manifest["optimized_for"]
    if made_for is None:
        return False
    from sbrs.ort_env import machine_key, resolve_providers

    providers = resolve_providers(tuple(manifest["config"]["runtime"]["providers"]))
    return bool(made_for == machine_key(providers))


def limit_mismatch(config: AppConfig, built_for: int | None) -> str | None:
    """Why a build made for the memory limit ``built_for`` (bytes, None: none) cannot run an app of ``config``
    (None when it can: the app sets no limit, or the build's limit is at most the app's)."""
    if config.memory_limit_mb is None:
        return None
    wanted = int(config.memory_limit_mb * 1e6)
    if built_for is None:
        return f"the build was made without a memory limit, the app asks memory_limit_mb: {config.memory_limit_mb:g}"
    if built_for > wanted:
        return (f"the build was made for a memory limit of {built_for / 1e6:g} MB, the app asks memory_limit_mb: "
                f"{config.memory_limit_mb:g}")
    return None


def config_from_dict(data: Mapping[str, Any]) -> AppConfig:
    """An ``AppConfig`` from its ``to_dict`` form (already validated when the build was made)."""
    from sbrs.app.environment import EnvironmentConfig
    from sbrs.app.settings import (
        AppConfig,
        BatteryRule,
        DeclaredCharacteristics,
        InputSpec,
        MetricsConfig,
        PolicyConfig,
        RequirementSet,
        RuntimeOptions,
        ScenarioConfig,
        TemperatureRule,
        preprocess_from_dict,
    )
    from sbrs.outputs.spec import spec_from_dict

    def requirements(value: Mapping[str, float] | None) -> RequirementSet | None:
        return None if value is None else RequirementSet(**value)

    policy = data["policy"]
    return AppConfig(
        name=data["name"], path=data["path"],
        input=InputSpec(data["input"]["name"], tuple(data["input"]["shape"]), data["input"]["dtype"],
                        preprocess_from_dict(data["input"].get("preprocess"))),
        adaptive=tuple(data["adaptive"]), initial=data["initial"],
        scenarios=tuple(ScenarioConfig(s["name"], s["defined_in"], s["model_kind"], s["model_path"],
                                       RequirementSet(**s["requirements"]),
                                       DeclaredCharacteristics(**s["characteristics"]),
                                       spec_from_dict(s.get("postprocess")), s.get("derived_from"),
                                       s.get("quantize"), s.get("calibration"),
                                       None if s.get("input_size") is None else tuple(s["input_size"]))
                        for s in data["scenarios"]),
        runtime=RuntimeOptions(**{**data["runtime"], "providers": tuple(data["runtime"]["providers"])}),
        memory_limit_mb=data["memory_limit_mb"],
        policy=PolicyConfig(
            battery=tuple(BatteryRule(r["below"], r["scenario"], requirements(r["requirements"]))
                          for r in policy["battery"]),
            battery_hysteresis=policy["battery_hysteresis"], fps_hysteresis=policy["fps_hysteresis"],
            high_power=tuple(policy["high_power"]), default_requirements=requirements(policy["default_requirements"]),
            temperature=tuple(TemperatureRule(r["above"], r["scenario"], requirements(r["requirements"]))
                              for r in policy.get("temperature", ())),
            temperature_hysteresis=policy.get("temperature_hysteresis", 5.0)),
        metrics=MetricsConfig(**data["metrics"]),
        environment=EnvironmentConfig.from_dict(data.get("environment")),
        source=data.get("source"),
    )

