"""Stage 5 of the data flow: the runtime, one engine executing one compiled plan, in four rooms.

    >>> rt = runtime_for(load_app("apps/tiny.yaml"))   # doctest: +SKIP
    >>> outputs = rt.infer(frame); rt.switch("skip")  # doctest: +SKIP

``compile``: the MoC cut into execution units (``UnitPlan``, ``build_unit_plan``), their arena, band calls.
``execute``: ``Runtime`` (and ``ReducedRuntime``, run by parts), devices and sessions, ``runtime_for``.
``switch``: the control node and the SBRS-TP transition tables. ``measure``: ``sbrs bench``, measured costs.
The ``sbrs run`` loop and its frame sources are an interface (``sbrs.run``), the build step ``sbrs.build``.
"""

from typing import TYPE_CHECKING

from sbrs._lazy import lazy_exports

if TYPE_CHECKING:
    from sbrs.runtime.compile.plan import build_unit_plan
    from sbrs.runtime.compile.units import GRANULARITIES, BoundaryTensor, StepKey, Unit, UnitPlan
    from sbrs.runtime.execute.executor import Frame, Runtime
    from sbrs.runtime.execute.open import runtime_for

__all__ = ["GRANULARITIES", "BoundaryTensor", "Frame", "Runtime", "StepKey", "Unit", "UnitPlan", "build_unit_plan",
           "runtime_for"]

__getattr__, __dir__ = lazy_exports(globals(), {
    "Frame": "sbrs.runtime.execute.executor",
    "Runtime": "sbrs.runtime.execute.executor",
    "runtime_for": "sbrs.runtime.execute.open",
    "build_unit_plan": "sbrs.runtime.compile.plan",
    "GRANULARITIES": "sbrs.runtime.compile.units",
    "BoundaryTensor": "sbrs.runtime.compile.units",
    "StepKey": "sbrs.runtime.compile.units",
    "Unit": "sbrs.runtime.compile.units",
    "UnitPlan": "sbrs.runtime.compile.units",
})
