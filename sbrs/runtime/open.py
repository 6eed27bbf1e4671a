"""Opening a runtime: the one that executes an app's current build, or one compiled from the app in memory.

``runtime_for(app)`` is the Python API's entry point (``sbrs.runtime_for``), ``open_runtime(path)`` what
``sbrs run`` runs and ``runtime_of_build(build)`` the runtime of a verified build (units or band calls). The
imports are made where they are needed: ``sbrs run`` on a build of units loads neither the compiler nor the
runtime by parts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbrs.errors import InputError

if TYPE_CHECKING:

    from sbrs.app.app import App
    from sbrs.app.config import AppConfig
    from sbrs.artifact.read import LoadedBuild
    from sbrs.runtime.engine import Runtime
    from sbrs.runtime.events import RunObserver


logger = logging.getLogger(__name__)

#: The options ``runtime_for`` takes, as ``sbrs run``'s options of the same names (``rebuild``: an app file's path
#: only); every other setting (``runtime.streams``, threads, the provider) is the app file's.
RUNTIME_OPTIONS: tuple[str, ...] = ("granularity", "transition", "on_switch", "transition_arena",
                                    "transition_schedule", "observers", "rebuild")


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

    unknown = sorted(set(options) - set(RUNTIME_OPTIONS))
    if unknown:
        raise TypeError(f"runtime_for got unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                        f"(options: {', '.join(RUNTIME_OPTIONS)}; the app's other settings, such as "
                        "runtime.streams, are its file's)")
    if isinstance(app, str | os.PathLike):
        if not use_build:
            raise TypeError("use_build applies to a loaded App; a path always opens the app's build")
        runtime, _, _ = open_runtime(app, **options)
        return runtime
    from sbrs.app.app import App  # (imported already wherever a caller holds one; a path's run never loads it)

    if not isinstance(app, App):
        raise TypeError(f"runtime_for takes an app file's path (str or os.PathLike) or a loaded sbrs App, "
                        f"not {type(app).__name__}")
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


def open_runtime(app_path: str | Path, *, granularity: str | None = None, transition: str | None = None,
                 on_switch: str | None = None, observers: Iterable[RunObserver] = (), rebuild: bool = False,
                 **options: Any) -> tuple[Runtime, AppConfig, Mapping[str, float]]:
    """What ``sbrs run`` runs: the runtime of the app's current build, its config and per-scenario memory (MB).

    No build yet (or ``rebuild``): build one first (in a child process), which is logged. Runtime options other
    than those the build was compiled for: compile in memory from the app, as before builds (logged too).
    ``options``: the other options of ``Runtime`` (``transition_arena``, ``transition_schedule``).
    """
    from sbrs.artifact.child import ensure_build
    from sbrs.artifact.read import load_build
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
