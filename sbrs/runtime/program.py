"""What a runtime executes (``Program``), made from an app compiled in memory, a verified build, or bare models.

``Runtime``'s one constructor (``sbrs.runtime.engine``) loads and binds a ``Program``; ``app_program``,
``one_program``, ``build_program`` and ``models_program`` make one (``Runtime.from_app``, ``from_build``,
``from_models``) and ``runtime_options`` checks the transition options a runtime runs with. The compiler's
modules are imported where a program is compiled: the program of a build (``sbrs run``) loads none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sbrs.compile.tables import TRANSITION_MODES
from sbrs.errors import InputError

if TYPE_CHECKING:
    import onnx

    from sbrs.app.app import App
    from sbrs.app.config import AppConfig
    from sbrs.artifact.read import LoadedBuild
    from sbrs.compile.footprint import Footprint
    from sbrs.compile.parts import Tiles
    from sbrs.compile.parts_plan import PartsPlan
    from sbrs.compile.tables import TransitionPlan
    from sbrs.compile.units import UnitPlan
    from sbrs.model.cnn import CnnModel

TRANSITION_ARENAS: tuple[str, ...] = ("shared", "shadow")
TRANSITION_SCHEDULES: tuple[str, ...] = ("priority", "threads")


@dataclass(frozen=True)
class Program:
    """What a runtime executes: a compiled ``plan`` (``UnitPlan`` or ``PartsPlan``), its ``transitions``, the
    models' figures (``model_bytes``: thesis Eq. 2.6-2.7, kept because the models are not) and ``model(key)``,
    the model of each session (a unit id or a call key): a file path or an ONNX model. ``shadow``: the shadow
    slots a transition's new frame runs in (units under SBRS-TP). ``optimized``: the files are ONNX Runtime's
    optimised form for this machine. ``release``: hand freed memory back after each session (loading a build
    of units: ONNX Runtime frees its load-time copies when a session is ready, so the process's peak stays
    near one unit's copies). ``footprint``: the plan of what the runtime holds (``sbrs.compile.footprint``).
    ``unit_threads``: the units the build measured faster on fewer threads (``sbrs.compile.unit_threads``).
    ``streams``: the streams the build chose for ``runtime.streams: auto`` (``sbrs.compile.unit_streams``; None:
    no build, one stream). ``longest_frame_s``: the longest frame of a scenario on one stream as the build timed it
    for that choice (None: not timed). A runtime keeps nothing of its program but the plan, tables and figures."""

    plan: UnitPlan | PartsPlan
    transitions: TransitionPlan
    model_bytes: Mapping[str, int]
    model: Callable[[str], str | onnx.ModelProto]
    shadow: Mapping[str, int] | None = None
    optimized: bool = False
    release: bool = False
    footprint: Footprint | None = None
    unit_threads: Mapping[str, int] = field(default_factory=dict)
    streams: int | None = None
    longest_frame_s: float | None = None


def runtime_options(config: AppConfig, transition: str | None, transition_arena: str | None,
                    transition_schedule: str) -> tuple[str, str]:
    """The transition mode and transition arena a runtime of ``config`` runs with (``Runtime``'s options,
    checked: an unknown value is an ``InputError``; ``on_switch`` is checked by the constructor)."""
    mode = transition or config.runtime.transition
    if mode not in TRANSITION_MODES:
        raise InputError(f"unknown transition '{mode}' (allowed: {', '.join(TRANSITION_MODES)})",
                         field="runtime.transition")
    transition_arena = transition_arena or ("shadow" if mode == "sbrs-tp" else "shared")
    if transition_arena not in TRANSITION_ARENAS:
        raise InputError(f"unknown transition arena '{transition_arena}' (allowed: "
                         f"{', '.join(TRANSITION_ARENAS)})", field="transition_arena")
    if transition_schedule not in TRANSITION_SCHEDULES:
        raise InputError(f"unknown transition schedule '{transition_schedule}' (allowed: "
                         f"{', '.join(TRANSITION_SCHEDULES)})", field="transition_schedule")
    return mode, transition_arena


def app_program(app: App, *, granularity: str | None, parts: PartsPlan | None, transition: str | None,
                transition_arena: str | None, transition_schedule: str,
                on_switch: str | None = None) -> tuple[Program, str]:
    """What a runtime of ``app`` compiled in memory executes, and its transition mode: ``parts`` (band calls,
    one shared arena), else the MoC (Algorithm 5) cut into execution units, their arena planned, with shadow
    slots under SBRS-TP and the transition tables (Algorithm 6); under ``on_switch`` (default the app's)
    ``resume``, units and arena made for resuming (``build_unit_plan``)."""
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
                   unit_threads=build.unit_threads, streams=build.streams,
                   longest_frame_s=longest_frame_s(build.streams_choice)), mode


def longest_frame_s(choice: Mapping[str, Any] | None) -> float | None:
    """The longest frame on one stream among the scenarios' figures of a build's streams choice (None: none)."""
    figures = (choice or {}).get("figures") or {}
    times = [float(row["one_stream_s"]) for row in figures.values() if row.get("one_stream_s") is not None]
    return max(times) if times else None


def models_program(models: Mapping[str, CnnModel], band_rows: Mapping[str, Mapping[str, int]] | None, *,
                   cuts: Mapping[str, Sequence[str]] | None, tiles: Tiles | None, initial: str | None,
                   threads: int | None, transition: str) -> tuple[AppConfig, Program]:
    """The configuration and program of bare models run by parts (``Runtime.from_models``)."""
    from sbrs.compile.fit import models_config
    from sbrs.compile.footprint import parts_footprint
    from sbrs.compile.parts import call_models, compile_parts
    config = models_config(models, initial=initial, threads=threads, transition=transition)
    plan = compile_parts(models, band_rows, cuts=cuts, tiles=tiles)
    calls = call_models(models, plan)
    return config, Program(plan, _tables(plan), plan.model_bytes, calls.__getitem__, footprint=parts_footprint(plan))


def _parts_mode(config: AppConfig, transition: str | None, transition_arena: str | None,
                transition_schedule: str) -> str:
    """The transition mode of a runtime by parts; its arena is the one shared arena (shadow slots would double
    the arena the memory limit bounds)."""
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
