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


def test_one_graph_as_fast_as_units_on_short_frames_is_chosen() -> None:
    choice = choose_session(figures((2.0, 2.0, 3), (1.0, 1.04, 2), (4.0, 3.9, 1)), load=0.5)
    assert choice.session == "one" and choice.asked == "auto" and choice.load == 0.5
    assert "as fast" in choice.reason and "one provider instance" in choice.reason
    assert choice.ratio == pytest.approx((1.0 * 1.04 * 0.975) ** (1 / 3))


def test_one_graph_slower_on_average_keeps_units() -> None:
    choice = choose_session(figures((2.0, 2.2, 1), (1.0, 1.1, 1)))
    assert choice.session == "units" and f"over {MARGIN:.2f}x" in choice.reason and "1.10x" in choice.reason


def test_one_scenario_much_slower_keeps_units_though_the_mean_is_within() -> None:
    choice = choose_session(figures((2.0, 1.5, 1), (1.0, 1.2, 1), (3.0, 2.7, 1)))
    assert choice.ratio is not None and choice.ratio <= MARGIN
    assert choice.session == "units" and "on s1" in choice.reason and f"{WORST_MARGIN:.2f}x" in choice.reason


def test_on_a_tie_a_long_frame_cut_into_steps_keeps_units_for_the_switch() -> None:
    long_ms = MAX_SWITCH_WAIT_S * 1e3 + 5
    cut = choose_session(figures((long_ms, long_ms * 0.98, 4), (2.0, 2.0, 1)))
    assert cut.session == "units" and "waits for a whole frame" in cut.reason and "(s0)" in cut.reason
    # the same frames as one step each: units switch at the frame's end too, so one graph costs the switch nothing
    whole = choose_session(figures((long_ms, long_ms * 0.98, 1), (2.0, 2.0, 1)))
    assert whole.session == "one"


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
