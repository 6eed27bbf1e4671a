"""Compiling an app into execution units: the MoC cut into units (``layout``), their boundary tensors placed
in one checked arena (``arena``); the result is a ``UnitPlan`` (``units``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbrs.compile.units import MIN_SWITCH_STEP_WORK, UnitPlan

if TYPE_CHECKING:
    from sbrs.app.app import App
    from sbrs.moc import Moc


def build_unit_plan(app: App, granularity: str | None = None, moc: Moc | None = None,
                    transition: str | None = None, on_switch: str | None = None) -> UnitPlan:
    """The ``UnitPlan`` of ``app`` (units, sequences, arena offsets), checked, without loading anything.

    Under SBRS-TP (``transition``, default the app's) units of an app with several scenarios are also cut at up
    to ``runtime.switch_steps`` switch points per frame (``sbrs.compile.layout``; where the app leaves it out,
    its provider's default, ``sbrs.app.settings.UNIT_DEFAULTS_CPU``/``_GPU``): the old step in flight is what a
    switch waits for (on units, from a frame's second step on, only to its next ONNX Runtime node:
    ``Runtime._interrupt_step``). Under
    ``runtime.on_switch: resume`` (``on_switch``, default the app's;
    beyond the thesis) the scenarios' shared prefixes stay shared units and their live-in tensors stay valid
    through every old frame (``layout_units``' and ``arena_problem``'s ``resume``).
    """
    from sbrs.compile.arena import plan_layout
    from sbrs.compile.layout import layout_units
    from sbrs.moc import derive_moc

    moc = moc or derive_moc(app.models, app.config.adaptive)
    options = app.config.runtime
    chosen = granularity or options.granularity
    # switch points only serve switches: an app of one scenario never switches and runs whole units
    switch_steps = options.unit_switch_steps if (transition or options.transition) == "sbrs-tp" \
        and len(app.models) > 1 else 1
    resume = (on_switch or options.on_switch) == "resume" and len(app.models) > 1
    layout = layout_units(app.models, moc, chosen, share_min_bytes=int(options.unit_share_min_mb * 1e6),
                          switch_steps=switch_steps, min_step_work=MIN_SWITCH_STEP_WORK, resume=resume,
                          input_name=app.config.input.name)
    return plan_layout(layout, app=app.name, granularity=chosen, adaptive=tuple(app.config.adaptive), resume=resume)
