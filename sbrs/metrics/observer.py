"""``MetricsObserver``: a ``RunObserver`` (``sbrs.runtime.events``) that keeps Prometheus metrics of a run.

Every metric lives on the observer's own ``CollectorRegistry`` (never the client library's global one), together
with the library's process, platform and GC collectors (``process_resident_memory_bytes``, ...). Names follow
the Prometheus conventions: prefix ``sbrs_``, base units (seconds, bytes, ratio), counters end in ``_total``,
and every label takes values from a fixed set known when the observer is made (the app's scenarios, the
request results and reasons below), so the number of series never grows while the app runs.

Metrics (``MetricsObserver.METRICS`` lists the names):

- ``sbrs_active_scenario{sbrs_active_scenario=S}``: Enum over the app's scenarios plus ``switching``; exactly one
  state is 1. It starts on the app's initial scenario; ``started``, ``state_changed`` and ``switch_done`` move it.
- ``sbrs_control_state{sbrs_control_state=X}``: Enum over the control node's states (``CONTROL_STATES``).
- ``sbrs_scenario_switches_total{from, to}``: switches that ended, per ordered pair of distinct scenarios.
- ``sbrs_switch_response_delay_seconds``: histogram of Δ, request arrival → first output of the new scenario
  (``SWITCH_DELAY_BUCKETS``, 0.1 ms to 10 s); ``sbrs_last_switch_response_delay_seconds``: the last Δ (NaN before
  any switch).
- ``sbrs_switch_requests_total{result, reason}``: switch requests by result (``accepted``, ``replaced`` — a
  pending request superseded by a newer one —, ``rejected``); ``reason`` is ``none`` unless rejected, else one
  of ``REJECT_REASONS`` (an unlisted reason counts as ``other``).
- ``sbrs_control_requests_total{op, result}``: every control request (op ``switch``, ``env``, ``status`` or
  ``other``) by result.
- ``sbrs_frames_total{scenario}`` and ``sbrs_inference_seconds{scenario}`` (histogram,
  ``INFERENCE_BUCKETS``, 10 µs to 5 s): frames served and their inference time per scenario.
- ``sbrs_frames_cancelled_total{scenario}``: frames abandoned on ``scenario`` for a switch
  (``runtime.on_switch: cancel``) and run again from their start on the new scenario.
- ``sbrs_scenario_high_power{scenario}``: 1 for the scenarios the app's ``policy.high_power`` lists, else 0.
- Memory figures of the plan, in bytes, NaN until ``started`` reports them (the ``facts`` keys in brackets,
  see ``FACT_GAUGES``): ``sbrs_arena_bytes`` [arena_bytes], ``sbrs_parameters_bytes`` [params_bytes],
  ``sbrs_naive_buffer_bytes`` [naive_bytes], ``sbrs_reuse_buffer_bytes`` [reuse_bytes],
  ``sbrs_buffer_lower_bound_bytes`` [lower_bound_bytes]; and the runtime's ``memory_report()``:
  ``sbrs_memory_params_bytes`` [memory_params_bytes], ``sbrs_memory_arena_bytes`` (allocated)
  [memory_arena_bytes], ``sbrs_memory_total_bytes`` [memory_total_bytes], ``sbrs_memory_limit_bytes``
  [memory_limit_bytes; NaN without ``memory_limit_mb``], ``sbrs_memory_planned_arena_bytes``
  [memory_planned_arena_bytes].
- ``sbrs_environment_battery_ratio`` (0..1), ``sbrs_environment_min_fps``,
  ``sbrs_environment_energy_budget_joules`` (per frame), ``sbrs_environment_temperature_celsius``: the last
  environment values, NaN when unknown.
- ``sbrs_sensor_readings_total{sensor, result}``: readings of the environment's sensors (``sensor``:
  ``power_supply``, ``thermal``, ``mavlink``) by result: ``accepted``, ``malformed`` (ignored: garbage in a sysfs
  file, a datagram or bytes that are no MAVLink), ``failed`` (no answer: a file gone, a link broken), ``expired``
  (a value forgotten after ``environment.max_age_s`` without a reading).
- ``sbrs_build_info{version, onnxruntime, providers}``: constant 1 (``providers`` comma-separated).
- ``sbrs_source_frames_dropped_total``: frames a live source (camera, stream) replaced with newer ones before
  the runtime took them; ``sbrs_source_reconnects_total``: reopenings of a source that had stopped.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)

from sbrs import __version__
from sbrs.app.environment import SENSOR_KINDS
from sbrs.runtime.events import SENSOR_RESULTS

SWITCHING = "switching"
"""The ``sbrs_active_scenario`` state while a switch is in progress."""

CONTROL_STATES: tuple[str, ...] = ("loading", "running", "switching", "stopping", "stopped")
"""States of the control node (``RunObserver.state_changed``), the values of ``sbrs_control_state``."""

REQUEST_RESULTS: tuple[str, ...] = ("accepted", "replaced", "rejected")
REQUEST_OPS: tuple[str, ...] = ("switch", "env", "status", "other")
REJECT_REASONS: tuple[str, ...] = (
    "unknown_scenario", "bad_field", "bad_json", "bad_encoding", "not_object", "missing_field", "unknown_op",
    "unknown_key", "too_long", "too_many_clients", "idle_timeout", "switch_failed", "internal", "other",
)
"""Values of the ``reason`` label of rejected requests: the control protocol's error codes, plus ``other``."""
NO_REASON = "none"

# Bounds 1-2.5-5 per decade, from below the smallest figures sbrs runs at: frames of 0.06-0.3 ms and switches of
# 0.2-0.4 ms on tiny and pamap2. Below the first bound histogram_quantile can only interpolate from 0, so a
# first bound above them would put every such frame or switch in one bucket and make p50 and p95 meaningless.
SWITCH_DELAY_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
INFERENCE_BUCKETS: tuple[float, ...] = (
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0)

FACT_GAUGES: dict[str, tuple[str, str]] = {
    "arena_bytes": ("sbrs_arena_bytes", "Bytes of the one memory arena the runtime allocated for its tensors"),
    "params_bytes": ("sbrs_parameters_bytes", "Bytes of unique parameter tensors of all scenarios (Eq. 2.6)"),
    "naive_bytes": ("sbrs_naive_buffer_bytes", "Buffer bytes under naive allocation, one buffer per edge"),
    "reuse_bytes": ("sbrs_reuse_buffer_bytes", "Buffer bytes under Algorithm 8 shared buffers"),
    "lower_bound_bytes": ("sbrs_buffer_lower_bound_bytes",
                          "Lower bound of buffer bytes: largest total of tensors live at once"),
    "memory_params_bytes": ("sbrs_memory_params_bytes",
                            "Bytes of unique parameters of the scenarios the runtime runs (memory_report)"),
    "memory_arena_bytes": ("sbrs_memory_arena_bytes", "Bytes of the arena the runtime really allocated"),
    "memory_total_bytes": ("sbrs_memory_total_bytes", "Parameter bytes plus allocated arena bytes"),
    "memory_limit_bytes": ("sbrs_memory_limit_bytes", "The app's memory_limit_mb in bytes; NaN without a limit"),
    "memory_planned_arena_bytes": ("sbrs_memory_planned_arena_bytes",
                                   "Bytes of the arena the runtime's plan asked for (planned)"),
}
"""``started`` facts key → (gauge name, help). Missing or non-numeric facts leave the gauge NaN."""

ENVIRONMENT_GAUGES: dict[str, tuple[str, str]] = {
    "battery": ("sbrs_environment_battery_ratio", "Last reported battery level, 0 (empty) to 1 (full); NaN unknown"),
    "min_fps": ("sbrs_environment_min_fps", "Last reported minimum frame rate required, frames/s; NaN unknown"),
    "energy_budget_j": ("sbrs_environment_energy_budget_joules",
                        "Last reported energy budget per frame in joules; NaN unknown"),
    "temperature": ("sbrs_environment_temperature_celsius", "Last reported temperature in °C; NaN unknown"),
}
"""``environment_changed`` key → (gauge name, help)."""


def _number(value: Any) -> float | None:
    """``value`` as a finite float, or None (bools and non-numbers are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):
        return None
    return number if math.isfinite(number) else None


class MetricsObserver:
    """Prometheus metrics of one running app, updated from ``RunObserver`` events (thread-safe, never raises).

    ``scenarios`` are the app's scenario names (label values are limited to them: events naming another
    scenario are not counted); ``initial`` is the scenario the Enum starts on (default: the first);
    ``high_power`` the scenarios ``policy.high_power`` marks; ``providers`` the execution providers for
    ``sbrs_build_info`` (a ``providers`` fact of ``started`` replaces them). ``registry`` defaults to a new
    ``CollectorRegistry`` (a host may pass its own, ``prometheus_client.REGISTRY`` too); ``process_metrics`` adds
    the client library's process, platform and GC collectors where the registry has none yet.
    """

    METRICS: tuple[str, ...] = (
        "sbrs_active_scenario", "sbrs_control_state", "sbrs_scenario_switches_total",
        "sbrs_switch_response_delay_seconds", "sbrs_last_switch_response_delay_seconds",
        "sbrs_switch_requests_total", "sbrs_control_requests_total", "sbrs_frames_total", "sbrs_inference_seconds",
        "sbrs_frames_cancelled_total",
        "sbrs_scenario_high_power", *(name for name, _ in FACT_GAUGES.values()),
        *(name for name, _ in ENVIRONMENT_GAUGES.values()), "sbrs_sensor_readings_total", "sbrs_build_info",
        "sbrs_source_frames_dropped_total", "sbrs_source_reconnects_total")

    def __init__(self, scenarios: Iterable[str], *, initial: str | None = None, high_power: Iterable[str] = (),
                 providers: Iterable[str] = (), registry: CollectorRegistry | None = None,
                 process_metrics: bool = True) -> None:
        self.scenarios: tuple[str, ...] = tuple(dict.fromkeys(scenarios))
        if not self.scenarios:
            raise ValueError("an app has at least one scenario")
        self.registry = registry if registry is not None else CollectorRegistry()
        if process_metrics:
            for collector in (ProcessCollector, PlatformCollector, GCCollector):
                # A host's registry (prometheus_client.REGISTRY) holds them already, describing this very process:
                # theirs are kept (registering a second set is a ValueError, duplicated timeseries).
                with contextlib.suppress(ValueError):
                    collector(registry=self.registry)
        # A scenario may itself be called "switching": the switching state then takes a name no scenario has.
        self.switching_state = SWITCHING
        while self.switching_state in self.scenarios:
            self.switching_state += "_"
        start = initial if initial in self.scenarios else self.scenarios[0]
        states = [start, *(name for name in self.scenarios if name != start), self.switching_state]
        reg = self.registry

        self.active_scenario = Enum("sbrs_active_scenario", "The scenario the app runs (or 'switching' during a"
                                    " switch)", states=states, registry=reg)
        self.control_state = Enum("sbrs_control_state", "State of the control node", states=list(CONTROL_STATES),
                                  registry=reg)
        self.switches = Counter("sbrs_scenario_switches", "Scenario switches that ended, by old and new scenario",
                                ["from", "to"], registry=reg)
        self.switch_delay = Histogram("sbrs_switch_response_delay_seconds", "Switch response delay: time from a"
                                      " switch request's arrival to the first output of the new scenario",
                                      buckets=SWITCH_DELAY_BUCKETS, registry=reg)
        self.last_switch_delay = Gauge("sbrs_last_switch_response_delay_seconds", "Response delay of the last"
                                       " switch in seconds; NaN before any switch", registry=reg)
        self.switch_requests = Counter("sbrs_switch_requests", "Switch requests by result (accepted, replaced"
                                       " while pending, rejected) and reason of rejection", ["result", "reason"],
                                       registry=reg)
        self.control_requests = Counter("sbrs_control_requests", "Control requests by op and result",
                                        ["op", "result"], registry=reg)
        self.frames = Counter("sbrs_frames", "Frames served, by scenario", ["scenario"], registry=reg)
        self.cancelled = Counter("sbrs_frames_cancelled", "Frames abandoned for a switch and run again on the new"
                                 " scenario (runtime.on_switch: cancel), by the scenario abandoned", ["scenario"],
                                 registry=reg)
        self.inference = Histogram("sbrs_inference_seconds", "Inference time of one frame, by scenario",
                                   ["scenario"], buckets=INFERENCE_BUCKETS, registry=reg)
        self.high_power = Gauge("sbrs_scenario_high_power", "1 if the app's policy marks the scenario high-power",
                                ["scenario"], registry=reg)
        self.facts = {key: Gauge(name, help_text, registry=reg)
                      for key, (name, help_text) in FACT_GAUGES.items()}
        self.environment = {key: Gauge(name, help_text, registry=reg)
                            for key, (name, help_text) in ENVIRONMENT_GAUGES.items()}
        self.sensor_readings = Counter("sbrs_sensor_readings", "Readings of the environment's sensors, by kind of"
                                       " sensor and result (accepted, malformed and ignored, failed to answer,"
                                       " expired: the last value aged out)", ["sensor", "result"], registry=reg)
        self.build_info = Info("sbrs_build", "Versions of sbrs and ONNX Runtime, and the execution providers",
                               registry=reg)
        self.dropped = Counter("sbrs_source_frames_dropped", "Frames a live source replaced with newer ones before"
                               " the runtime took them", registry=reg)
        self.reconnects = Counter("sbrs_source_reconnects", "Reopenings of a frame source that had stopped giving"
                                  " frames", registry=reg)

        # Every series exists from the start (with 0 or NaN), so rate() and alert rules see them at once.
        self.last_switch_delay.set(math.nan)
        for gauge in (*self.facts.values(), *self.environment.values()):
            gauge.set(math.nan)
        marked = set(high_power)
        for name in self.scenarios:
            self.frames.labels(scenario=name)
            self.cancelled.labels(scenario=name)
            self.inference.labels(scenario=name)
            self.high_power.labels(scenario=name).set(1 if name in marked else 0)
            for other in self.scenarios:
                if other != name:
                    self.switches.labels(**{"from": name, "to": other})
        for kind in SENSOR_KINDS:
            for sensor_result in SENSOR_RESULTS:
                self.sensor_readings.labels(sensor=kind, result=sensor_result)
        for result in REQUEST_RESULTS:
            for reason in (REJECT_REASONS if result == "rejected" else (NO_REASON,)):
                self.switch_requests.labels(result=result, reason=reason)
            for op in REQUEST_OPS:
                self.control_requests.labels(op=op, result=result)
        self.control_state.state("loading")
        self._set_build_info(providers)

    @classmethod
    def for_app(cls, app: Any, *, registry: CollectorRegistry | None = None,
                process_metrics: bool = True) -> MetricsObserver:
        """An observer for an ``App`` or ``AppConfig``: its scenarios, initial, policy.high_power, providers."""
        config = getattr(app, "config", app)
        return cls(config.scenario_names, initial=config.initial, high_power=config.policy.high_power,
                   providers=config.runtime.providers, registry=registry, process_metrics=process_metrics)

    # -- RunObserver -------------------------------------------------------------------------------------------

    def started(self, scenario: str, facts: Mapping[str, Any]) -> None:
        """Set the plan's memory figures from ``facts`` (keys of ``FACT_GAUGES``; ``providers`` too)."""
        if not isinstance(facts, Mapping):
            facts = {}
        for key, gauge in self.facts.items():
            value = _number(facts.get(key))
            if value is not None:
                gauge.set(value)
        providers = facts.get("providers")
        if isinstance(providers, str):
            self._set_build_info((providers,))
        elif isinstance(providers, (list, tuple)):
            self._set_build_info(str(item) for item in providers)
        self._set_active(scenario)
        self.control_state.state("running")

    def state_changed(self, state: str, scenario: str) -> None:
        """Track the control state; ``switching`` shows on ``sbrs_active_scenario``, ``running`` shows ``scenario``."""
        if state in CONTROL_STATES:
            self.control_state.state(state)
        if state == "switching":
            self.active_scenario.state(self.switching_state)
        elif state == "running":
            self._set_active(scenario)

    def frame_done(self, scenario: str, seconds: float) -> None:
        """Count a frame of ``scenario`` and observe its inference time (negative or non-finite times skipped)."""
        if scenario not in self.scenarios:
            return
        self.frames.labels(scenario=scenario).inc()
        value = _number(seconds)
        if value is not None and value >= 0:
            self.inference.labels(scenario=scenario).observe(value)

    def frame_cancelled(self, scenario: str, steps_done: int) -> None:
        """Count a frame of ``scenario`` abandoned for a switch."""
        if scenario in self.scenarios:
            self.cancelled.labels(scenario=scenario).inc()

    def switch_done(self, old: str, new: str, response_delay_s: float) -> None:
        """Count the switch ``old`` → ``new``, observe its response delay Δ, and show ``new`` as active."""
        if old in self.scenarios and new in self.scenarios and old != new:
            self.switches.labels(**{"from": old, "to": new}).inc()
        value = _number(response_delay_s)
        if value is not None and value >= 0:
            self.switch_delay.observe(value)
            self.last_switch_delay.set(value)
        self._set_active(new)

    def request_handled(self, op: str, result: str) -> None:
        """Count a control request; ``result`` is ``accepted``, ``replaced`` or ``rejected[:reason]``."""
        outcome, _, reason = str(result).partition(":")
        if outcome not in REQUEST_RESULTS:
            outcome, reason = "rejected", "other"
        if outcome != "rejected":
            reason = NO_REASON
        elif reason not in REJECT_REASONS:
            reason = "other"
        op_label = op if op in REQUEST_OPS else "other"
        self.control_requests.labels(op=op_label, result=outcome).inc()
        if op == "switch":
            self.switch_requests.labels(result=outcome, reason=reason).inc()

    def environment_changed(self, values: Mapping[str, Any]) -> None:
        """Set the environment gauges from ``values``; None (or a non-number) means unknown (NaN); absent keys stay."""
        if not isinstance(values, Mapping):
            return
        for key, gauge in self.environment.items():
            if key in values:
                value = _number(values[key])
                gauge.set(math.nan if value is None else value)

    def sensor_reading(self, kind: str, result: str) -> None:
        """Count a sensor's reading (kinds and results outside the fixed sets are not counted)."""
        if kind in SENSOR_KINDS and result in SENSOR_RESULTS:
            self.sensor_readings.labels(sensor=kind, result=result).inc()
    def frames_dropped(self, count: int) -> None:
        """Count frames a live source dropped (a non-positive or non-integer count is ignored)."""
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            self.dropped.inc(count)

    def source_reconnected(self, source: str) -> None:
        """Count a reopening of the frame source."""
        self.reconnects.inc()

    # -- helpers -----------------------------------------------------------------------------------------------

    def _set_active(self, scenario: str) -> None:
        if scenario in self.scenarios:
            self.active_scenario.state(scenario)

    def _set_build_info(self, providers: Iterable[str]) -> None:
        try:
            import onnxruntime

            ort_version = str(onnxruntime.__version__)
        except Exception:  # an import failure must not stop metrics
            ort_version = "unknown"
        self.build_info.info({"version": __version__, "onnxruntime": ort_version,
                              "providers": ",".join(providers)})
