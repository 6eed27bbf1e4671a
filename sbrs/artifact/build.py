"""The build sequence as a library function: ``sbrs build``, ``sbrs run`` (through a child process) and
``sbrs.runtime_for(path)`` all call :func:`build_app`.

One build: load and validate the app, derive the MoC and plan its memory (``sbrs.memory.build_plan``), and
under a memory limit that reuse alone misses run the buffer-reduction search (thesis Algorithm 9, the GA of
``sbrs.reduction.search``) with the cost model ``cost`` asks for (``sbrs.compile.costs``); save the plan
(``APP.plan.json``) and write the build folder ``APP.build/`` (``sbrs.artifact.write.compile_app``: execution
units, or band calls by parts). The result is a :class:`BuildResult` whose ``to_dict`` is ``sbrs build
--json``'s object. Failing ``min_fps`` constraints do not raise here: the build is written and reported, and
``BuildResult.violation_error`` says what failed (``sbrs build`` prints the report, then exits 2).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbrs.errors import InputError

if TYPE_CHECKING:
    from sbrs.app.app import App
    from sbrs.memory import AppPlan
    from sbrs.reduction import GaParams

__all__ = ["BuildResult", "build_app"]

logger = logging.getLogger(__name__)


@dataclass
class BuildResult:
    """What one :func:`build_app` made: the report (``to_dict``: the plan's figures, the reduction when a memory
    limit needed one, and ``build``: the folder written), where the plan was saved and the build folder.
    ``app`` and ``plan`` are the loaded app and its memory plan, kept in memory only (for a caller that
    prints more, such as ``sbrs build``'s tables)."""

    report: dict[str, Any]
    plan_path: Path
    folder: Path
    app: App | None = field(default=None, repr=False, compare=False)
    plan: AppPlan | None = field(default=None, repr=False, compare=False)

    @property
    def reduction(self) -> Mapping[str, Any] | None:
        return self.report.get("reduction")

    def violation_error(self) -> InputError | None:
        """The ``InputError`` of the search's failed constraints (``min_fps`` nobody meets), if any."""
        reduction = self.reduction
        if reduction is None or not reduction["violations"]:
            return None
        failing = reduction["violations"]
        return InputError(f"constraint not met: {'; '.join(failing)}",
                          field="min_fps" if failing[0].startswith("min_fps") else "memory_limit_mb")

    def to_dict(self) -> dict[str, Any]:
        return self.report


def build_app(app_path: str | Path, *, memory_limit_mb: float | None = None,
              min_fps: Mapping[str, float] | None = None, min_fps_ratio: float | None = None, cost: str = "measured",
              params: GaParams | None = None, plan_path: str | Path | None = None,
              progress: Callable[[int, int], None] | None = None) -> BuildResult:
    """Build the app of ``app_path``: its memory plan saved to ``plan_path`` (default ``APP.plan.json`` beside
    the app file) and its build folder ``APP.build/`` (module docstring).

    ``memory_limit_mb`` (default: the app's ``memory_limit_mb``): parameters plus buffers; above what reuse
    alone reaches, band heights are searched (Algorithm 9) with ``params`` (seed, population, generations),
    the per-scenario minimum throughputs ``min_fps`` / ``min_fps_ratio`` and the cost model ``cost``
    (``measured``, the default: a table timed on this machine once, then cached; ``auto`` or ``analytic``);
    ``progress(done, total)`` follows the search (default: progress
    lines on the ``sbrs`` loggers, ``sbrs.log``; every long step logs its own). Bad input (the
    app, a limit of 0 or below, an unreachable limit, unknown scenarios) is an ``InputError``.
    """
    from sbrs.app import load_app
    from sbrs.artifact.read import build_dir
    from sbrs.artifact.write import compile_app
    from sbrs.memory import build_plan, default_plan_path, save_plan

    app = load_app(app_path)
    unknown = sorted(set(min_fps or {}) - set(app.models))
    if unknown:  # the search checks them too, but without a memory limit no search runs to see them
        raise InputError(f"--min-fps names unknown scenario(s) {', '.join(unknown)} (scenarios: "
                         f"{', '.join(app.models)})", field="min_fps")
    plan = build_plan(app)
    if logger.isEnabledFor(logging.DEBUG):  # the arena as a chart (``sbrs build -v``)
        from sbrs.memory import ArenaPlan, Problem

        logger.debug("%s", ArenaPlan.from_dict(plan.arena).chart(Problem.from_dict(plan.problem),
                                                                 title=f"arena of app '{app.name}'"))
    plan_file = Path(plan_path) if plan_path is not None else default_plan_path(app)
    limit_mb = memory_limit_mb if memory_limit_mb is not None else app.config.memory_limit_mb
    report: dict[str, Any] = {**plan.report(), "plan_path": str(plan_file), "tensors_in_arena": "all",
                              "memory_limit_bytes": None if limit_mb is None else int(limit_mb * 1e6)}
    reduction = None
    if limit_mb is not None:  # thesis Algorithm 9: early exit, else the GA
        from sbrs.compile.costs import cost_source
        from sbrs.compile.fit import executor_figures
        from sbrs.reduction import GaParams
        from sbrs.reduction.search import reduce_app

        if limit_mb <= 0:
            raise InputError(f"memory limit must be > 0 MB, got {limit_mb:g}", field="memory_limit_mb")
        reduction = reduce_app(app, plan, int(limit_mb * 1e6), min_fps=min_fps, min_fps_ratio=min_fps_ratio,
                               cost=cost_source(cost), params=params or GaParams(), progress=progress)
        reduction["figures"].update(executor_figures(app, reduction))
        plan = replace(plan, reduction=reduction)
        figures = reduction["figures"]
        report.update(unreduced={key: report[key] for key in ("arena_bytes", "reuse_bytes", "lower_bound_bytes")},
                      arena_bytes=figures["arena_bytes"], reuse_bytes=figures["reuse_bytes"],
                      lower_bound_bytes=figures["lower_bound_bytes"], reduction=reduction)
    save_plan(plan, plan_file)
    logger.debug("plan saved to %s", plan_file)
    manifest = compile_app(app, reduction=reduction)
    parts = manifest["parts"]
    folder = build_dir(app.config.path)
    report["build"] = {"folder": str(folder),
                       "execution": "parts" if parts is not None else manifest["plan"].get("execution", "units"),
                       "units": len(manifest["plan"]["units"]) if parts is None else 0,
                       "call_files": sum(1 for name in manifest["files"]
                                         if name.startswith("c") and name.endswith(".onnx") and ".opt." not in name),
                       "weights_bytes": manifest["weights_bytes"],
                       "optimized_for": manifest["optimized_for"],
                       "not_optimized": manifest["not_optimized"],
                       "run_by_parts": None if parts is None else {
                           "params_bytes": parts["model_bytes"]["params_bytes"],
                           "arena_bytes": parts["arena_bytes"],
                           "band_streams": int(parts["reduction"].get("streams", 1)),
                           "transition_cut": parts["reduction"].get("transition_cut")},
                       "footprint": manifest["footprint"],
                       "streams": manifest["streams"],
                       "session": manifest["session"],
                       "figures": "params, naive, Algorithm 8, arena and lower bound are planned from the "
                                  "models; the footprint is the plan of what the runtime holds (parameters as "
                                  "executed, every tensor, transition room); `sbrs bench` measures the process"}
    return BuildResult(report, plan_file, folder, app, plan)
