"""Stage 3 of the data flow: the MoC's tensors planned into one arena, with the thesis' memory figures."""

from typing import TYPE_CHECKING

from sbrs._lazy import lazy_exports

if TYPE_CHECKING:
    from sbrs.plan.plan import (
        AppPlan,
        MemoryReport,
        app_fingerprint,
        build_plan,
        default_plan_path,
        load_plan,
        naive_total_bytes,
        plan_scenarios,
        save_plan,
    )
    from sbrs.plan.tensors import memory_problem, scenario_schedule, tensor_id

__all__ = [
    "AppPlan",
    "MemoryReport",
    "app_fingerprint",
    "build_plan",
    "default_plan_path",
    "load_plan",
    "memory_problem",
    "naive_total_bytes",
    "plan_scenarios",
    "save_plan",
    "scenario_schedule",
    "tensor_id",
]

__getattr__, __dir__ = lazy_exports(globals(), {
    "AppPlan": "sbrs.plan.plan",
    "MemoryReport": "sbrs.plan.plan",
    "app_fingerprint": "sbrs.plan.plan",
    "build_plan": "sbrs.plan.plan",
    "default_plan_path": "sbrs.plan.plan",
    "load_plan": "sbrs.plan.plan",
    "naive_total_bytes": "sbrs.plan.plan",
    "plan_scenarios": "sbrs.plan.plan",
    "save_plan": "sbrs.plan.plan",
    "memory_problem": "sbrs.plan.tensors",
    "scenario_schedule": "sbrs.plan.tensors",
    "tensor_id": "sbrs.plan.tensors",
})
