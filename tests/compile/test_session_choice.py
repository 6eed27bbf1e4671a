"""``runtime.session: auto``'s rule (``sbrs.compile.session_choice.choose_session``) on given figures: no timing
decides these tests."""

from __future__ import annotations

import pytest

from sbrs.compile.session_choice import (
    MARGIN,
    MAX_SWITCH_WAIT_S,
    WORST_MARGIN,
    ScenarioSession,
    SessionChoice,
    asked_choice,
    choose_session,
    forced_units,
)


def figures(*rows: tuple[float, float, int]) -> dict[str, ScenarioSession]:
    """Scenarios s0, s1, ... of (units ms, one graph ms, the units' steps)."""
    return {f"s{k}": ScenarioSession(units / 1e3, one / 1e3, steps) for k, (units, one, steps) in enumerate(rows)}


def test_on_a_gpu_one_graph_as_fast_as_units_on_short_frames_is_chosen() -> None:
    choice = choose_session(figures((2.0, 2.0, 3), (1.0, 1.04, 2), (4.0, 3.9, 1)), load=0.5, gpu=True)
    assert choice.session == "one" and choice.asked == "auto" and choice.load == 0.5
    assert "as fast" in choice.reason and "one provider instance" in choice.reason
    assert choice.ratio == pytest.approx((1.0 * 1.04 * 0.975) ** (1 / 3))


def test_on_the_cpu_a_tie_keeps_units_wherever_they_cut_a_frame_into_steps() -> None:
    """One graph saves a megabyte or two on the CPU, and a switch on it waits for the whole frame in flight
    (drone: 0.97 of plain ONNX Runtime's Δ against 0.78-0.88 on units, frames as fast): on a tie, units wherever
    they cut a frame into steps, however short the frame."""
    cut = choose_session(figures((2.0, 2.0, 3), (1.0, 1.04, 2), (4.0, 3.9, 1)))
    assert cut.session == "units" and "waits for a whole frame" in cut.reason and "(of 3)" in cut.reason
    whole = choose_session(figures((2.0, 2.0, 1), (1.0, 1.04, 1)))
    assert whole.session == "one" and "would not cut a frame into steps" in whole.reason
    assert "provider instance" not in whole.reason


def test_one_graph_slower_on_average_keeps_units() -> None:
    choice = choose_session(figures((2.0, 2.2, 1), (1.0, 1.1, 1)))
    assert choice.session == "units" and f"over {MARGIN:.2f}x" in choice.reason and "1.10x" in choice.reason


def test_one_scenario_much_slower_keeps_units_though_the_mean_is_within() -> None:
    choice = choose_session(figures((2.0, 1.5, 1), (1.0, 1.2, 1), (3.0, 2.7, 1)))
    assert choice.ratio is not None and choice.ratio <= MARGIN
    assert choice.session == "units" and "on s1" in choice.reason and f"{WORST_MARGIN:.2f}x" in choice.reason


def test_on_a_gpu_a_tie_keeps_units_only_for_a_long_frame_cut_into_steps() -> None:
    long_ms = MAX_SWITCH_WAIT_S * 1e3 + 5
    cut = choose_session(figures((long_ms, long_ms * 0.98, 4), (2.0, 2.0, 1)), gpu=True)
    assert cut.session == "units" and "waits for a whole frame" in cut.reason and "(s0)" in cut.reason
    # the same frames as one step each: units switch at the frame's end too, so one graph costs the switch nothing
    whole = choose_session(figures((long_ms, long_ms * 0.98, 1), (2.0, 2.0, 1)), gpu=True)
    assert whole.session == "one"
    # short frames cut into steps: the wait is within a switch's noise there, and one graph saves a provider each
    short = choose_session(figures((2.0, 1.98, 4), (2.0, 2.0, 1)), gpu=True)
    assert short.session == "one"


def test_one_graph_clearly_faster_wins_though_a_switch_waits_for_its_frame() -> None:
    long_ms = MAX_SWITCH_WAIT_S * 1e3 / 0.6 + 5
    choice = choose_session(figures((long_ms, long_ms * 0.6, 4), (2.0, 1.8, 1)))
    assert choice.ratio is not None and choice.ratio <= 1 / MARGIN
    assert choice.session == "one" and "faster" in choice.reason and "a switch waits" in choice.reason


def test_the_choice_round_trips_through_its_json_form() -> None:
    for choice in (choose_session(figures((2.0, 1.9, 2), (1.0, 1.0, 1)), load=1.25), forced_units("why"),
                   asked_choice("one")):
        data = choice.to_dict()
        assert SessionChoice.from_dict(data) == choice
        assert set(data) == {"session", "asked", "reason", "ratio", "load", "figures"}


def test_named_and_forced_choices_say_why_without_figures() -> None:
    assert asked_choice("units") == SessionChoice("units", "units", "runtime.session: units")
    forced = forced_units("on_switch: resume needs a shared step")
    assert (forced.session, forced.asked, forced.figures) == ("units", "auto", None)
    assert forced.reason == "on_switch: resume needs a shared step: units, not measured"
    assert "runs as execution units" in forced.describe() and "runtime.session: auto" in forced.describe()


def test_units_and_one_graph_are_timed_after_an_untimed_frame_each_and_the_best_blocks_count(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first frame after the other form's block pays its pools' wake-up, and a block now and then runs at half
    speed: timed as medians without an untimed frame, drone's one graph measured 0.82x the units' frame time where
    ``sbrs bench`` ran both as fast. Each timed block of either form follows one untimed frame of the same form,
    and each form's figure is its best block."""
    from sbrs.compile import unit_streams
    from tests.compile.tracked_sessions import RecordingSession

    events: list[str] = []

    blocks = {"units": [3.0, 1.0, 2.0, 1.5, 4.0], "one": [1.2, 0.9, 5.0, 1.1, 0.95]}  # seconds per frame
    timed_blocks = {"units": 0, "one": 0}
    real = unit_streams.seconds_per_frame

    def timed(chain: list[tuple[RecordingSession, dict[str, object]]], frames: int) -> float:
        real(chain, frames)
        if frames == 1:
            return 0.001  # warming up
        if frames == 2:
            return 0.01  # sizing the blocks: MIN_BLOCK_S (0.03) / 0.01 = 3 frames each
        assert frames == 3
        form = chain[0][0].name
        events.insert(len(events) - frames, f"clock-{form}")
        figure = blocks[form][timed_blocks[form]]
        timed_blocks[form] += 1
        return figure

    monkeypatch.setattr(unit_streams, "seconds_per_frame", timed)
    monkeypatch.setattr(unit_streams, "WARM_S", 0.0)
    monkeypatch.setattr(unit_streams, "MIN_BLOCK_S", 0.03)
    units_s, one_s = unit_streams.compare_chains([(RecordingSession("units", events), {})],
                                                 [(RecordingSession("one", events), {})])
    assert (units_s, one_s) == (1.0, 0.9)  # the best block of each, not the median (2.0, 1.1)
    assert timed_blocks == {"units": unit_streams.ROUNDS, "one": unit_streams.ROUNDS}
    clocks = [i for i, event in enumerate(events) if event.startswith("clock-")]
    assert len(clocks) == 2 * unit_streams.ROUNDS
    for i in clocks:
        form = events[i].removeprefix("clock-")
        other = "one" if form == "units" else "units"
        assert events[i + 1:i + 4] == [form] * 3  # the timed block
        assert events[i - 1] == form  # its untimed frame ...
        if i != clocks[0]:
            assert events[i - 2] == other  # ... right after the other form's block


def test_the_session_measurement_holds_only_the_units_a_later_scenario_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the streams' measurement does (``test_unit_streams.py``): a unit's session goes once no later scenario
    runs it, so a build of many scenarios does not hold every unit's session at once; the one graph stays to the
    end."""
    from sbrs.compile import session_choice, unit_streams
    from tests.compile.tracked_sessions import TrackedSessions

    sessions = TrackedSessions(monkeypatch)
    monkeypatch.setattr(unit_streams, "WARM_S", 0.0)
    monkeypatch.setattr(unit_streams, "ROUNDS", 2)
    sequences = {"a": ["u1", "u2"], "b": ["u1", "u3"], "c": ["u4"]}
    figures = session_choice.measure_session({u: u for u in ("u1", "u2", "u3", "u4")}, sequences, "one",
                                             {"a": 0, "b": 1, "c": 2}, ("CPUExecutionProvider",), lambda unit: 2, 2,
                                             optimized=False, warm=frozenset())
    assert set(figures) == {"a", "b", "c"} and all(f.units_s > 0 and f.one_s > 0 for f in figures.values())
    assert sessions.seen["u3"] == {"one", "u1", "u3"}  # u2 went when a was measured, u1 stays for b
    assert sessions.seen["u4"] == {"one", "u4"}
    assert sessions.seen["one"] >= {"one", "u4"}
