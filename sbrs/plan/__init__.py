"""Stage 3 of the data flow: the MoC's tensors planned into one arena, with the thesis' memory figures."""

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
