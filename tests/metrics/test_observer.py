"""``MetricsObserver``: events drive the registry's samples; labels stay within fixed sets; it never raises."""

from __future__ import annotations

import math

import numpy as np
import pytest
from prometheus_client import REGISTRY, CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from sbrs.metrics import MetricsObserver
from sbrs.metrics.observer import INFERENCE_BUCKETS, REJECT_REASONS, SWITCH_DELAY_BUCKETS
from sbrs.runtime.events import Observers, RunObserver

from .conftest import SCENARIOS


def active(observer: MetricsObserver) -> list[str]:
    """The states of ``sbrs_active_scenario`` that are 1."""
    states = [*SCENARIOS, observer.switching_state]
    return [state for state in states
            if observer.registry.get_sample_value("sbrs_active_scenario", {"sbrs_active_scenario": state}) == 1]


def sample(observer: MetricsObserver, name: str, **labels: str) -> float | None:
    return observer.registry.get_sample_value(name, labels)


def test_is_a_run_observer_on_its_own_registry(observer: MetricsObserver) -> None:
    assert isinstance(observer.registry, CollectorRegistry) and observer.registry is not REGISTRY
    checked: RunObserver = observer  # type-checks as the protocol
    assert checked is observer
    assert REGISTRY.get_sample_value("sbrs_frames_total", {"scenario": "full"}) is None  # nothing global
    names = {metric.name for metric in observer.registry.collect()}
    assert {"process_resident_memory_bytes", "python_info"} <= {
        sample.name for metric in observer.registry.collect() for sample in metric.samples}
    for name in MetricsObserver.METRICS:
        assert name.removesuffix("_total").removesuffix("_info") in names, name


def test_two_observers_do_not_share_metrics() -> None:
    first = MetricsObserver(SCENARIOS, process_metrics=False)
    second = MetricsObserver(SCENARIOS, process_metrics=False)
    first.frame_done("full", 0.01)
    assert first.registry.get_sample_value("sbrs_frames_total", {"scenario": "full"}) == 1
    assert second.registry.get_sample_value("sbrs_frames_total", {"scenario": "full"}) == 0


def test_a_host_registry_with_process_collectors_is_accepted() -> None:
    """A host serving sbrs' metrics on its own endpoint passes its registry, which (as prometheus_client.REGISTRY
    does) already has the process, platform and GC collectors: that was a ValueError (duplicated timeseries)."""
    host = CollectorRegistry(auto_describe=True)  # as prometheus_client.REGISTRY is made
    ProcessCollector(registry=host)
    PlatformCollector(registry=host)
    GCCollector(registry=host)
    observer = MetricsObserver(SCENARIOS, registry=host)
    observer.frame_done("full", 0.01)
    assert host.get_sample_value("sbrs_frames_total", {"scenario": "full"}) == 1
    series = [(sample.name, tuple(sorted(sample.labels.items()))) for metric in host.collect()
              for sample in metric.samples]
    assert len(series) == len(set(series)) and sum(name == "python_info" for name, _ in series) == 1


def test_initial_series_exist_with_zero_or_nan(observer: MetricsObserver) -> None:
    assert active(observer) == ["full"]
    assert sample(observer, "sbrs_control_state", sbrs_control_state="loading") == 1
    for name in SCENARIOS:
        assert sample(observer, "sbrs_frames_total", scenario=name) == 0
        assert sample(observer, "sbrs_inference_seconds_count", scenario=name) == 0
        for other in SCENARIOS:
            value = sample(observer, "sbrs_scenario_switches_total", **{"from": name, "to": other})
            assert value == (None if other == name else 0)
    assert sample(observer, "sbrs_switch_requests_total", result="accepted", reason="none") == 0
    for reason in REJECT_REASONS:
        assert sample(observer, "sbrs_switch_requests_total", result="rejected", reason=reason) == 0
    for name in ("sbrs_arena_bytes", "sbrs_parameters_bytes", "sbrs_naive_buffer_bytes", "sbrs_reuse_buffer_bytes",
                 "sbrs_buffer_lower_bound_bytes", "sbrs_environment_battery_ratio", "sbrs_environment_min_fps",
                 "sbrs_environment_energy_budget_joules", "sbrs_last_switch_response_delay_seconds"):
        assert math.isnan(sample(observer, name)), name


def test_high_power_gauge_follows_the_policy(observer: MetricsObserver) -> None:
    assert [sample(observer, "sbrs_scenario_high_power", scenario=name) for name in SCENARIOS] == [1, 0, 0]


def test_started_sets_memory_figures_and_the_active_scenario(observer: MetricsObserver) -> None:
    observer.started("skip", {"arena_bytes": 4096, "params_bytes": 123456, "naive_bytes": 90000,
                              "lower_bound_bytes": 4032, "reuse_bytes": 5000, "providers": ["CUDAExecutionProvider",
                                                                                            "CPUExecutionProvider"],
                              "unrelated": "ignored"})
    assert sample(observer, "sbrs_arena_bytes") == 4096
    assert sample(observer, "sbrs_parameters_bytes") == 123456
    assert sample(observer, "sbrs_naive_buffer_bytes") == 90000
    assert sample(observer, "sbrs_buffer_lower_bound_bytes") == 4032
    assert sample(observer, "sbrs_reuse_buffer_bytes") == 5000
    assert active(observer) == ["skip"]
    assert sample(observer, "sbrs_control_state", sbrs_control_state="running") == 1
    info = [s for m in observer.registry.collect() if m.name == "sbrs_build" for s in m.samples]
    assert len(info) == 1 and info[0].value == 1
    assert info[0].labels["providers"] == "CUDAExecutionProvider,CPUExecutionProvider"
    assert info[0].labels["version"] and info[0].labels["onnxruntime"]


def test_started_with_missing_or_bad_facts_leaves_nan(observer: MetricsObserver) -> None:
    observer.started("full", {"arena_bytes": "a lot", "params_bytes": True, "naive_bytes": float("inf")})
    for name in ("sbrs_arena_bytes", "sbrs_parameters_bytes", "sbrs_naive_buffer_bytes"):
        assert math.isnan(sample(observer, name)), name


def test_frames_count_and_time_per_scenario(observer: MetricsObserver) -> None:
    for seconds in (0.0004, 0.002, 0.03):
        observer.frame_done("full", seconds)
    observer.frame_done("exit", 0.0002)
    assert sample(observer, "sbrs_frames_total", scenario="full") == 3
    assert sample(observer, "sbrs_frames_total", scenario="exit") == 1
    assert sample(observer, "sbrs_frames_total", scenario="skip") == 0
    assert sample(observer, "sbrs_inference_seconds_count", scenario="full") == 3
    assert sample(observer, "sbrs_inference_seconds_sum", scenario="full") == pytest.approx(0.0324)
    assert sample(observer, "sbrs_inference_seconds_bucket", scenario="full", le="0.0005") == 1
    assert sample(observer, "sbrs_inference_seconds_bucket", scenario="full", le="0.0025") == 2
    assert sample(observer, "sbrs_inference_seconds_bucket", scenario="full", le="+Inf") == 3


def test_a_switch_goes_through_switching_and_is_counted(observer: MetricsObserver) -> None:
    observer.started("full", {})
    observer.state_changed("switching", "full")
    assert active(observer) == ["switching"]
    assert sample(observer, "sbrs_control_state", sbrs_control_state="switching") == 1
    observer.switch_done("full", "skip", 0.0123)
    observer.state_changed("running", "skip")
    assert active(observer) == ["skip"]
    assert sample(observer, "sbrs_scenario_switches_total", **{"from": "full", "to": "skip"}) == 1
    assert sample(observer, "sbrs_scenario_switches_total", **{"from": "skip", "to": "full"}) == 0
    assert sample(observer, "sbrs_switch_response_delay_seconds_count") == 1
    assert sample(observer, "sbrs_switch_response_delay_seconds_sum") == pytest.approx(0.0123)
    assert sample(observer, "sbrs_switch_response_delay_seconds_bucket", le="0.01") == 0
    assert sample(observer, "sbrs_switch_response_delay_seconds_bucket", le="0.025") == 1
    assert sample(observer, "sbrs_last_switch_response_delay_seconds") == pytest.approx(0.0123)
    observer.switch_done("skip", "exit", 2.0)
    assert active(observer) == ["exit"]
    assert sample(observer, "sbrs_switch_response_delay_seconds_count") == 2
    assert sample(observer, "sbrs_last_switch_response_delay_seconds") == 2.0


def bucket_of(buckets: tuple[float, ...], value: float) -> tuple[float, float]:
    """The bounds (lower, upper] of the bucket ``value`` falls in (lower 0 for the first one)."""
    bounds = (0.0, *buckets)
    index = next(i for i, bound in enumerate(buckets) if value <= bound)
    return bounds[index], buckets[index]


@pytest.mark.parametrize(("buckets", "smallest", "largest"), [
    (INFERENCE_BUCKETS, 50e-6, 1.0),  # frames: tiny and pamap2 run 0.06-0.3 ms, a big CNN on a board 1 s
    (SWITCH_DELAY_BUCKETS, 150e-6, 5.0),  # Δ: 0.2-0.4 ms on tiny and pamap2
])
def test_buckets_resolve_every_time_sbrs_runs_at(buckets: tuple[float, ...], smallest: float,
                                                  largest: float) -> None:
    """Every time in the range falls in a bucket that does not start at 0 and is at most 2.5 times as wide as
    its lower bound: histogram_quantile then tells 60 µs from 90 µs (it interpolates within a bucket, from 0 in
    the first one)."""
    assert list(buckets) == sorted(buckets) and buckets[-1] >= largest
    for value in np.geomspace(smallest, largest, 200):
        lower, upper = bucket_of(buckets, float(value))
        assert lower > 0 and upper / lower <= 2.5, f"{value * 1e6:.0f} µs falls in ({lower}, {upper}]"


def test_requests_by_result_and_reason(observer: MetricsObserver) -> None:
    observer.request_handled("switch", "accepted")
    observer.request_handled("switch", "accepted")
    observer.request_handled("switch", "replaced")
    observer.request_handled("switch", "rejected:unknown_scenario")
    observer.request_handled("switch", "rejected:made_up_reason")
    observer.request_handled("switch", "rejected")
    observer.request_handled("env", "accepted")
    observer.request_handled("status", "accepted")
    observer.request_handled(None, "rejected:bad_json")  # type: ignore[arg-type]
    assert sample(observer, "sbrs_switch_requests_total", result="accepted", reason="none") == 2
    assert sample(observer, "sbrs_switch_requests_total", result="replaced", reason="none") == 1
    assert sample(observer, "sbrs_switch_requests_total", result="rejected", reason="unknown_scenario") == 1
    assert sample(observer, "sbrs_switch_requests_total", result="rejected", reason="other") == 2
    assert sample(observer, "sbrs_switch_requests_total", result="rejected", reason="bad_json") == 0
    assert sample(observer, "sbrs_control_requests_total", op="switch", result="rejected") == 3
    assert sample(observer, "sbrs_control_requests_total", op="env", result="accepted") == 1
    assert sample(observer, "sbrs_control_requests_total", op="status", result="accepted") == 1
    assert sample(observer, "sbrs_control_requests_total", op="other", result="rejected") == 1


def test_environment_values_and_unknowns(observer: MetricsObserver) -> None:
    observer.environment_changed({"battery": 0.42, "min_fps": 15, "energy_budget_j": None, "requirements": None})
    assert sample(observer, "sbrs_environment_battery_ratio") == 0.42
    assert sample(observer, "sbrs_environment_min_fps") == 15
    assert math.isnan(sample(observer, "sbrs_environment_energy_budget_joules"))
    observer.environment_changed({"energy_budget_j": 0.3})  # absent keys keep their value
    assert sample(observer, "sbrs_environment_battery_ratio") == 0.42
    assert sample(observer, "sbrs_environment_energy_budget_joules") == 0.3
    observer.environment_changed({"battery": None})
    assert math.isnan(sample(observer, "sbrs_environment_battery_ratio"))


def test_sensor_readings_and_the_temperature(observer: MetricsObserver) -> None:
    assert sample(observer, "sbrs_sensor_readings_total", sensor="thermal", result="malformed") == 0  # from the start
    assert math.isnan(sample(observer, "sbrs_environment_temperature_celsius"))
    for result in ("accepted", "accepted", "malformed", "failed", "expired"):
        Observers([observer]).sensor_reading("mavlink", result)
    observer.sensor_reading("gps", "accepted")  # not a kind of sensor: not counted
    observer.sensor_reading("thermal", "exploded")
    assert sample(observer, "sbrs_sensor_readings_total", sensor="mavlink", result="accepted") == 2
    for result in ("malformed", "failed", "expired"):
        assert sample(observer, "sbrs_sensor_readings_total", sensor="mavlink", result=result) == 1
    assert sample(observer, "sbrs_sensor_readings_total", sensor="gps", result="accepted") is None
    observer.environment_changed({"temperature": -12.5})
    assert sample(observer, "sbrs_environment_temperature_celsius") == -12.5


def test_label_values_stay_within_fixed_sets(observer: MetricsObserver) -> None:
    def series() -> int:
        return sum(len(metric.samples) for metric in observer.registry.collect()
                   if metric.name.startswith("sbrs_"))

    before = series()
    observer.frame_done("not-a-scenario", 0.01)
    observer.switch_done("full", "not-a-scenario", 0.01)
    observer.switch_done("full", "full", 0.01)
    observer.state_changed("running", "not-a-scenario")
    observer.state_changed("made-up-state", "full")
    observer.request_handled("launch", "exploded")
    observer.request_handled("switch", "rejected:" + "x" * 1000)
    assert series() == before
    assert sample(observer, "sbrs_frames_total", scenario="full") == 0


@pytest.mark.parametrize("call", [
    lambda o: o.frame_done("full", float("nan")),
    lambda o: o.frame_done("full", -1.0),
    lambda o: o.frame_done("full", "slow"),
    lambda o: o.switch_done("full", "skip", float("inf")),
    lambda o: o.switch_done("full", "skip", None),
    lambda o: o.started("full", None),
    lambda o: o.environment_changed(None),
    lambda o: o.environment_changed({"battery": "full"}),
    lambda o: o.request_handled(42, 42),
])
def test_odd_events_never_raise(observer: MetricsObserver, call) -> None:  # type: ignore[no-untyped-def]
    call(observer)
    assert sample(observer, "sbrs_switch_response_delay_seconds_count") == 0
    assert sample(observer, "sbrs_inference_seconds_count", scenario="full") == 0


def test_a_scenario_named_switching_keeps_its_own_state() -> None:
    observer = MetricsObserver(("switching", "eco"), process_metrics=False)
    assert observer.switching_state == "switching_"
    observer.state_changed("switching", "switching")
    assert observer.registry.get_sample_value("sbrs_active_scenario", {"sbrs_active_scenario": "switching_"}) == 1
    observer.switch_done("switching", "eco", 0.01)
    assert observer.registry.get_sample_value("sbrs_active_scenario", {"sbrs_active_scenario": "eco"}) == 1


def test_for_app_reads_scenarios_initial_and_high_power() -> None:
    from tests.control.helpers import three_scenarios

    config = three_scenarios(initial="balanced", high_power=("accurate",))
    observer = MetricsObserver.for_app(config, process_metrics=False)
    assert observer.scenarios == ("accurate", "balanced", "frugal")
    assert observer.registry.get_sample_value("sbrs_active_scenario", {"sbrs_active_scenario": "balanced"}) == 1
    assert observer.registry.get_sample_value("sbrs_scenario_high_power", {"scenario": "accurate"}) == 1
    assert observer.registry.get_sample_value("sbrs_scenario_high_power", {"scenario": "frugal"}) == 0


def test_fan_out_through_observers(observer: MetricsObserver) -> None:
    class Broken:
        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            raise RuntimeError("broken observer")

    fan = Observers([Broken(), observer])  # type: ignore[list-item]
    fan.started("full", {"arena_bytes": 64})
    fan.frame_done("full", 0.001)
    fan.switch_done("full", "exit", 0.02)
    assert sample(observer, "sbrs_arena_bytes") == 64
    assert sample(observer, "sbrs_frames_total", scenario="full") == 1
    assert active(observer) == ["exit"]


def test_a_sources_dropped_frames_and_reconnections_are_counted() -> None:
    observer = MetricsObserver(SCENARIOS, process_metrics=False)
    assert observer.registry.get_sample_value("sbrs_source_frames_dropped_total") == 0
    observer.frames_dropped(3)
    observer.frames_dropped(2)
    observer.frames_dropped(0)  # nothing
    observer.frames_dropped(-1)  # not a count: ignored
    observer.source_reconnected("udp://@:5600")
    assert observer.registry.get_sample_value("sbrs_source_frames_dropped_total") == 5
    assert observer.registry.get_sample_value("sbrs_source_reconnects_total") == 1
