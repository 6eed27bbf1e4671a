"""``sbrs bench --switching``'s harness (``sbrs.bench.switching``): which output ends a switch, when the next
request may come, and the rounds' walk over every ordered pair. Logic only: no timing decides anything here;
``tests/bench/test_bench.py`` runs the whole measurement."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sbrs.bench.switching import Requests, ort_switches, switch_circuit


def record(delay_s: float = 1e-3) -> SimpleNamespace:
    return SimpleNamespace(response_delay_s=delay_s)


def asking(requests: Requests, target: str) -> None:
    """As the thread does when it asks (without the thread)."""
    requests.target = target


def test_a_switch_ends_at_the_frame_that_took_the_request_and_settles_after_every_older_frame() -> None:
    requests = Requests("a", ["b"], [1.0], {"a": 1e-3, "b": 1e-3})
    asking(requests, "b")
    assert not requests.out(0, "a", None)
    assert not requests.out(2, "b", None)  # an older frame of b, still in flight when b was asked for
    assert requests.switches == [] and not requests._switched.is_set()
    assert requests.out(4, "b", record(0.5e-3))
    assert requests._switched.is_set() and not requests._settled.is_set()
    (old, new, caller, recorded), = requests.switches
    assert (old, new, recorded) == ("a", "b", 0.5e-3) and caller > 0
    requests.out(1, "a", None)
    assert not requests._settled.is_set()  # frame 3 is still in flight
    requests.out(3, "a", None)
    assert requests._settled.is_set()
    assert not requests.out(5, "b", record())  # no request pending: nothing more is counted
    assert len(requests.switches) == 1


def test_plain_onnx_runtime_switches_at_the_first_output_of_the_scenario_asked_for() -> None:
    requests = Requests("a", ["b"], [1.0], {"a": 1e-3, "b": 1e-3})
    asking(requests, "b")
    assert not requests.held("a")
    assert requests.held("b")
    assert requests._switched.is_set() and requests._settled.is_set() and len(requests.switches) == 1


def test_the_thread_walks_the_targets_one_settled_switch_after_another() -> None:
    """The thread asks for each target only once the switch before it ended and settled, and ends the block."""
    asked: list[str] = []
    requests = Requests("a", ["b", "a", "b"], [0.0, 0.0, 0.0], {"a": 1e-4, "b": 1e-4})
    requests.ask = asked.append
    requests.start()
    deadline = time.monotonic() + 10
    while not requests.done.is_set() and time.monotonic() < deadline:
        if len(asked) > len(requests.switches):
            assert len(asked) == len(requests.switches) + 1  # one request at a time
            requests.held(asked[-1])
        time.sleep(1e-4)
    requests.stop()
    assert asked == ["b", "a", "b"] and requests.failed is None
    assert [(old, new) for old, new, _, _ in requests.switches] == [("a", "b"), ("b", "a"), ("a", "b")]


def test_a_switch_that_never_ends_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sbrs.bench.switching.MAX_SWITCH_S", 0.05)
    requests = Requests("a", ["b", "a"], [0.0, 0.0], {"a": 1e-4, "b": 1e-4})
    requests.start()
    assert requests.done.wait(5.0)
    requests.stop()
    assert requests.failed == "a->b" and requests.switches == []


class FakeSession:
    """A plain session whose calls take ``frame_s`` and name their model; ``terminate`` is honoured."""

    def __init__(self, name: str, calls: list[str], frame_s: float = 2e-3) -> None:
        self.name, self.calls, self.frame_s = name, calls, frame_s

    def run(self, outputs: object, feed: object, options: object = None) -> list[str]:
        end = time.perf_counter() + self.frame_s
        while time.perf_counter() < end:
            if options is not None and getattr(options, "terminate", False):
                raise RuntimeError("Exiting due to terminate flag being set to true.")
            time.sleep(1e-4)
        self.calls.append(self.name)
        return [self.name]


@pytest.mark.parametrize("how", ["all", "load", "cancel"])
def test_plain_loop_changes_session_at_the_frame_boundary_or_stops_the_call(how: str) -> None:
    calls: list[str] = []
    sessions = {name: FakeSession(name, calls) for name in ("a", "b")}
    loaded: list[str] = []

    def load(name: str) -> FakeSession:
        loaded.append(name)
        return FakeSession(name, calls)

    requests = Requests("a", ["b", "a", "b", "a"], [1.5, 1.5, 1.5, 1.5], {"a": 2e-3, "b": 2e-3})
    cancel = SimpleNamespace(terminate=False) if how == "cancel" else None
    ort_switches(sessions, "x", None, requests, load=load if how == "load" else None,  # type: ignore[arg-type]
                 cancel=cancel)
    requests.stop()
    assert requests.failed is None
    assert [(old, new) for old, new, _, _ in requests.switches] == [("a", "b"), ("b", "a"), ("a", "b"), ("b", "a")]
    assert loaded == (["a", "b", "a", "b", "a"] if how == "load" else [])
    assert cancel is None or not cancel.terminate


@given(st.integers(2, 6), st.integers(0, 5), st.randoms(use_true_random=False))
def test_a_round_takes_every_ordered_pair_once_and_comes_back(count: int, start: int, rng: random.Random) -> None:
    scenarios = [f"s{i}" for i in range(count)]
    first = scenarios[start % count]
    targets = switch_circuit(scenarios, first, rng)
    walk = [first, *targets]
    pairs = Counter(itertools.pairwise(walk))
    assert set(pairs) == {(a, b) for a in scenarios for b in scenarios if a != b}
    assert set(pairs.values()) == {1} and walk[-1] == first


def test_threads_end_with_their_blocks() -> None:
    before = threading.active_count()
    requests = Requests("a", ["b"], [0.0], {"a": 1e-4, "b": 1e-4})
    requests.ask = lambda target: requests.held(target)
    requests.start()
    assert requests.done.wait(5.0)
    requests.stop()
    assert threading.active_count() == before and requests.failed is None
