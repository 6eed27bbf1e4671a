"""The app's memory plan: the MoC (Algorithm 5) plus one arena for every tensor of every scenario.

``build_plan(app)`` derives the MoC, maps its tensors onto a memory problem (``sbrs.memory.tensors``), and
plans it three ways (DESIGN.md "Memory"): naive (thesis M_naive, each edge of each scenario its own buffer),
Algorithm 8 shared buffers, and the offset arena (``sbrs.memory.place``); plus the lower bound no plan can
beat. Buffer figures are
aligned to the arena's 64 bytes and exclude parameters. The plan is saved as JSON with a fingerprint of the
app and a checksum of its own content, so a stale or edited plan is refused on load.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from sbrs import __version__
from sbrs.app import App
from sbrs.cache import write_atomic
from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.log import Progress
from sbrs.memory.arena import ArenaPlan
from sbrs.memory.check import check_reuse
from sbrs.memory.placement import place, verify
from sbrs.memory.problem import Problem
from sbrs.memory.reuse import ReusePlan, buffers_reuse
from sbrs.memory.tensors import memory_problem
from sbrs.moc import derive_moc, moc_summary
from sbrs.moc.model import Moc
from sbrs.model import CnnModel, memory_figures, naive_buffer_bytes, params_bytes

PLAN_FORMAT = 1

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemoryReport:
    """Thesis Eq. 2.5-2.8 figures in bytes for a set of scenarios (buffers exclude parameters)."""

    params_bytes: int
    naive_bytes: int
    supergraph_tensor_bytes: int
    reuse_bytes: int
    arena_bytes: int
    lower_bound_bytes: int


@dataclass(frozen=True)
class AppPlan:
    """Everything the runtime needs without re-planning: φ^s, tensor lifetimes, offsets, the figures, and
    the buffer reduction chosen for a memory limit, if any."""

    app: str
    fingerprint: str
    adaptive: tuple[str, ...]
    moc: dict[str, Any]
    problem: dict[str, Any]
    arena: dict[str, Any]
    reuse: dict[str, Any]
    memory: MemoryReport
    per_scenario: dict[str, MemoryReport]
    reduction: dict[str, Any] | None = None  # band heights chosen by Algorithm 9 (sbrs build --memory-limit)

    def report(self) -> dict[str, Any]:
        """The ``sbrs build --json`` object (issue contract: these keys at the top level)."""
        summary = self.moc
        return {
            "app": self.app,
            "scenarios": list(summary["scenarios"]),
            "adaptive": list(self.adaptive),
            "supergraph_layers": summary["supergraph_layers"],
            "supergraph_edges": summary["supergraph_edges"],
            "control_parameters": summary["control_parameters"],
            **asdict(self.memory),
            "arena_strategy": self.arena["strategy"],
            "arena_optimal": self.arena["optimal"],
            "per_scenario": {name: asdict(figures) for name, figures in self.per_scenario.items()},
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def app_fingerprint(app: App) -> str:
    """Identity of what a plan depends on: input, A, memory limit, scenario names and every model's bytes.

    Runtime, policy and metrics settings do not change the plan, so editing them does not make it stale.
    """
    config = app.config
    digest = hashlib.sha256()
    basis = {"input": asdict(config.input), "adaptive": list(config.adaptive),
             "memory_limit_mb": config.memory_limit_mb, "scenarios": list(config.scenario_names)}
    digest.update(json.dumps(basis, sort_keys=True).encode())
    for scenario in config.scenarios:
        with open(scenario.model_path, "rb") as stream:  # streamed: a model file is never held whole
            digest.update(hashlib.file_digest(stream, "sha256").digest())
    return digest.hexdigest()[:32]


def _figures(models: Mapping[str, CnnModel], problem: Problem, arena: ArenaPlan, reuse: ReusePlan) -> MemoryReport:
    return MemoryReport(
        params_bytes=params_bytes(models.values()),
        naive_bytes=sum(naive_buffer_bytes(model) for model in models.values()),
        supergraph_tensor_bytes=sum(problem.aligned_size(b.id) for b in problem.blocks),
        reuse_bytes=reuse.total,
        arena_bytes=arena.arena_bytes,
        lower_bound_bytes=int(arena.lower_bound_bytes or 0),
    )


def _verified_reuse(problem: Problem, reuse: ReusePlan) -> None:
    violations = check_reuse(problem, reuse)
    if violations:
        raise SbrsRuntimeError(f"internal error: the memory plan's shared buffers are invalid: {violations[0]}")


def plan_scenarios(moc: Moc, models: Mapping[str, CnnModel],
                   scenarios: tuple[str, ...] | None = None) -> tuple[Problem, ArenaPlan, ReusePlan, MemoryReport]:
    """Plan the tensors of ``scenarios`` (default: all) and check the plans before returning them."""
    problem = memory_problem(moc, models, scenarios)
    chosen = {name: models[name] for name in (scenarios or moc.scenarios)}
    arena = place(problem, what=f"the tensors of scenarios {', '.join(chosen)}")
    reuse = buffers_reuse(problem, aligned=True)
    _verified_reuse(problem, reuse)
    return problem, arena, reuse, _figures(chosen, problem, arena, reuse)


def build_plan(app: App, adaptive: tuple[str, ...] | None = None) -> AppPlan:
    """Derive the MoC for ``adaptive`` (default: the app's A) and plan one arena for all its scenarios."""
    adaptive = adaptive if adaptive is not None else app.config.adaptive
    progress = Progress(logger, f"planning the memory of app '{app.name}'", 2 + len(app.models), unit="steps")
    moc = derive_moc(app.models, adaptive)
    progress(1)
    problem, arena, reuse, figures = plan_scenarios(moc, app.models)
    progress(2)
    per_scenario = {}
    for done, name in enumerate(moc.scenarios, 3):
        per_scenario[name] = plan_scenarios(moc, app.models, (name,))[3]
        progress(done)
    return AppPlan(
        app=app.name,
        fingerprint=app_fingerprint(app),
        adaptive=tuple(adaptive),
        moc=moc_summary(moc),
        problem=problem.to_dict(),
        arena=arena.to_dict(),
        reuse=reuse.to_dict(),
        memory=figures,
        per_scenario=per_scenario,
    )


def plan_memory(app: App, adaptive: tuple[str, ...]) -> MemoryReport:
    """The memory figures of ``build_plan(app, adaptive)`` (``AppPlan.memory``) without what else a plan holds
    (a plan per scenario, the fingerprint of every model file): ``sbrs build``'s table row of another A."""
    return plan_scenarios(derive_moc(app.models, adaptive), app.models)[3]


def naive_total_bytes(app: App) -> int:
    """Thesis M_naive of Table 5.5: every scenario alone, parameters and edge buffers, nothing shared."""
    return sum(memory_figures(model).total_bytes for model in app.models.values())


# -- saving and loading ----------------------------------------------------------------------------------


def _checksum(content: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def save_plan(plan: AppPlan, path: str | Path) -> Path:
    content = {"format": PLAN_FORMAT, "sbrs": __version__, "plan": plan.to_dict()}
    document = {**content, "checksum": _checksum(content)}
    return write_atomic(Path(path), (json.dumps(document, indent=1, sort_keys=True) + "\n").encode())


def default_plan_path(app: App) -> Path:
    """``<app file stem>.plan.json`` beside the app file."""
    app_path = Path(app.config.path)
    return app_path.with_name(f"{app_path.stem}.plan.json")


def load_plan(path: str | Path, app: App) -> AppPlan:
    """Read a saved plan and prove it belongs to ``app``: readable, untouched (checksum), not stale."""
    file = str(path)
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("no such plan file (run `sbrs build APP.yaml` first)", file=file) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"not a readable plan: {exc}", file=file) from None
    if not isinstance(document, dict) or document.get("format") != PLAN_FORMAT:
        raise InputError(f"not an sbrs plan of format {PLAN_FORMAT}", file=file)
    content = {key: value for key, value in document.items() if key != "checksum"}
    if document.get("checksum") != _checksum(content):
        raise InputError("checksum mismatch: the plan was modified after `sbrs build`; rebuild it", file=file)
    data = document["plan"]
    if data.get("fingerprint") != app_fingerprint(app):
        raise InputError(f"stale plan: it was built for another version of app '{data.get('app')}' or its models;"
                         " rebuild it with `sbrs build`", file=file)
    plan = AppPlan(
        app=data["app"], fingerprint=data["fingerprint"], adaptive=tuple(data["adaptive"]), moc=data["moc"],
        problem=data["problem"], arena=data["arena"], reuse=data["reuse"], memory=MemoryReport(**data["memory"]),
        # in the app's order, as ``build_plan`` made it (the file's keys are sorted)
        per_scenario={name: MemoryReport(**data["per_scenario"][name]) for name in data["moc"]["scenarios"]},
        reduction=data.get("reduction"),
    )
    problem = Problem.from_dict(plan.problem)
    verify(problem, ArenaPlan.from_dict(plan.arena), what=f"the saved plan {file}")
    _verified_reuse(problem, ReusePlan.from_dict(plan.reuse))
    return plan


def with_adaptive(app: App, adaptive: tuple[str, ...]) -> App:
    """The same app under another set of adaptive attributes A (for the per-A table of ``sbrs build``)."""
    return replace(app, config=replace(app.config, adaptive=adaptive))
