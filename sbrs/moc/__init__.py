"""Stage 2 of the data flow: the SBRS MoC (thesis Section 5.7) and its derivation by Algorithm 5 (Section 5.8).

    >>> moc = derive_moc({"accurate": cnn_a, "eco": cnn_b}, adaptive=["I", "O", "par"])  # doctest: +SKIP
    >>> print(format_capture_table(moc))                                                # doctest: +SKIP
    >>> assert_round_trip(moc, {"accurate": cnn_a, "eco": cnn_b})                        # doctest: +SKIP
"""

from typing import TYPE_CHECKING

from sbrs._lazy import lazy_exports

if TYPE_CHECKING:
    from sbrs.moc.derive import derive_moc
    from sbrs.moc.model import (
        ADAPTIVE_ATTRIBUTES,
        ControlEdge,
        ControlParam,
        Moc,
        Step,
        SuperEdge,
        SuperLayer,
    )
    from sbrs.moc.rebuild import (
        assert_round_trip,
        check_capture,
        check_control,
        model_differences,
        rebuild_scenario,
        resolved_value,
        round_trip_differences,
    )
    from sbrs.moc.report import capture_table, format_capture_table, format_step, moc_summary

__all__ = [
    "ADAPTIVE_ATTRIBUTES",
    "ControlEdge",
    "ControlParam",
    "Moc",
    "Step",
    "SuperEdge",
    "SuperLayer",
    "assert_round_trip",
    "capture_table",
    "check_capture",
    "check_control",
    "derive_moc",
    "format_capture_table",
    "format_step",
    "moc_summary",
    "model_differences",
    "rebuild_scenario",
    "resolved_value",
    "round_trip_differences",
]

__getattr__, __dir__ = lazy_exports(globals(), {
    "derive_moc": "sbrs.moc.derive",
    "ADAPTIVE_ATTRIBUTES": "sbrs.moc.model",
    "ControlEdge": "sbrs.moc.model",
    "ControlParam": "sbrs.moc.model",
    "Moc": "sbrs.moc.model",
    "Step": "sbrs.moc.model",
    "SuperEdge": "sbrs.moc.model",
    "SuperLayer": "sbrs.moc.model",
    "assert_round_trip": "sbrs.moc.rebuild",
    "check_capture": "sbrs.moc.rebuild",
    "check_control": "sbrs.moc.rebuild",
    "model_differences": "sbrs.moc.rebuild",
    "rebuild_scenario": "sbrs.moc.rebuild",
    "resolved_value": "sbrs.moc.rebuild",
    "round_trip_differences": "sbrs.moc.rebuild",
    "capture_table": "sbrs.moc.report",
    "format_capture_table": "sbrs.moc.report",
    "format_step": "sbrs.moc.report",
    "moc_summary": "sbrs.moc.report",
})
