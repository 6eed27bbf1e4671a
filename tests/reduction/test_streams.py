"""Band streams in the search (``sbrs.reduction.ga.with_streams``): Algorithm 9's front also holds each
configuration run as two streams (parameters once, buffers twice, fps times the measured gain), line 14 picks
among both, and the app's runtime options decide whether two streams may be chosen."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sbrs.app.config import RuntimeOptions
from sbrs.reduction import GaParams, plan_reduction, reduce_buffers
from sbrs.reduction.cost import TWO_STREAM_GAIN, streams_gain
from sbrs.reduction.ga import Point, relative_speed, with_streams
from sbrs.reduction.search import band_streams
from tests.reduction.test_ga import scenarios, unreduced_bytes

SMALL = GaParams(population=10, generations=3, seed=7)


def test_two_streams_hold_the_parameters_once_and_the_buffers_twice() -> None:
    one = Point(1_000, 700, 300, {"a": 10.0, "b": 20.0}, {"a": {"conv": 4}})
    two = with_streams(one, 2, 1.5)
    assert (two.memory_bytes, two.params_bytes, two.arena_bytes, two.streams) == (1_300, 700, 600, 2)
    assert two.fps == {"a": 15.0, "b": 30.0} and two.band_rows == one.band_rows
    assert two.to_dict()["streams"] == 2 and one.to_dict()["streams"] == 1


def test_the_gain_needs_a_core_per_stream() -> None:
    assert streams_gain(1, cores=8) == 1.0
    assert streams_gain(2, cores=1) == 1.0
    assert streams_gain(2, cores=2) == TWO_STREAM_GAIN > 1.0


@pytest.mark.parametrize("gain", [1.0, TWO_STREAM_GAIN])
def test_the_front_weighs_one_stream_against_two(monkeypatch: pytest.MonkeyPatch, gain: float) -> None:
    monkeypatch.setattr("sbrs.reduction.ga.streams_gain", lambda streams: gain)
    limit = unreduced_bytes() - 1
    result = reduce_buffers(scenarios(), memory_limit=limit, params=SMALL, streams=2)
    names = list(scenarios())
    two = [p for p in result.pareto if p.streams == 2]
    if gain == 1.0:  # a second stream without a core for it only costs buffers: never on the front
        assert two == [] and result.chosen.streams == 1
    else:
        assert two, "no two-stream configuration on the front"
    for point in two:  # each is Algorithm 10's figure of its bands, buffers counted twice
        plan = plan_reduction(scenarios(), point.band_rows, cuts=point.cuts, tiles=point.tiles)
        assert point.memory_bytes == plan.params_bytes + 2 * plan.arena.arena_bytes
        assert point.fps == pytest.approx({s: gain * fps for s, fps in plan.fps.items()})
    assert result.chosen.memory_bytes <= limit and result.feasible
    meeting = [p for p in result.pareto if p.meets(limit, {})]
    best = max(relative_speed(p, result.unreduced, names) for p in meeting)
    assert relative_speed(result.chosen, result.unreduced, names) == best


def app_with(on_switch: str = "finish", threads: int | None = None, streams: int | None = None) -> SimpleNamespace:
    runtime = RuntimeOptions(("CPUExecutionProvider",), threads, "auto", "sbrs-tp", on_switch=on_switch,
                             streams=streams)
    return SimpleNamespace(config=SimpleNamespace(runtime=runtime))


def test_the_app_decides_whether_two_streams_may_run() -> None:
    assert band_streams(app_with()) == 2  # type: ignore[arg-type]
    assert band_streams(app_with(threads=2)) == 2  # type: ignore[arg-type]
    assert band_streams(app_with(threads=1)) == 1  # type: ignore[arg-type]  # the app keeps to one core
    assert band_streams(app_with(streams=1)) == 1  # type: ignore[arg-type]  # one frame at a time, asked for
    assert band_streams(app_with(streams=2)) == 2  # type: ignore[arg-type]
    for on_switch in ("cancel", "resume"):  # a frame given up at a switch: one frame at a time
        assert band_streams(app_with(on_switch)) == 1  # type: ignore[arg-type]
        assert app_with(on_switch, streams=2).config.runtime.max_streams(by_parts=False) == 1


def test_execution_units_take_two_streams_only_when_asked() -> None:
    assert app_with().config.runtime.max_streams(by_parts=False) == 1
    assert app_with(streams=2).config.runtime.max_streams(by_parts=False) == 2
    assert app_with(streams=1).config.runtime.max_streams(by_parts=False) == 1
