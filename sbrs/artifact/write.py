"""``sbrs build``'s compiled artifact: the app's execution units as ONNX files with their weights stored once.

The layout and the checks on loading are described in ``sbrs.artifact.read``. Writing goes through a
temporary folder renamed into place, so a build interrupted half-way never looks current.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from sbrs import __version__
from sbrs.app.app import App
from sbrs.artifact.read import (
    FORMAT,
    MANIFEST,
    OPTIMIZED_SUFFIX,
    OPTIMIZED_WEIGHTS,
    WEIGHTS,
    build_dir,
    input_record,
    manifest_checksum,
)
from sbrs.compile.session_choice import SessionChoice
from sbrs.compile.unit_streams import StreamsChoice
from sbrs.compile.units import UnitPlan
from sbrs.errors import InputError
from sbrs.folder_lock import folder_lock
from sbrs.log import Progress

logger = logging.getLogger(__name__)

#: Tensors smaller than this stay inside their unit file (biases, scales): not worth a page of the weights file.
EXTERNAL_MIN_BYTES = 1024
#: Offsets in the weights file are page-aligned, so ONNX Runtime may map tensors straight from the file.
WEIGHTS_ALIGNMENT = 4096


class _WeightsFile:
    """The shared weights file: each distinct tensor content written once, page-aligned.

    Weights go from the models' arrays (often views of the mapped ONNX files, ``sbrs.model.onnx_file``)
    straight to the file: a unit's ``TensorProto`` only refers to them, so no weight is ever copied into
    protobuf's memory on the way (that held a 510 MB model's weights three times, 2.1 GB at peak).
    """

    def __init__(self, path: Path) -> None:
        self.stream = open(path, "wb")  # noqa: SIM115 (closed by close())
        self.offsets: dict[str, tuple[int, int]] = {}

    def place(self, array: np.ndarray) -> tuple[int, int]:
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8).data  # little-endian, as ONNX stores it
        digest = hashlib.sha256(data).hexdigest()
        if digest not in self.offsets:
            position = self.stream.tell()
            padding = -position % WEIGHTS_ALIGNMENT
            self.stream.write(b"\0" * padding)
            self.offsets[digest] = (position + padding, data.nbytes)
            self.stream.write(data)
        return self.offsets[digest]

    def tensor(self, array: np.ndarray, name: str) -> onnx.TensorProto:
        """The initializer ``name``: in the weights file from ``EXTERNAL_MIN_BYTES`` on, else inline."""
        if array.nbytes < EXTERNAL_MIN_BYTES or array.dtype.byteorder == ">":
            return numpy_helper.from_array(array, name)
        offset, length = self.place(array)
        tensor = onnx.TensorProto(name=name, dims=array.shape,
                                  data_type=helper.np_dtype_to_tensor_dtype(array.dtype),
                                  data_location=onnx.TensorProto.EXTERNAL)
        for key, value in (("location", WEIGHTS), ("offset", str(offset)), ("length", str(length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        return tensor

    def externalise(self, model: onnx.ModelProto) -> None:
        """Move ``model``'s initializers of ``EXTERNAL_MIN_BYTES`` or more into the weights file (for models
        built with their weights inside, such as band calls)."""
        tensors = list(model.graph.initializer)
        del model.graph.initializer[:]
        model.graph.initializer.extend(self.tensor(numpy_helper.to_array(tensor), tensor.name) for tensor in tensors)

    def close(self) -> None:
        self.stream.close()


def input_files(app: App) -> list[Path]:
    """Every file the build depends on: the app YAML, scenario files, each scenario's ONNX file, the calibration
    frames of a derived scenario.

    Models generated from the zoo or the inline layer language are not inputs: they follow from the YAML
    and the sbrs version, both in the fingerprint, and their cached exports may come and go. A derived
    scenario's model follows from its source (an input, or generated) and its calibration frames, which are
    inputs, and their folder's listing too (``input_folders``)."""
    from sbrs.app.derive import calibration_files

    files = [Path(app.config.path)]
    for scenario in app.config.scenarios:
        files.append(Path(scenario.defined_in))
        if scenario.model_kind == "onnx":
            files.append(Path(scenario.model_path))
        if scenario.calibration is not None:
            files.extend(calibration_files(Path(scenario.calibration)))
    return list(dict.fromkeys(files))


def input_folders(app: App) -> list[tuple[Path, str]]:
    """The folders the build depends on as listings (folder, pattern): each derived scenario's calibration
    frames, by every pattern a frame file may match (``.npy`` files, images), so that a frame added or removed
    makes the build stale, as a frame changed does."""
    from sbrs.app.derive import CALIBRATION_GLOBS

    folders = [Path(s.calibration) for s in app.config.scenarios if s.calibration is not None]
    return [(folder, glob) for folder in dict.fromkeys(folders) for glob in CALIBRATION_GLOBS]


def scenario_memory_mb(app: App, plan: UnitPlan) -> dict[str, float]:
    """Per scenario: its unique parameter bytes plus the peak of its boundary tensors in the arena, in MB."""
    from sbrs.compile.arena import arena_problem
    from sbrs.compile.units import UnitLayout
    from sbrs.memory.bounds import peak_by_timeline
    from sbrs.model import params_bytes

    layout = UnitLayout(plan.units, plan.sequences, plan.inputs, plan.outputs, {t.id: t.spec for t in plan.tensors})
    peaks = peak_by_timeline(arena_problem(layout, plan.alignment))
    return {name: (params_bytes([model]) + peaks.get(name, 0)) / 1e6 for name, model in app.models.items()}


def _save_optimized_models(app: App, staging: Path, *, one: bool,
                           units: UnitPlan | None = None) -> tuple[str | None, str | None]:
    """Beside every model file of the build, ONNX Runtime's optimised form for this machine (``<name>.opt.onnx``,
    ``sbrs.ort_env.save_optimized``), their weights in one file (``_share_optimized_weights``). The optimised
    files of ``units``' execution units hand each other ONNX Runtime's blocked layout where they can
    (``sbrs.compile.blocked_layout``).

    Returns the machine they are valid on (``machine_key``) and None, or None and why none were made: the app
    runs on a GPU provider (the optimised form would fix node placement), the CPU's flags cannot be read, or
    ONNX Runtime could not write one of them (then none is kept: the build stays whole and portable). ``one``:
    the files are the app as one graph, whose optimised form's names are made unique again (``unique_names``).
    """
    from sbrs.ort_env import (
        CPU_PROVIDER,
        machine_key,
        resolve_providers,
        save_optimized,
    )

    providers = resolve_providers(tuple(app.config.runtime.providers), where=app.config.path)
    if providers != (CPU_PROVIDER,):
        return None, f"the app runs on {providers[0]}"
    key = machine_key(providers)
    if key is None:
        return None, "this machine's CPU flags cannot be read (/proc/cpuinfo)"
    sources = sorted(staging.glob("*.onnx"))
    progress = Progress(logger, "optimising for this machine (ONNX Runtime)", len(sources), unit="models")
    try:
        made = []
        for done, path in enumerate(sources, 1):
            made.append(path.with_name(path.stem + OPTIMIZED_SUFFIX))
            save_optimized(str(path), str(made[-1]), providers)
            if one:  # ONNX Runtime repeats names across branches: make them unique
                from sbrs.compile.one_graph import unique_names

                model = onnx.load_model(str(made[-1]), load_external_data=False)
                unique_names(model.graph)
                onnx.save_model(model, str(made[-1]))
            progress(done)
        if units is not None:
            from sbrs.compile.blocked_layout import rewrite_units

            logger.info("execution units: %s", rewrite_units(units, staging, OPTIMIZED_SUFFIX).summary())
        _share_optimized_weights(made, staging / OPTIMIZED_WEIGHTS)
    except Exception as exc:  # onnxruntime raises its own types; any failure leaves only the portable files
        for path in (*staging.glob(f"*{OPTIMIZED_SUFFIX}*"), staging / OPTIMIZED_WEIGHTS):
            path.unlink(missing_ok=True)
        return None, f"ONNX Runtime could not save one: {' '.join(str(exc).split())[:200]}"
    return key, None


def _measured_unit_threads(app: App, plan: UnitPlan, staging: Path, optimized: bool,
                           units_digest: Callable[[], str]) -> dict[str, int]:
    """The units that run faster on one thread than on the app's threads, measured on this machine
    (``sbrs.compile.unit_threads``); none where the app fixes its threads, shares ONNX Runtime's pool, runs on
    another provider or on two streams (one-thread sessions already), or the machine has one core."""
    from sbrs.compile.timing_cache import measured_once, timing_path
    from sbrs.compile.unit_threads import measure_unit_threads, whole_frame_units
    from sbrs.ort_env import CPU_PROVIDER, machine_key, resolve_providers

    runtime = app.config.runtime
    providers = resolve_providers(tuple(runtime.providers), where=app.config.path)
    cores = os.cpu_count() or 1
    if (runtime.threads is not None or runtime.threads_scope != "session" or providers != (CPU_PROVIDER,)
            or cores < 2 or runtime.max_streams(by_parts=False) > 1):
        return {}
    suffix = OPTIMIZED_SUFFIX if optimized else ".onnx"
    paths = {unit.id: str(staging / f"{unit.id}{suffix}") for unit in plan.units}
    warm = whole_frame_units(plan.sequences)
    timing = measured_once(timing_path("unit-threads", units_digest(), machine_key(providers), optimized,
                                       sorted(warm)),
                           lambda: measure_unit_threads(paths, providers, cores, optimized=optimized, warm=warm))
    return {str(unit): int(threads) for unit, threads in timing.figures.items()}


def _units_digest(staging: Path) -> str:
    """The digest of the build's portable unit files and weights, which its timings are measured on (the
    optimised forms follow from them and the machine, ``sbrs.compile.timing_cache``)."""
    from sbrs.compile.timing_cache import files_digest

    return files_digest(sorted(path for path in staging.iterdir()
                               if path.is_file() and OPTIMIZED_SUFFIX not in path.name and path.name != MANIFEST))


def _chosen_streams(app: App, plan: UnitPlan, staging: Path, optimized: bool, unit_threads: Mapping[str, int],
                    limit_bytes: int | None, units_digest: Callable[[], str], *, one: bool) -> StreamsChoice:
    """How many streams the build's units run (``runtime.streams``; ``sbrs.compile.unit_streams``): what the app
    asks, or under ``auto`` one stream or two as measured here on the build's unit files. Not measured (one
    stream): a switch gives the frame in flight up or resumes it (one frame at a time), the app shares ONNX
    Runtime's pool or runs on another provider, the machine has one core, or two arenas would break the
    app's memory limit."""
    from sbrs.compile.timing_cache import measured_once, timing_path
    from sbrs.compile.unit_streams import ScenarioStreams, StreamsChoice, choose_streams, measure_streams
    from sbrs.compile.unit_threads import whole_frame_units
    from sbrs.model import params_bytes
    from sbrs.ort_env import CPU_PROVIDER, machine_key, resolve_providers

    runtime = app.config.runtime
    asked = str(runtime.streams)
    if runtime.streams != "auto":
        streams = runtime.max_streams(by_parts=False)
        return StreamsChoice(streams, asked, "as the app file sets it, not measured"
                             + ("" if streams == int(asked) else f" (one with on_switch: {runtime.on_switch})"))
    providers = resolve_providers(tuple(runtime.providers), where=app.config.path)
    cores = os.cpu_count() or 1
    why_one = ("not measured with session: one (the app's one graph takes its scenario as an input)"
               if one else
               f"on_switch: {runtime.on_switch} runs one frame at a time" if runtime.on_switch != "finish" else
               "the app runs on ONNX Runtime's global pool (threads_scope: process)"
               if runtime.threads_scope != "session" else
               f"not measured on {providers[0]}" if providers != (CPU_PROVIDER,) else
               "this machine has one core" if cores < 2 else
               "two arenas would break memory_limit_mb" if limit_bytes is not None
               and params_bytes(app.models.values()) + 2 * plan.arena_bytes > limit_bytes else None)
    if why_one is not None:
        return StreamsChoice(1, asked, why_one)
    suffix = OPTIMIZED_SUFFIX if optimized else ".onnx"
    threads = runtime.threads or cores
    plain = {s.name: s.model_path for s in app.config.scenarios}

    def measure() -> dict[str, Any]:
        figures = measure_streams({unit.id: str(staging / f"{unit.id}{suffix}") for unit in plan.units},
                                  plan.sequences, providers, lambda unit: min(threads, unit_threads.get(unit, threads)),
                                  optimized=optimized, warm=whole_frame_units(plan.sequences), plain=plain)
        return {scenario: figure.to_dict() for scenario, figure in figures.items()}

    timing = measured_once(timing_path("streams", units_digest(), machine_key(providers), optimized, threads,
                                       sorted(unit_threads.items()), sorted(plain)), measure)
    choice = choose_streams({s: ScenarioStreams.from_dict(f) for s, f in timing.figures.items()}, timing.load)
    if choice.busy(cores) and not timing.cached:
        logger.warning("sbrs build: runtime.streams: auto measured %s on a busy machine (load average %.1f, %d cores): "
                       "the choice (%d) is that machine's, kept for its next builds until one finds it quiet; "
                       "or set runtime.streams", app.name, timing.load, cores, choice.streams)
    return choice


def _share_optimized_weights(models: list[Path], shared: Path) -> None:
    """Move the weights of the optimised models (each written with its own ``<model>.bin``) into ``shared``,
    each distinct tensor once and page-aligned, as ``weights.bin`` holds the portable ones.

    Units of scenarios that share layers, and band calls of one layer that differ only in their padding,
    carry the same reordered weights: in separate files they are separate pages in memory once mapped
    (MobileNetV2 by parts: 27 MB of files for 14 MB of weights). ONNX Runtime maps each tensor from the one
    file, so every session using a tensor maps the same pages.
    """
    weights = _WeightsFile(shared)
    try:
        for path in models:
            own = path.with_name(path.name + ".bin")
            if not own.exists():  # ONNX Runtime writes none for a model without an initializer of 1 KiB or more
                continue
            model = onnx.load_model(str(path), load_external_data=False)
            with open(own, "rb") as stream:
                for tensor in _initializers(model.graph):
                    if tensor.data_location != onnx.TensorProto.EXTERNAL:
                        continue
                    entries = {entry.key: entry.value for entry in tensor.external_data}
                    stream.seek(int(entries.get("offset", 0)))
                    data = stream.read(int(entries["length"]))
                    offset, length = weights.place(np.frombuffer(data, dtype=np.uint8))
                    del tensor.external_data[:]
                    for name, value in (("location", shared.name), ("offset", str(offset)), ("length", str(length))):
                        entry = tensor.external_data.add()
                        entry.key, entry.value = name, value
            onnx.save_model(model, str(path))
            own.unlink()
    finally:
        weights.close()


def _initializers(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    """The initializers of ``graph`` and of every subgraph inside it (ONNX Runtime's optimised form of the app as
    one graph keeps reordered weights inside the ``If`` branches that use them)."""
    found = list(graph.initializer)
    for node in graph.node:
        for attribute in node.attribute:
            for subgraph in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                found.extend(_initializers(subgraph))
    return found


def _plans(app: App, moc: Any, *, one: bool, mode: str, limit: int | None) -> tuple[Any, Any, Any, Any, str]:
    """The plan of one form of the app (``one``: the one graph's, else its execution units'), the plan the runtime
    runs (with SBRS-TP's shadow slots where they fit the memory ``limit``), the shadow slots, the transition tables
    and the arena they were made for."""
    from sbrs.compile.transitions import build_transition_plan, plan_shadow
    from sbrs.compile.unit_plan import build_unit_plan
    from sbrs.model import params_bytes

    arena = "shadow" if mode == "sbrs-tp" else "shared"
    if one:  # the app as one graph: the plan of its one unit (``sbrs.compile.one_graph``)
        from sbrs.compile.one_graph import one_plan

        plan = one_plan(app)
    else:
        plan = build_unit_plan(app, None, moc, transition=mode)
    run_plan, shadow = plan, None
    if arena == "shadow":
        run_plan, shadow = plan_shadow(plan)
        if limit is not None and params_bytes(app.models.values()) + run_plan.arena_bytes > limit:
            arena, run_plan, shadow = "shared", plan, None  # the shadow slots would break the memory limit
    return plan, run_plan, shadow, build_transition_plan(run_plan, arena=arena, shadow=shadow), arena


def _write_form(app: App, moc: Any, plan: Any, staging: Path, *, one: bool) -> tuple[str | None, str | None]:
    """Write one form of the app into ``staging``: the one graph (``one.onnx``) or a file per execution unit of
    ``plan``, their weights in one file, and ONNX Runtime's optimised form of each (``_save_optimized_models``'s
    result)."""
    from sbrs.compile.layout import UnitModels

    weights = _WeightsFile(staging / WEIGHTS)
    try:
        if one:
            from sbrs.compile.one_graph import one_graph
            from sbrs.compile.one_plan import ONE_UNIT

            model = one_graph(app, moc, initializer=weights.tensor).model  # the same graph, weights in the file
            onnx.save_model(model, str(staging / f"{ONE_UNIT}.onnx"))
        else:
            specs = {t.id: t.spec for t in plan.tensors}
            progress = Progress(logger, "writing unit files", len(plan.units), unit="units")
            unit_models = UnitModels(app.models, moc, specs, app.name, initializer=weights.tensor)
            for done, unit in enumerate(plan.units, 1):
                onnx.save_model(unit_models(unit), str(staging / f"{unit.id}.onnx"))
                progress(done)
    finally:
        weights.close()
    return _save_optimized_models(app, staging, one=one, units=None if one else plan)


def units_without_measuring(app: App, reduction: Mapping[str, Any] | None) -> str | None:
    """Why ``runtime.session: auto`` keeps the app's execution units without measuring one graph
    (``sbrs.compile.session_choice``), or None: what the app file's checks refuse for ``session: one``
    (``sbrs.app.config``), and a scenario set that cannot share one graph (its ``InputError``)."""
    runtime = app.config.runtime
    if reduction is not None or app.config.memory_limit_mb is not None:
        return "a memory limit may need processing by parts, which one graph cannot be"
    if runtime.on_switch == "resume":
        return "on_switch: resume resumes a frame after a step both scenarios share; one graph runs it as one call"
    from sbrs.compile.one_graph import check_one_graph

    try:
        check_one_graph(app)
    except InputError as exc:
        return f"the scenarios cannot share one graph ({exc.detail})"
    return None


def _chosen_session(app: App, units: Path, one: Path, plan: Any, one_plan: Any, optimized: bool,
                    unit_threads: Mapping[str, int], units_digest: Callable[[], str]) -> SessionChoice:
    """Units or one graph under ``runtime.session: auto``, measured here on the build's files of both forms (the
    units' in ``units``, the one graph's in ``one``; ``sbrs.compile.session_choice``), the figures kept per machine
    and files (``sbrs.compile.timing_cache``)."""
    from sbrs.compile.one_plan import ONE_UNIT
    from sbrs.compile.session_choice import ScenarioSession, choose_session, measure_session
    from sbrs.compile.timing_cache import files_digest, is_busy, measured_once, timing_path
    from sbrs.compile.unit_threads import whole_frame_units
    from sbrs.ort_env import GPU_PROVIDERS, machine_key, resolve_providers

    runtime = app.config.runtime
    providers = resolve_providers(tuple(runtime.providers), where=app.config.path)
    threads = runtime.threads or os.cpu_count() or 1
    suffix = OPTIMIZED_SUFFIX if optimized else ".onnx"
    indices = {name: one_plan.index(name) for name in plan.sequences}

    def measure() -> dict[str, Any]:
        figures = measure_session({unit.id: str(units / f"{unit.id}{suffix}") for unit in plan.units},
                                  plan.sequences, str(one / f"{ONE_UNIT}{suffix}"), indices, providers,
                                  lambda unit: min(threads, unit_threads.get(unit, threads)), threads,
                                  optimized=optimized, warm=whole_frame_units(plan.sequences))
        return {scenario: figure.to_dict() for scenario, figure in figures.items()}

    one_digest = files_digest(sorted(path for path in one.iterdir() if path.is_file() and OPTIMIZED_SUFFIX not in
                                     path.name))
    timing = measured_once(timing_path("session", units_digest(), one_digest, machine_key(providers), optimized,
                                       threads, sorted(unit_threads.items()), indices), measure)
    choice = choose_session({s: ScenarioSession.from_dict(f) for s, f in timing.figures.items()}, timing.load,
                            gpu=any(provider in GPU_PROVIDERS for provider in providers))
    if is_busy(timing.load) and not timing.cached:
        logger.warning("sbrs build: runtime.session: auto measured %s on a busy machine (load average %.1f): the "
                       "choice (%s) is that machine's, kept for its next builds until one finds it quiet; or set "
                       "runtime.session", app.name, timing.load, choice.session)
    return choice


def _one_graph_failed(app: App, error: Exception) -> SessionChoice:
    """Units under ``auto`` where ONNX Runtime could not optimise or run the app's one graph on its providers (a
    GPU provider's path for the graph's ``If`` nodes, say, not run before on that machine), with a warning naming
    the error: the units ran (their files and figures were made first), so the build goes on with them."""
    from sbrs.compile.session_choice import forced_units

    detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
    logger.warning("sbrs build: runtime.session: auto: %s's one graph failed on %s (%s); the build keeps its "
                   "execution units", app.name, ", ".join(app.config.runtime.providers), detail)
    return forced_units(f"its one graph failed on this machine ({type(error).__name__}: {detail})")


def compile_app(app: App, folder: Path | None = None, *, reduction: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write the build of ``app`` (default ``APP.build/`` beside the app file); returns its manifest.

    ``reduction`` (``sbrs.reduction.search.reduce_app``'s result for a memory limit): unless Algorithm 9
    exited early (the unreduced plan fits), the build holds band calls (``sbrs.compile.parts_plan``)
    instead of execution units: one ``c<key>.onnx`` per distinct call model and the ``PartsPlan`` in the
    manifest (and no unit plan).
    The limit is recorded either way (``memory_limit_bytes``), so a run can tell a build made for another.

    The app's form (``runtime.session``): its execution units, or one graph (``one.onnx``); under ``auto`` the
    build writes both, measures them (``sbrs.compile.session_choice``) and keeps the chosen form's files alone,
    unless ``units_without_measuring`` says why one graph cannot run the app. The choice is the manifest's
    ``session``.
    """
    from sbrs.compile.fit import scenario_memory_mb as parts_memory_mb
    from sbrs.compile.footprint import parts_footprint, units_footprint
    from sbrs.compile.session_choice import asked_choice, forced_units
    from sbrs.moc import derive_moc
    from sbrs.model import naive_buffer_bytes, params_bytes

    folder = folder or build_dir(app.config.path)
    mode = app.config.runtime.transition
    asked = app.config.runtime.session
    arena = "shadow" if mode == "sbrs-tp" else "shared"
    parts = None
    if reduction is not None and not reduction["early_exit"] and asked == "one":
        raise InputError(f"the memory limit {reduction['memory_limit_bytes'] / 1e6:g} MB needs processing by parts, "
                         "which one graph cannot be: use session: units or a larger limit",
                         file=str(app.config.path), field="runtime.session")
    if reduction is not None and not reduction["early_exit"]:
        from sbrs.compile.fit import fit_parts

        parts = fit_parts(app, reduction)
    session = asked_choice(asked) if asked != "auto" else None
    if session is None:
        why = units_without_measuring(app, reduction)
        session = None if why is None else forced_units(why)
    moc = plan = run_plan = shadow = transitions = None
    one = parts is None and session is not None and session.session == "one"
    limit = None if reduction is None else int(reduction["memory_limit_bytes"])
    if parts is None:
        moc = derive_moc(app.models, app.config.adaptive)
        plan, run_plan, shadow, transitions, arena = _plans(app, moc, one=one, mode=mode, limit=limit)

    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    other: Path | None = None  # the form auto measured and did not keep
    try:
        if parts is None:
            optimized_for, not_optimized = _write_form(app, moc, plan, staging, one=one)
        else:
            from sbrs.compile.parts import call_models
            from sbrs.compile.parts_plan import call_file

            weights = _WeightsFile(staging / WEIGHTS)
            try:
                calls = call_models(app.models, parts)
                progress = Progress(logger, "writing band-call files", len(calls), unit="models")
                for done, (key, model) in enumerate(calls.items(), 1):
                    weights.externalise(model)
                    onnx.save_model(model, str(staging / call_file(key)))
                    progress(done)
            finally:
                weights.close()
            optimized_for, not_optimized = _save_optimized_models(app, staging, one=False)
        units_digest = functools.cache(lambda: _units_digest(staging))  # hashed once, and only where measured
        unit_threads = {} if plan is None or one else _measured_unit_threads(app, plan, staging,
                                                                              optimized_for is not None, units_digest)
        streams = (StreamsChoice(parts.streams, str(app.config.runtime.streams), "chosen by the search under the "
                                 "memory limit (band streams)") if parts is not None
                   else _chosen_streams(app, run_plan, staging, optimized_for is not None, unit_threads, limit,
                                        units_digest, one=one))
        if session is None and streams.asked == "auto" and streams.streams > 1:
            session = forced_units(f"the units measured faster on {streams.streams} streams ({streams.reason}), where "
                                   "runtime.streams: auto runs one graph on one")
        if session is None:  # auto: the one graph beside the units, both timed, the chosen form's files kept
            other = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
            try:
                one_form = _plans(app, moc, one=True, mode=mode, limit=limit)
                one_optimized = _write_form(app, moc, one_form[0], other, one=True)
                optimized = optimized_for is not None and one_optimized[0] is not None
                session = _chosen_session(app, staging, other, plan, one_form[0], optimized, unit_threads,
                                          units_digest)
            except InputError:
                raise
            except Exception as exc:  # ONNX Runtime's error types derive from Exception alone
                session = _one_graph_failed(app, exc)
            if session.session == "one":
                staging, other = other, staging
                plan, run_plan, shadow, transitions, arena = one_form
                optimized_for, not_optimized = one_optimized
                unit_threads = {}
                streams = _chosen_streams(app, run_plan, staging, optimized_for is not None, unit_threads, limit,
                                          units_digest, one=True)
            shutil.rmtree(other)
            other = None
        files = {record.pop("path"): record for record in
                 (input_record(path, staging) for path in sorted(staging.iterdir()) if path.is_file())}
        manifest: dict[str, Any] = {
            "format": FORMAT, "sbrs": __version__, "app": app.name,
            "inputs": [*(input_record(path, folder.parent) for path in input_files(app)),
                       *(input_record(path, folder.parent, glob) for path, glob in input_folders(app))],
            "options": {"granularity": plan.granularity, "transition": mode, "transition_arena": arena}
            if plan is not None else {"granularity": "parts", "transition": mode, "transition_arena": "shared"},
            "config": app.config.to_dict(),
            "plan": None if run_plan is None else run_plan.to_dict(),
            "shadow": dict(shadow) if shadow is not None else None,
            "transitions": None if transitions is None else transitions.to_dict(),
            "model_bytes": {"params_bytes": params_bytes(app.models.values()),
                            "naive_bytes": sum(naive_buffer_bytes(m) for m in app.models.values())},
            "scenario_memory_mb": scenario_memory_mb(app, plan) if plan is not None else
            parts_memory_mb(parts, {name: params_bytes([m]) for name, m in app.models.items()}),
            "memory_limit_bytes": None if reduction is None else int(reduction["memory_limit_bytes"]),
            "parts": None if parts is None else parts.to_dict(),
            "footprint": (parts_footprint(parts) if parts is not None else units_footprint(
                app.models, run_plan, streams.streams)).to_dict(),
            "weights_bytes": (staging / WEIGHTS).stat().st_size,
            "optimized_for": optimized_for,
            "not_optimized": not_optimized,
            "unit_threads": unit_threads,
            "streams": streams.to_dict(),
            "session": session.to_dict(),
            "files": files,
        }
        manifest["checksum"] = manifest_checksum(manifest)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        _swap_in(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if other is not None:
            shutil.rmtree(other, ignore_errors=True)
        raise
    return manifest


def _swap_in(staging: Path, folder: Path) -> None:
    """``staging`` becomes the build ``folder``: the old build is renamed aside and the new one renamed in, one
    build at a time (``sbrs.folder_lock``). Two builds of one app finishing together each deleted the folder and
    renamed theirs in, and a run starting between the delete and the rename found no build; now the folder is
    missing only between two renames, and the build that comes last is the one kept."""
    aside: Path | None = None
    with folder_lock(folder.parent):
        if folder.exists():
            aside = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old.", dir=folder.parent))
            os.replace(folder, aside)  # onto the empty folder mkdtemp made
        os.replace(staging, folder)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
