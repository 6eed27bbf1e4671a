"""Opening a runtime: the one that executes an app's current build, or one compiled from the app in memory.

``runtime_for(app)`` is the Python API's entry point (``sbrs.runtime_for``), ``open_runtime(path)`` what
``sbrs run`` runs and ``runtime_of_build(build)`` the runtime of a verified build (units or band calls). The
imports are made where they are needed: ``sbrs run`` on a build of units loads neither the compiler nor the
runtime by parts.
"""

from __future__ import annotations

import sys
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


def runtime_for(app: App, *, use_build: bool = True, **options: Any) -> Runtime:
    """A ``Runtime`` running ``app``'s scenarios (options: see ``Runtime``).

    With ``use_build`` (default), the app's ``sbrs build`` folder is used when it is current, intact, made
    from this very configuration and compiled for the options asked; otherwise (no build, a stale or
    damaged one, other options) the runtime is compiled from the models in memory, which ``app`` already
    holds, so nothing is refused here (``sbrs run`` refuses a bad build instead).

    With ``memory_limit_mb`` set and reuse alone above it, the runtime runs band calls
    (``sbrs.runtime.reduced.ReducedRuntime``, the same API): from the build, or compiled here from the
    band heights saved in the app's plan file when it is current and made for this limit, else searched
    now (``sbrs build``'s Algorithm 9 with its default options).
    """
    from sbrs.runtime.engine import Runtime

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
        from sbrs.compile.parts_plan import fit_reduction
        from sbrs.reduction.search import app_reduction
        from sbrs.runtime.reduced import runtime_from_app

        reduction = app_reduction(app)
        if not reduction["early_exit"]:
            options.pop("granularity", None)
            return runtime_from_app(app, fit_reduction(app, reduction), **options)
    return Runtime(app, **options)


def _same_config(built: AppConfig, loaded: AppConfig) -> bool:
    """Equal configurations up to where files lie (paths are compared by name: the build's fingerprint
    already vouches for their content, and generated models are named by a key of their content)."""

    def placeless(config: AppConfig) -> AppConfig:
        return replace(config, path=Path(config.path).name, scenarios=tuple(
            replace(s, defined_in=Path(s.defined_in).name, model_path=Path(s.model_path).name)
            for s in config.scenarios))

    return placeless(built) == placeless(loaded)


def _build_fits(build: LoadedBuild, options: Mapping[str, Any]) -> bool:
    mode = options.get("transition") or build.config.runtime.transition
    arena = options.get("transition_arena") or (build.transition_arena if mode == build.transition else
                                                "shadow" if mode == "sbrs-tp" else "shared")
    return bool(build.matches(options.get("granularity"), mode, arena))


def runtime_of_build(build: LoadedBuild, **options: Any) -> Runtime:
    """The runtime executing ``build``: its execution units (``Runtime``) or, for an app that runs by parts,
    its band calls (``sbrs.runtime.reduced.ReducedRuntime``); ``options`` as ``Runtime``'s (granularity is
    not an option of a build by parts: its calls are fixed)."""
    if build.reduced is None:
        from sbrs.runtime.engine import Runtime

        if options.get("transition") in (None, build.transition):
            options.setdefault("transition_arena", build.transition_arena)  # e.g. shared to keep a memory limit
        return Runtime(build=build, **options)
    from sbrs.runtime.reduced import runtime_from_build

    options.pop("granularity", None)
    return runtime_from_build(build, **options)


def open_runtime(app_path: str | Path, *, granularity: str | None = None, transition: str | None = None,
                 on_switch: str | None = None, observers: Iterable[RunObserver] = (), rebuild: bool = False,
                 say: Any = None) -> tuple[Runtime, AppConfig, Mapping[str, float]]:
    """What ``sbrs run`` runs: the runtime of the app's current build, its config and per-scenario memory (MB).

    No build yet (or ``rebuild``): build one first (in a child process) and say so through ``say``. Runtime
    options other than those the build was compiled for: compile in memory from the app, as before builds.
    """
    from sbrs.artifact.read import ensure_build, load_build
    from sbrs.runtime.engine import Runtime

    say = say or (lambda text: sys.stderr.write(text + "\n"))
    folder = ensure_build(app_path, rebuild=rebuild, say=say)
    build = load_build(app_path, folder)
    if build.optimized_for is not None and not build.optimized_here:
        say(f"sbrs run: the build's ONNX Runtime-optimised models were made on another machine or onnxruntime "
            f"({build.optimized_for}); loading its portable models instead (a slower start; `sbrs build "
            f"{app_path}` here makes them for this machine)")
    if _build_fits(build, {"granularity": granularity, "transition": transition}):
        if build.reduced is not None and granularity is not None:
            say(f"sbrs run: the app runs by parts under its memory limit; --granularity {granularity} does not apply")
        runtime = runtime_of_build(build, granularity=granularity, transition=transition, on_switch=on_switch,
                                   observers=observers)
        return runtime, build.config, build.scenario_memory_mb
    say(f"sbrs run: the build is for granularity {build.granularity}, transition {build.transition}; "
        f"compiling the requested options in memory")
    from sbrs.app import load_app
    from sbrs.artifact.write import scenario_memory_mb

    app = load_app(app_path)
    runtime = Runtime(app, granularity=granularity, transition=transition, on_switch=on_switch, observers=observers)
    memory = scenario_memory_mb(app, runtime.plan)
    return runtime, app.config, memory
