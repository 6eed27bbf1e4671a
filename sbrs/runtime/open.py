"""Opening a runtime: the one that executes an app's current build, or one compiled from the app in memory.

``runtime_for(app)`` is the Python API's entry point (``sbrs.runtime_for``), ``open_runtime(path)`` what
``sbrs run`` runs and ``runtime_of_build(build)`` the runtime of a verified build (units or band calls). The
imports are made where they are needed: ``sbrs run`` on a build of units loads neither the compiler nor the
runtime by parts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbrs.errors import InputError

if TYPE_CHECKING:
    import onnx

    from sbrs.app.app import App
    from sbrs.app.config import AppConfig
    from sbrs.artifact.read import LoadedBuild
    from sbrs.compile.parts import Tiles
    from sbrs.compile.parts_plan import PartsPlan
    from sbrs.compile.tables import TransitionPlan
    from sbrs.model.cnn import CnnModel
    from sbrs.runtime.engine import Program, Runtime
    from sbrs.runtime.events import RunObserver


logger = logging.getLogger(__name__)


def runtime_for(app: App | str | os.PathLike[str], *, use_build: bool = True, **options: Any) -> Runtime:
    """A ``Runtime`` running an app's scenarios (options: see ``Runtime``).

    Given a path (``str`` or ``Path`` of an app file): the runtime of the app's current build, opened exactly as
    ``sbrs run`` opens it (``open_runtime``: built first in a child process when missing, saying so through
    logging; a stale, damaged or mismatched build is refused with ``sbrs run``'s ``InputError``), holding what
    ``sbrs run`` holds: no ``App``, and with a build no onnx, pydantic or YAML imported. ``rebuild=True``
    builds again first.

    Given a loaded ``App``: with ``use_build`` (default) the app's build folder is used when it is current,
    intact, made from this very configuration and compiled for the options asked; otherwise (no build, a stale
    or damaged one, other options) the runtime is compiled from the models in memory, which ``app`` already
    holds, so nothing is refused for the build's sake. With a ``memory_limit_mb`` that reuse alone misses, the
    runtime runs band calls (the same API): from the build, or compiled here from the band heights saved in the
    app's plan file when it is current and made for this limit. The search for them runs only in ``sbrs build``:
    without a saved choice this is an ``InputError`` that says to run ``sbrs build APP.yaml``.
    """
    from sbrs.runtime.engine import Runtime

    if isinstance(app, str | os.PathLike):
        if not use_build:
            raise TypeError("use_build applies to a loaded App; a path always opens the app's build")
        runtime, _, _ = open_runtime(app, **options)
        return runtime
    if use_build:
        from sbrs.artifact.read import MANIFEST, build_dir, load_build

        if (build_dir(app.config.path) / MANIFEST).is_file():
            try:
                build = load_build(app.config.path)
            except InputError:
                build = None
            if build is not None and _same_config(build.config, app.config) and _build_fits(build, options):
                return runtime_of_build(build, **options)
    if app.config.memory_limit_mb is not None:
        from sbrs.compile.fit import fit_parts
        from sbrs.reduction.search import saved_reduction

        reduction = saved_reduction(app)
        if reduction is None:
            _refuse_unsearched(app)
        elif not reduction["early_exit"]:
            options.pop("granularity", None)
            return Runtime.from_app(app, parts=fit_parts(app, reduction), **options)
    return Runtime.from_app(app, **options)


def _refuse_unsearched(app: App) -> None:
    """``InputError`` when ``app``'s memory limit needs processing by parts (its unreduced plan is above it,
    Algorithm 9, lines 1-5) and no band heights were searched for it (``sbrs build``)."""
    from sbrs.memory import build_plan, default_plan_path

    assert app.config.memory_limit_mb is not None
    plan = build_plan(app)
    if plan.memory.params_bytes + plan.memory.arena_bytes <= int(app.config.memory_limit_mb * 1e6):
        return
    raise InputError(f"memory_limit_mb {app.config.memory_limit_mb:g} needs processing by parts and the app's plan "
                     f"({default_plan_path(app).name}) holds no band heights for it: run `sbrs build "
                     f"{app.config.path}`", file=str(app.config.path), field="memory_limit_mb")


def _same_config(built: AppConfig, loaded: AppConfig) -> bool:
    """Equal configurations up to where files lie (paths are compared by name: the build's fingerprint
    already vouches for their content, and generated models are named by a key of their content)."""

    def placeless(config: AppConfig) -> AppConfig:
        return replace(config, path=Path(config.path).name, scenarios=tuple(
            replace(s, defined_in=Path(s.defined_in).name, model_path=Path(s.model_path).name,
                    calibration=None if s.calibration is None else Path(s.calibration).name)
            for s in config.scenarios))

    return placeless(built) == placeless(loaded)


def _build_fits(build: LoadedBuild, options: Mapping[str, Any]) -> bool:
    # units and arena made for ``on_switch: resume`` (the app's, when its build was made) or not: a runtime asking
    # for resume runs a build made for it, and the others a build made without it
    built = build.config.runtime.on_switch
    if build.parts is None and ((options.get("on_switch") or built) == "resume") != (built == "resume"):
        return False
    mode = options.get("transition") or build.config.runtime.transition
    arena = options.get("transition_arena") or (build.transition_arena if mode == build.transition else
                                                "shadow" if mode == "sbrs-tp" else "shared")
    return bool(build.matches(options.get("granularity"), mode, arena))


def runtime_of_build(build: LoadedBuild, **options: Any) -> Runtime:
    """The runtime executing ``build``: its execution units or, for an app that runs by parts, its band calls;
    ``options`` as ``Runtime``'s (granularity is not an option of a build by parts: its calls are fixed)."""
    from sbrs.runtime.engine import Runtime

    return Runtime.from_build(build, **options)


def app_program(app: App, *, granularity: str | None, parts: PartsPlan | None, transition: str | None,
                transition_arena: str | None, transition_schedule: str,
                on_switch: str | None = None) -> tuple[Program, str]:
    """What a runtime of ``app`` compiled in memory executes, and its transition mode: ``parts`` (band calls,
    one shared arena), else the MoC (Algorithm 5) cut into execution units, their arena planned, with shadow
    slots under SBRS-TP and the transition tables (Algorithm 6); under ``on_switch`` (default the app's)
    ``resume``, units and arena made for resuming (``build_unit_plan``)."""
    from sbrs.runtime.engine import Program, runtime_options

    config = app.config
    if parts is not None:
        from sbrs.compile.parts import call_models

        mode = _parts_mode(config, transition, transition_arena, transition_schedule)
        from sbrs.compile.footprint import parts_footprint

        calls = call_models(app.models, parts)
        return Program(parts, _tables(parts), parts.model_bytes, calls.__getitem__,
                       footprint=parts_footprint(parts)), mode
    from sbrs.compile.footprint import units_footprint
    from sbrs.compile.layout import UnitModels
    from sbrs.compile.transitions import build_transition_plan, plan_shadow
    from sbrs.compile.unit_plan import build_unit_plan
    from sbrs.moc import derive_moc
    from sbrs.model import naive_buffer_bytes, params_bytes

    mode, arena = runtime_options(config, transition, transition_arena, transition_schedule)
    if config.runtime.session == "one":
        return one_program(app, arena), mode
    moc = derive_moc(app.models, config.adaptive)
    plan = build_unit_plan(app, granularity, moc, transition=mode, on_switch=on_switch)
    # The model's figures (thesis Eq. 2.6-2.7), kept because the models themselves are not.
    model_bytes = {"params_bytes": params_bytes(app.models.values()),
                   "naive_bytes": sum(naive_buffer_bytes(m) for m in app.models.values())}
    shadow = None
    if arena == "shadow":
        plan, shadow = plan_shadow(plan)
    transitions = build_transition_plan(plan, arena=arena, shadow=shadow)
    specs = {t.id: t.spec for t in plan.tensors}
    units = {unit.id: unit for unit in plan.units}

    unit_models = UnitModels(app.models, moc, specs, app.name)

    def model(unit_id: str) -> onnx.ModelProto:
        return unit_models(units[unit_id])

    footprint = units_footprint(app.models, plan, app.config.runtime.max_streams(by_parts=False))
    return Program(plan, transitions, model_bytes, model, shadow, footprint=footprint), mode


def one_program(app: App, arena: str) -> Program:
    """What a runtime of ``app`` as one graph (``runtime.session: one``) compiled in memory executes: the graph
    (``sbrs.compile.one_graph``), its ``OnePlan`` with the arena of its frame and outputs, the shadow slots of
    SBRS-TP (``arena`` ``shadow``) and the transition tables."""
    from sbrs.compile.footprint import units_footprint
    from sbrs.compile.one_graph import one_graph, one_plan
    from sbrs.compile.transitions import build_transition_plan, plan_shadow
    from sbrs.model import naive_buffer_bytes, params_bytes
    from sbrs.runtime.engine import Program

    graph = one_graph(app)
    plan = one_plan(app)
    shadow = None
    if arena == "shadow":
        plan, shadow = plan_shadow(plan)
    transitions = build_transition_plan(plan, arena=arena, shadow=shadow)
    model_bytes = {"params_bytes": params_bytes(app.models.values()),
                   "naive_bytes": sum(naive_buffer_bytes(m) for m in app.models.values())}
    footprint = units_footprint(app.models, plan, app.config.runtime.max_streams(by_parts=False))
    return Program(plan, transitions, model_bytes, lambda _key: graph.model, shadow, footprint=footprint)


def build_program(build: LoadedBuild, *, granularity: str | None, transition: str | None,
                  transition_arena: str | None, transition_schedule: str) -> tuple[Program, str]:
    """What the runtime of a verified build executes, and its transition mode: ONNX Runtime reads the model
    files (their optimised form where it was made on this machine). A build of units runs only with the
    options it was compiled for; a build by parts with either mode, whatever the granularity."""
    from sbrs.runtime.engine import Program, runtime_options

    if build.parts is not None:
        from sbrs.compile.parts_plan import call_file

        parts = build.parts
        mode = _parts_mode(build.config, transition, transition_arena, transition_schedule)
        return Program(parts, _tables(parts), parts.model_bytes, lambda key: build.model_path(call_file(key)),
                       optimized=build.optimized_here, footprint=build.footprint), mode
    plan, transitions = build.units()
    if transition in (None, build.transition):
        transition_arena = transition_arena or build.transition_arena  # e.g. shared, to keep a memory limit
    mode, arena = runtime_options(build.config, transition, transition_arena, transition_schedule)
    if not build.matches(granularity, mode, arena):
        raise InputError(f"the build was compiled for granularity {build.granularity}, transition "
                         f"{build.transition}, arena {build.transition_arena}; run `sbrs build` with the "
                         f"options wanted or load the app", field="build")
    return Program(plan, transitions, build.model_bytes, build.unit_path, build.shadow,
                   optimized=build.optimized_here, release=True, footprint=build.footprint,
                   unit_threads=build.unit_threads, streams=build.streams), mode


def models_program(models: Mapping[str, CnnModel], band_rows: Mapping[str, Mapping[str, int]] | None, *,
                   cuts: Mapping[str, Sequence[str]] | None, tiles: Tiles | None, initial: str | None,
                   threads: int | None, transition: str) -> tuple[AppConfig, Program]:
    """The configuration and program of bare models run by parts (``Runtime.from_models``)."""
    from sbrs.compile.fit import models_config
    from sbrs.compile.footprint import parts_footprint
    from sbrs.compile.parts import call_models, compile_parts
    from sbrs.runtime.engine import Program

    config = models_config(models, initial=initial, threads=threads, transition=transition)
    plan = compile_parts(models, band_rows, cuts=cuts, tiles=tiles)
    calls = call_models(models, plan)
    return config, Program(plan, _tables(plan), plan.model_bytes, calls.__getitem__, footprint=parts_footprint(plan))


def _parts_mode(config: AppConfig, transition: str | None, transition_arena: str | None,
                transition_schedule: str) -> str:
    """The transition mode of a runtime by parts; its arena is the one shared arena (shadow slots would double
    the arena the memory limit bounds)."""
    from sbrs.runtime.engine import runtime_options

    mode, arena = runtime_options(config, transition, transition_arena or "shared", transition_schedule)
    if arena != "shared":
        raise InputError(f"transition arena '{arena}' is not available when the app runs by parts (its "
                         "arena is bounded by memory_limit_mb): use 'shared'", field="transition_arena")
    return mode


def _tables(parts: PartsPlan) -> TransitionPlan:
    if parts.transitions is None:
        raise InputError("the parts plan has no transition tables (compile it with sbrs.compile.parts.compile_parts)",
                         field="parts")
    return parts.transitions


def open_runtime(app_path: str | Path, *, granularity: str | None = None, transition: str | None = None,
                 on_switch: str | None = None, observers: Iterable[RunObserver] = (), rebuild: bool = False,
                 **options: Any) -> tuple[Runtime, AppConfig, Mapping[str, float]]:
    """What ``sbrs run`` runs: the runtime of the app's current build, its config and per-scenario memory (MB).

    No build yet (or ``rebuild``): build one first (in a child process), which is logged. Runtime options other
    than those the build was compiled for: compile in memory from the app, as before builds (logged too).
    ``options``: the other options of ``Runtime`` (``transition_arena``, ``transition_schedule``).
    """
    from sbrs.artifact.read import ensure_build, load_build
    from sbrs.runtime.engine import Runtime

    folder = ensure_build(app_path, rebuild=rebuild)
    build = load_build(app_path, folder)
    if build.optimized_for is not None and not build.optimized_here:
        logger.info("sbrs run: the build's ONNX Runtime-optimised models were made on another machine or "
                    "onnxruntime (%s); loading its portable models instead (a slower start; `sbrs build %s` here "
                    "makes them for this machine)", build.optimized_for, app_path)
    if _build_fits(build, {"granularity": granularity, "transition": transition, "on_switch": on_switch, **options}):
        if build.parts is not None and granularity is not None:
            logger.info("sbrs run: the app runs by parts under its memory limit; --granularity %s does not apply",
                        granularity)
        runtime = runtime_of_build(build, granularity=granularity, transition=transition, on_switch=on_switch,
                                   observers=observers, **options)
        return runtime, build.config, build.scenario_memory_mb
    logger.info("sbrs run: the build is for granularity %s, transition %s, on_switch %s; compiling the requested "
                "options in memory", build.granularity, build.transition, build.config.runtime.on_switch)
    from sbrs.app import load_app
    from sbrs.artifact.write import scenario_memory_mb

    app = load_app(app_path)
    runtime = Runtime.from_app(app, granularity=granularity, transition=transition, on_switch=on_switch,
                               observers=observers, **options)
    memory = scenario_memory_mb(app, runtime.plan)
    return runtime, app.config, memory
