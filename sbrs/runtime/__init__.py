"""Stage 5 of the data flow: the runtime (execution units, one arena, the executor, ``sbrs run`` and ``bench``).

    >>> rt = load_app("apps/tiny.yaml").runtime()     # doctest: +SKIP
    >>> outputs = rt.infer(frame); rt.switch("skip")  # doctest: +SKIP

Modules: ``units`` (the MoC cut into execution units, ``UnitPlan``), ``arena`` (boundary tensors in one
planned arena), ``device`` (providers, thread pool, arena memory), ``executor`` (``Runtime``), ``frames`` and
``loop`` (``sbrs run``), ``bench`` (``sbrs bench``).
"""

from sbrs.runtime.executor import Frame, Runtime, build_unit_plan
from sbrs.runtime.units import GRANULARITIES, BoundaryTensor, StepKey, Unit, UnitPlan

__all__ = ["GRANULARITIES", "BoundaryTensor", "Frame", "Runtime", "StepKey", "Unit", "UnitPlan", "build_unit_plan"]
