"""PolicyController: policy on environment updates, explicit switches, failures, measurements, threads."""

from __future__ import annotations

import itertools
import threading

import pytest

from sbrs.app.config import BatteryRule
from sbrs.control import PolicyController, RequestError
from sbrs.errors import InputError, SbrsRuntimeError
from tests.control.helpers import three_scenarios


class Recorder:
    """A ``switch`` callable that records its calls and can be told to fail."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail = False

    def __call__(self, name: str) -> None:
        if self.fail:
            raise SbrsRuntimeError("runtime is closed")
        self.calls.append(name)


def test_environment_update_switches_through_the_callable() -> None:
    switch = Recorder()
    controller = PolicyController(three_scenarios(), switch)
    assert controller.scenario == "accurate" and controller.decision is None
    reply = controller.update_environment({"min_fps": 25})
    assert reply["scenario"] == "balanced" and reply["previous"] == "accurate" and reply["switched"]
    assert reply["satisfied"] and "min_fps 25" in reply["reason"]
    assert reply["environment"]["min_fps"] == 25.0
    assert switch.calls == ["balanced"]
    reply = controller.update_environment({"battery": 0.9})  # min_fps is still known: no change
    assert not reply["switched"] and switch.calls == ["balanced"]
    reply = controller.update_environment({"min_fps": None})
    assert reply["scenario"] == "accurate" and switch.calls == ["balanced", "accurate"]


def test_explicit_switch_bypasses_policy_until_next_update() -> None:
    switch = Recorder()
    controller = PolicyController(three_scenarios(), switch)
    controller.update_environment({"min_fps": 25})
    reply = controller.request_switch("frugal", "socket")
    assert reply == {"scenario": "frugal", "previous": "balanced", "switched": True}
    status = controller.status()
    assert status["mode"] == "explicit" and status["last_switch_source"] == "socket" and status["scenario"] == "frugal"
    assert controller.request_switch("frugal", "socket")["switched"] is False
    # The next environment update is evaluated afresh and may switch away again.
    reply = controller.update_environment({"battery": 0.8})
    assert reply["scenario"] == "balanced" and controller.status()["mode"] == "policy"
    assert switch.calls == ["balanced", "frugal", "balanced"]
    assert controller.status()["switches_asked"] == 3


def test_unknown_scenario_and_bad_values_are_request_errors() -> None:
    controller = PolicyController(three_scenarios(), Recorder())
    with pytest.raises(RequestError) as caught:
        controller.request_switch("turbo", "socket")
    assert caught.value.code == "unknown_scenario" and "accurate, balanced, frugal" in caught.value.message
    with pytest.raises(RequestError) as caught:
        controller.update_environment({"battery": 2.0})
    assert caught.value.code == "bad_field" and "battery" in caught.value.message
    assert controller.environment.battery is None  # nothing was applied
    with pytest.raises(InputError):
        PolicyController(three_scenarios(), Recorder(), current="turbo")


def test_failed_switch_keeps_state_and_environment() -> None:
    switch = Recorder()
    controller = PolicyController(three_scenarios(), switch)
    switch.fail = True
    with pytest.raises(RequestError) as caught:
        controller.update_environment({"min_fps": 50})
    assert caught.value.code == "switch_failed" and "runtime is closed" in caught.value.message
    assert controller.scenario == "accurate" and controller.environment.min_fps == 50.0
    with pytest.raises(RequestError):
        controller.request_switch("balanced", "socket")
    assert controller.scenario == "accurate" and controller.status()["switches_asked"] == 0
    switch.fail = False
    assert controller.reevaluate()["scenario"] == "frugal" and switch.calls == ["frugal"]


def test_measurements_are_preferred_after_reevaluation() -> None:
    controller = PolicyController(three_scenarios(), Recorder())
    controller.update_environment({"min_fps": 20})
    assert controller.scenario == "balanced"
    controller.update_measurements("accurate", {"fps": 22.0})
    assert controller.scenario == "balanced"  # measurements alone do not switch
    reply = controller.reevaluate()
    assert reply["scenario"] == "accurate"
    assert controller.decision is not None and controller.decision.used["values"]["accurate"]["fps"] == "measured"
    assert controller.status()["measured"] == {"accurate": {"fps": 22.0}}
    controller.update_measurements("accurate", {"fps": None})
    assert controller.status()["measured"] == {}
    with pytest.raises(InputError):
        controller.update_measurements("accurate", {"speed": 1.0})
    with pytest.raises(InputError):
        controller.update_measurements("accurate", {"fps": -3.0})
    with pytest.raises(InputError):
        controller.update_measurements("turbo", {"fps": 3.0})


def test_status_reports_high_power_and_battery_rule() -> None:
    config = three_scenarios(battery=(BatteryRule(0.2, scenario="frugal"),), high_power=("accurate",))
    controller = PolicyController(config, Recorder())
    assert controller.status()["high_power"] is True
    controller.update_environment({"battery": 0.1})
    status = controller.status()
    assert status["scenario"] == "frugal" and status["high_power"] is False
    assert status["decision"]["used"]["battery_rule"] == 0.2
    assert status["environment"]["battery"] == 0.1


def test_concurrent_requests_keep_state_consistent() -> None:
    switch = Recorder()
    controller = PolicyController(three_scenarios(), switch)
    barrier = threading.Barrier(8)

    def worker(index: int) -> None:
        barrier.wait()
        for step in range(200):
            if (index + step) % 3 == 0:
                controller.request_switch(("accurate", "balanced", "frugal")[step % 3], "test")
            else:
                controller.update_environment({"min_fps": float((index * 7 + step) % 70)})

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    status = controller.status()
    assert status["switches_asked"] == len(switch.calls)
    assert switch.calls[-1] == status["scenario"]
    assert all(a != b for a, b in itertools.pairwise(switch.calls))  # never "switched" to the current one
