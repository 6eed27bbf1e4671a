"""Stage 5 of the data flow: compiling an app into what the runtime executes, without running anything.

Execution units (``layout`` cuts the MoC into units, ``arena`` places their boundary tensors, ``unit_plan``
puts the two together, ``units`` holds the result), or, under a memory limit, processing by parts (``parts``
compiles band calls and line buffers, ``parts_plan`` holds what runs and fits it to the limit); the SBRS-TP
transition tables of either (``transitions``); the measured cost table of the buffer-reduction search
(``costs``). A run of a build reads only the plans' dataclasses (``units``, ``parts_plan``, ``transitions``).
"""

from typing import TYPE_CHECKING

from sbrs._lazy import lazy_exports

if TYPE_CHECKING:
    from sbrs.compile.unit_plan import build_unit_plan
    from sbrs.compile.units import GRANULARITIES, BoundaryTensor, StepKey, Unit, UnitPlan

__all__ = ["GRANULARITIES", "BoundaryTensor", "StepKey", "Unit", "UnitPlan", "build_unit_plan"]

__getattr__, __dir__ = lazy_exports(globals(), {
    "build_unit_plan": "sbrs.compile.unit_plan",
    "GRANULARITIES": "sbrs.compile.units",
    "BoundaryTensor": "sbrs.compile.units",
    "StepKey": "sbrs.compile.units",
    "Unit": "sbrs.compile.units",
    "UnitPlan": "sbrs.compile.units",
})
