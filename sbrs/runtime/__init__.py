"""Stage 5 of the data flow: the runtime (execution units, one arena, the executor, ``sbrs run`` and ``bench``).

    >>> rt = load_app("apps/tiny.yaml").runtime()     # doctest: +SKIP
    >>> outputs = rt.infer(frame); rt.switch("skip")  # doctest: +SKIP

Modules: ``units`` (the MoC cut into execution units, ``UnitPlan``), ``arena`` (boundary tensors in one
planned arena), ``device`` (providers, thread pool, arena memory), ``executor`` (``Runtime``), ``frames`` and
``loop`` (``sbrs run``), ``bench`` (``sbrs bench``).
"""

from typing import TYPE_CHECKING

from sbrs._lazy import lazy_exports

if TYPE_CHECKING:
    from sbrs.runtime.executor import Frame, Runtime, build_unit_plan
    from sbrs.runtime.units import GRANULARITIES, BoundaryTensor, StepKey, Unit, UnitPlan

__all__ = ["GRANULARITIES", "BoundaryTensor", "Frame", "Runtime", "StepKey", "Unit", "UnitPlan", "build_unit_plan"]

__getattr__, __dir__ = lazy_exports(globals(), {
    "Frame": "sbrs.runtime.executor",
    "Runtime": "sbrs.runtime.executor",
    "build_unit_plan": "sbrs.runtime.executor",
    "GRANULARITIES": "sbrs.runtime.units",
    "BoundaryTensor": "sbrs.runtime.units",
    "StepKey": "sbrs.runtime.units",
    "Unit": "sbrs.runtime.units",
    "UnitPlan": "sbrs.runtime.units",
})
