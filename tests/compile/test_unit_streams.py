"""One stream or two (``runtime.streams: auto``, ``sbrs.compile.unit_streams``): the rule on figures, and what a
build records and a runtime runs. Which way the machine's measurement goes is its answer, so no test asserts
it: the build's choice must follow the rule on the build's own figures, and the runtime must run it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sbrs.artifact.read import load_build
from sbrs.cli import main
from sbrs.compile.unit_streams import (
    CHECKED_FRAME_S,
    LARGE_GAIN,
    MAX_LONG_FRAME_S,
    MAX_SHORT_FRAME_S,
    MIN_GAIN,
    ScenarioStreams,
    StreamsChoice,
    choose_streams,
)
from sbrs.runtime import runtime_for

TINY = Path(__file__).resolve().parents[2] / "apps" / "tiny.yaml"


def figures(one_s: float, gain: float, scenarios: int = 3, plain_gain: float | None = None) -> dict[str, ScenarioStreams]:
    """Every scenario alike: ``one_s`` a frame on one stream, ``gain`` on two; plain ONNX Runtime's two frames at
    once ``plain_gain`` times its threads (a frame of 1 ms on its threads) where given."""
    plain = (None, None) if plain_gain is None else (0.001, 0.001 / plain_gain)
    return {f"s{i}": ScenarioStreams(one_s, one_s / gain, *plain) for i in range(scenarios)}


SHORT_S = 0.001  # a frame of 1 ms on one stream: on one thread of two streams between CHECKED_FRAME_S and 5 ms


def test_two_streams_on_short_frames_when_they_win_by_the_margin() -> None:
    choice = choose_streams(figures(SHORT_S, MIN_GAIN + 0.05))
    assert CHECKED_FRAME_S <= 2 * SHORT_S / (MIN_GAIN + 0.05) <= MAX_SHORT_FRAME_S
    assert choice.streams == 2 and choice.asked == "auto" and "costs less than such a frame" in choice.reason


def test_one_stream_when_two_do_not_win_by_the_margin() -> None:
    assert choose_streams(figures(SHORT_S, MIN_GAIN - 0.02)).streams == 1
    assert choose_streams(figures(SHORT_S, 0.7)).streams == 1


def test_the_shortest_frames_take_two_streams_only_where_plain_onnx_runtime_gains_too() -> None:
    tiny_s = CHECKED_FRAME_S / 4  # on one thread of two streams, 2 * tiny_s / 1.5 < CHECKED_FRAME_S
    for plain_gain in (None, MIN_GAIN - 0.05, 0.8):  # not measured, or plain ORT's threads as good or better
        choice = choose_streams(figures(tiny_s, 1.5, plain_gain=plain_gain))
        assert choice.streams == 1 and "hand-offs" in choice.reason
    assert choose_streams(figures(tiny_s, 1.5, plain_gain=MIN_GAIN + 0.2)).streams == 2
    # ... and where two streams win big: on such frames the hand-offs take more than the measurement shows
    modest = choose_streams(figures(tiny_s, (MIN_GAIN + LARGE_GAIN) / 2, plain_gain=MIN_GAIN + 0.2))
    assert modest.streams == 1 and "hand-offs" in modest.reason
    # frames of 1 ms and more on one thread are decided on sbrs' own figures alone
    assert choose_streams(figures(SHORT_S, 1.5, plain_gain=0.8)).streams == 2


def test_long_frames_keep_one_stream_unless_two_win_big() -> None:
    long_s = 4 * MAX_SHORT_FRAME_S  # a frame on one thread of two streams far longer than a few ms
    assert 2 * long_s / (LARGE_GAIN + 0.05) <= MAX_LONG_FRAME_S  # ... and not among the longest
    moderate = choose_streams(figures(long_s, (MIN_GAIN + LARGE_GAIN) / 2))
    assert moderate.streams == 1 and "SBRS-TP" in moderate.reason
    assert choose_streams(figures(long_s, LARGE_GAIN + 0.05)).streams == 2


def test_the_longest_frames_keep_one_stream_whatever_the_gain() -> None:
    longest_s = MAX_LONG_FRAME_S  # one stream's frame; on one thread of two streams 2 * it / gain
    choice = choose_streams(figures(longest_s, 1.5))
    assert choice.streams == 1 and "SBRS-TP" in choice.reason


def test_one_long_scenario_makes_the_frames_long() -> None:
    mixed = {**figures(SHORT_S, 1.2, 2), "slow": ScenarioStreams(0.05, 0.05 / 1.2)}
    assert choose_streams(mixed).streams == 1


def test_the_gain_is_the_geometric_mean_of_the_scenarios() -> None:
    choice = choose_streams({"a": ScenarioStreams(0.0004, 0.0001), "b": ScenarioStreams(0.0001, 0.0004)})
    assert choice.gain == pytest.approx(1.0) and choice.streams == 1  # 4x and 0.25x: no gain over the app


def test_a_choice_round_trips_through_its_json_form() -> None:
    choice = choose_streams(figures(SHORT_S, 1.4, plain_gain=1.3))
    again = StreamsChoice.from_dict(json.loads(json.dumps(choice.to_dict())))
    assert again.streams == choice.streams and again.reason == choice.reason
    assert again.gain == pytest.approx(choice.gain, rel=1e-3)
    assert again.figures is not None and again.figures["s0"].plain_gain == pytest.approx(1.3, rel=1e-3)
    assert StreamsChoice.from_dict(StreamsChoice(1, "1", "runtime.streams: 1").to_dict()).figures is None


def test_figures_measured_on_a_busy_machine_say_so() -> None:
    assert choose_streams(figures(SHORT_S, 1.5), load=5.0).busy(cores=2)
    assert not choose_streams(figures(SHORT_S, 1.5), load=1.5).busy(cores=2)
    assert not StreamsChoice(1, "1", "runtime.streams: 1").busy(cores=2)  # nothing measured


def _tiny(folder: Path, runtime: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tiny.yaml"
    path.write_text(TINY.read_text(encoding="utf-8") + runtime, encoding="utf-8")
    return path


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: nothing to measure")
def test_auto_is_measured_by_the_build_recorded_and_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _tiny(tmp_path)
    assert main(["build", str(path)]) == 0
    built = capsys.readouterr().out
    manifest = json.loads((tmp_path / "tiny.build" / "manifest.json").read_text(encoding="utf-8"))
    choice = StreamsChoice.from_dict(manifest["streams"])
    assert choice.asked == "auto" and choice.figures is not None and set(choice.figures) == {"full", "skip", "exit"}
    assert all(f.one_s > 0 and f.two_s > 0 for f in choice.figures.values())
    assert choose_streams(choice.figures).streams == choice.streams  # the rule on the build's own figures
    assert choice.load is not None and choice.load >= 0  # the machine's load average beside its figures
    assert f"streams: {choice.streams} (runtime.streams: auto; {choice.reason}, measured at load average" in built
    build = load_build(path)
    assert build.streams == choice.streams
    with runtime_for(path) as rt:
        assert rt.memory_report()["streams"] == choice.streams
        if choice.streams == 2:  # one-thread sessions, a frame on each core
            assert {s.get_session_options().intra_op_num_threads for s in rt._sessions.values()} == {1}
    assert main(["inspect", str(path)]) == 0
    said = " ".join(capsys.readouterr().out.split())  # the line is wrapped to the screen's width
    assert f"runtime.streams: auto → {choice.streams} in the build ({choice.reason})" in said


def test_an_explicit_streams_wins_and_is_not_measured(tmp_path: Path) -> None:
    tensors = {}
    for asked in (1, 2):
        path = _tiny(tmp_path / str(asked), f"runtime: {{streams: {asked}}}\n")
        assert main(["build", str(path), "--json"]) == 0
        build = load_build(path)
        assert build.streams == asked and build.streams_choice is not None
        assert build.streams_choice["asked"] == str(asked) and build.streams_choice["figures"] is None
        assert build.footprint is not None
        tensors[asked] = build.footprint.tensors_bytes
        with runtime_for(path) as rt:
            assert rt.memory_report()["streams"] == asked
    assert tensors[2] == 2 * tensors[1]  # the plan counts every tensor once per stream


def test_auto_without_a_build_runs_one_stream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sbrs.app import load_app

    path = _tiny(tmp_path)
    with runtime_for(load_app(path)) as rt:  # compiled in memory: nothing measured
        assert rt.memory_report()["streams"] == 1
    assert main(["inspect", str(path)]) == 0
    assert "runtime.streams: auto (measured by `sbrs build`: no current build yet" in capsys.readouterr().out


def test_cancel_keeps_one_stream_unmeasured(tmp_path: Path) -> None:
    path = _tiny(tmp_path, "runtime: {on_switch: cancel}\n")
    assert main(["build", str(path), "--json"]) == 0
    build = load_build(path)
    assert build.streams == 1 and build.streams_choice is not None and build.streams_choice["figures"] is None


def test_plain_two_frames_are_timed_as_sbrs_bench_runs_them() -> None:
    """Plain ONNX Runtime's two frames at once (the check on the shortest frames) run half the frames on this
    thread and half on another at once, without the runtime's hand-offs (``sbrs bench``'s comparator)."""
    import threading

    from sbrs.compile import unit_streams

    threads: list[int] = []

    class Session:
        def run(self, outputs: object, feed: object) -> None:
            threads.append(threading.get_ident())

    seconds = unit_streams.two_frames_at_once([(Session(), {})], 3)
    assert seconds > 0 and len(threads) == 6
    assert threads.count(threading.get_ident()) == 3 and len(set(threads)) == 2


def test_each_timed_block_of_one_stream_starts_after_an_untimed_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first frame of one stream after a block of two pays its pools' wake-up (drone on this machine: 13 ms
    against 22); blocks of two or three frames timed with it made one stream look 1.3-2x slower than it runs,
    and drone took two streams. Each timed block of one stream now follows one untimed frame of it."""
    from sbrs.compile import unit_streams
    from tests.compile.tracked_sessions import RecordingSession

    events: list[str] = []
    real = unit_streams.seconds_per_frame

    def timed(chain: list[tuple[RecordingSession, dict[str, object]]], frames: int) -> float:
        events.append("clock")
        return real(chain, frames)

    monkeypatch.setattr(unit_streams, "seconds_per_frame", timed)
    monkeypatch.setattr(unit_streams, "WARM_S", 0.0)
    unit_streams._interleaved([(RecordingSession("one", events, 0.001), {})],
                              [(RecordingSession("two", events, 0.001), {})])
    clocks = [i for i, event in enumerate(events) if event == "clock" and "two" in events[:i]]
    assert len(clocks) == unit_streams.ROUNDS
    for i in clocks:
        last_two = max(j for j in range(i) if events[j] == "two")
        assert events[last_two + 1:i] == ["one"]


def test_the_measurement_holds_only_the_sessions_a_later_scenario_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions of units no later scenario runs are let go: every unit's two sessions held at once took the build
    of 60 scenarios (``benchmarks/scale.py``) to 2.8 GB."""
    from sbrs.compile import unit_streams
    from tests.compile.tracked_sessions import TrackedSessions

    sessions = TrackedSessions(monkeypatch)
    monkeypatch.setattr(unit_streams, "WARM_S", 0.0)
    monkeypatch.setattr(unit_streams, "ROUNDS", 2)
    sequences = {"a": ["u1", "u2"], "b": ["u1", "u3"], "c": ["u4"]}
    figures = unit_streams.measure_streams({u: u for u in ("u1", "u2", "u3", "u4")}, sequences,
                                           ("CPUExecutionProvider",), lambda unit: 2, optimized=False,
                                           warm=frozenset())
    assert set(figures) == {"a", "b", "c"}
    assert sessions.seen["u3"] == {"u1", "u3"}  # u2 went when a was measured, u1 stays for b
    assert sessions.seen["u4"] == {"u4"}
    assert not sessions.alive
