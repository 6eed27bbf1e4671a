"""``EnvironmentSensors``: every reading takes the path of an ``env`` request (policy, hysteresis, the switch's source,
observers); garbage is counted, a sensor that stops answering is logged once and its value ages out; the thread
starts, survives and stops. Rounds are driven with a clock of the test's own (``poll(now)``), without the thread,
except where the thread itself is tested. ``min_fps: source`` through its seam, with a stand-in frame source."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sbrs.app.config import AppConfig, BatteryRule, TemperatureRule
from sbrs.app.environment import EnvironmentConfig, parse_env_source
from sbrs.control import PolicyController
from sbrs.control.readings import Batch, SensorFailure
from sbrs.control.sensors import (
    EnvironmentSensors,
    environment_for_run,
    initial_environment,
    open_sensors,
    source_frame_rate,
)
from sbrs.errors import InputError
from sbrs.runtime.events import Observers
from tests.control.helpers import three_scenarios
from tests.control.sysfs_trees import power_supply, thermal_zone, write_attribute

LOGGER = "sbrs.control.sensors"


class Switches:
    """The runtime's ``switch(name, source)``, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, name: str, source: str) -> None:
        self.calls.append((name, source))


class Events:
    """An observer recording ``environment_changed`` and ``sensor_reading``."""

    def __init__(self) -> None:
        self.environments: list[dict[str, Any]] = []
        self.readings: list[tuple[str, str]] = []

    def environment_changed(self, values: Mapping[str, Any]) -> None:
        self.environments.append(dict(values))

    def sensor_reading(self, kind: str, result: str) -> None:
        self.readings.append((kind, result))


def policed() -> AppConfig:
    """accurate / balanced / frugal: battery below 0.5 balanced, below 0.2 frugal; above 80 °C frugal."""
    config = three_scenarios(battery=(BatteryRule(0.2, scenario="frugal"), BatteryRule(0.5, scenario="balanced")))
    return replace(config, policy=replace(config.policy, temperature=(TemperatureRule(80.0, scenario="frugal"),)))


def hub_for(tmp_path: Path, *specs: str, max_age_s: float | None = 1.0) -> tuple[EnvironmentSensors, Switches,
                                                                                  Events, PolicyController]:
    switches, events = Switches(), Events()
    controller = PolicyController(policed(), switches, switch_source=True)
    hub = EnvironmentSensors(controller, open_sensors(parse_env_source(spec) for spec in specs), poll_s=0.1,
                             max_age_s=max_age_s, observers=Observers([events]), clock=lambda: 0.0)
    return hub, switches, events, controller


def test_readings_take_the_path_of_an_env_request(tmp_path: Path) -> None:
    bat = power_supply(tmp_path / "ps", "BAT0", capacity=90)
    thermal_zone(tmp_path / "th", 0, 45.0)
    hub, switches, events, controller = hub_for(tmp_path, f"power_supply:{tmp_path / 'ps'}",
                                                f"thermal:{tmp_path / 'th'}")
    hub.poll(0.0)
    assert controller.environment.battery == 0.9 and controller.environment.temperature == 45.0
    assert switches.calls == [] and events.environments[-1]["battery"] == 0.9
    write_attribute(bat / "capacity", 40)
    hub.poll(0.1)
    assert switches.calls == [("balanced", "sensor:power_supply")]
    status = controller.status()
    assert status["scenario"] == "balanced" and status["last_switch_source"] == "sensor:power_supply"
    assert "battery 0.4 is below 0.5" in status["decision"]["reason"]
    assert [item["value"] for item in status["sensors"]] == [0.4, 45.0]  # sbrs status shows the sensors
    write_attribute(bat / "capacity", 10)
    hub.poll(0.2)
    assert switches.calls[-1] == ("frugal", "sensor:power_supply")
    assert events.readings.count(("power_supply", "accepted")) == 3
    assert events.readings.count(("thermal", "accepted")) == 3
    assert events.environments[-1] == controller.environment.to_dict()


def test_an_unchanged_reading_refreshes_its_age_and_leaves_an_explicit_switch(tmp_path: Path) -> None:
    power_supply(tmp_path, "BAT0", capacity=90)
    hub, _, events, controller = hub_for(tmp_path, f"power_supply:{tmp_path}")
    hub.poll(0.0)
    forwarded = len(events.environments)
    controller.request_switch("frugal", "socket")
    for step in range(1, 30):  # 2.9 s of unchanged readings: never older than max_age_s
        hub.poll(step * 0.1)
    assert controller.scenario == "frugal" and controller.status()["mode"] == "explicit"
    assert len(events.environments) == forwarded and hub.status()[0]["expired"] == 0
    write_attribute(tmp_path / "BAT0" / "capacity", 89)  # a changed value is an environment update
    hub.poll(3.0)
    assert controller.scenario == "accurate" and controller.status()["mode"] == "policy"


def test_garbage_is_ignored_counted_and_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = power_supply(tmp_path, "BAT0", capacity=40)
    hub, switches, events, controller = hub_for(tmp_path, f"power_supply:{tmp_path}")
    hub.poll(0.0)
    calls = list(switches.calls)
    write_attribute(folder / "capacity", "0x1F")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for step in range(1, 6):
            hub.poll(step * 0.1)
    assert switches.calls == calls and controller.environment.battery == 0.4
    assert events.readings.count(("power_supply", "malformed")) == 5
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "ignored a malformed reading" in warnings[0] and "'0x1F'" in warnings[0]
    assert hub.summary()[0] | {"age_s": None} == {
        "source": f"power_supply:{tmp_path}", "field": "battery", "value": 0.4, "age_s": None, "answering": True,
        "readings": 1, "malformed": 5, "failed": 0, "expired": 0}


def test_a_vanished_file_is_logged_once_and_its_value_ages_out(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    folder = power_supply(tmp_path, "BAT0", capacity=10)
    hub, switches, events, controller = hub_for(tmp_path, f"power_supply:{tmp_path}", max_age_s=1.0)
    hub.poll(0.0)
    assert controller.scenario == "frugal"
    (folder / "capacity").unlink()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for step in range(1, 10):
            hub.poll(step * 0.1)
        assert controller.environment.battery == 0.1  # not yet a second old
        hub.poll(1.05)
        hub.poll(1.2)
    assert controller.environment.battery is None and controller.scenario == "accurate"
    assert switches.calls[-1] == ("accurate", "sensor:power_supply")
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(messages) == 2, messages
    assert "does not answer" in messages[0] and "forgotten 1 s after its last reading" in messages[0]
    assert "no reading for 1.05 s: the battery is unknown now" in messages[1]
    counts = hub.status()[0]
    assert (counts["failed"], counts["expired"], counts["answering"], counts["value"]) == (11, 1, False, None)
    assert events.readings.count(("power_supply", "expired")) == 1
    write_attribute(folder / "capacity", 10)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        hub.poll(1.3)
    assert "answers again" in caplog.records[-1].getMessage()
    assert controller.environment.battery == 0.1 and controller.scenario == "frugal"  # forwarded again


def test_a_value_aged_out_leaves_one_given_since_by_a_request(tmp_path: Path) -> None:
    folder = power_supply(tmp_path, "BAT0", capacity=70)
    hub, _, _, controller = hub_for(tmp_path, f"power_supply:{tmp_path}", max_age_s=0.5)
    hub.poll(0.0)
    (folder / "capacity").unlink()
    controller.update_environment({"battery": 0.3})  # sbrs env --battery 0.3
    hub.poll(1.0)
    assert controller.environment.battery == 0.3 and hub.status()[0]["value"] is None


def test_a_temperature_hovering_at_its_threshold_switches_once(tmp_path: Path) -> None:
    zone = thermal_zone(tmp_path, 0, 60.0)
    hub, switches, _, _ = hub_for(tmp_path, f"thermal:{tmp_path}")
    for step, celsius in enumerate((79.0, 81.0, 77.5, 80.5, 76.0, 79.9, 75.5, 81.0, 78.0, 74.0, 79.0, 80.0)):
        write_attribute(zone / "temp", int(celsius * 1000))
        hub.poll(step * 0.1)
    assert switches.calls == [("frugal", "sensor:thermal"), ("accurate", "sensor:thermal")]


def test_an_unexpected_error_is_logged_once_and_the_others_go_on(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        spec = parse_env_source("thermal:/nowhere")
        polled = True

        def read(self) -> Batch:
            raise ZeroDivisionError("a bug")

        def fileno(self) -> None:
            return None

        def reopen(self) -> None:
            return None

        def close(self) -> None:
            return None

    power_supply(tmp_path, "BAT0", capacity=30)
    controller = PolicyController(policed(), Switches(), switch_source=True)
    battery = open_sensors([parse_env_source(f"power_supply:{tmp_path}")])[0]
    hub = EnvironmentSensors(controller, [Broken(), battery], poll_s=0.1, max_age_s=None)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        hub.poll(0.0)
        hub.poll(0.1)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == ["sbrs run: sensor thermal:/nowhere: ZeroDivisionError: a bug (the sensors go on)"]
    assert controller.environment.battery == 0.3


def test_a_silent_link_is_logged_once_and_opened_again_when_broken(caplog: pytest.LogCaptureFixture) -> None:
    class Link:
        spec = parse_env_source("mavlink:tcp:127.0.0.1:5760")
        polled = False
        opens = 0
        refuse = False

        def read(self) -> Batch:
            raise SensorFailure("the other side closed the link")

        def fileno(self) -> None:
            return None

        def reopen(self) -> None:
            self.opens += 1
            if self.refuse:
                raise SensorFailure("cannot connect")

        def close(self) -> None:
            return None

    link = Link()
    controller = PolicyController(policed(), Switches(), switch_source=True)
    link.fileno = lambda: 7  # type: ignore[method-assign]  # open (the hub opens a link that is not)
    hub = EnvironmentSensors(controller, [link], poll_s=0.1, max_age_s=1.0, clock=lambda: 0.0)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for step in range(80):
            hub.poll(step * 0.1)  # 5 s without a word (whatever the period): silent, said once
        assert [r.getMessage() for r in caplog.records] == [
            "sbrs run: sensor mavlink:tcp:127.0.0.1:5760: nothing from it for 5.1 s; its battery is forgotten 1 s "
            "after its last reading"]
        hub.receive(0, 8.0)  # the link breaks
        link.refuse = True
        hub.poll(8.1)
        hub.poll(8.2)
        link.refuse = False
        hub.poll(8.3)
    assert link.opens == 3 and hub.status()[0]["failed"] == 3
    assert caplog.records[-1].getMessage() == "sbrs run: sensor mavlink:tcp:127.0.0.1:5760: open again"


def test_the_thread_reads_at_its_period_and_stops_at_once(tmp_path: Path) -> None:
    folder = power_supply(tmp_path, "BAT0", capacity=90)
    switches = Switches()
    controller = PolicyController(policed(), switches, switch_source=True)
    hub = EnvironmentSensors(controller, open_sensors([parse_env_source(f"power_supply:{tmp_path}")]),
                             poll_s=0.02, max_age_s=None)
    with hub:
        assert controller.environment.battery == 0.9  # the first poll ran before start returned
        write_attribute(folder / "capacity", 15)
        deadline = time.monotonic() + 10
        while not switches.calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert switches.calls == [("frugal", "sensor:power_supply")]
        assert any(t.name == "sbrs-sensors" for t in threading.enumerate())
    slow = EnvironmentSensors(controller, open_sensors([parse_env_source(f"power_supply:{tmp_path}")]),
                              poll_s=60.0, max_age_s=None)
    slow.start()
    began = time.monotonic()
    slow.stop()
    assert time.monotonic() - began < 2.0  # woken, not waiting out its minute
    assert not any(t.name == "sbrs-sensors" for t in threading.enumerate())


class PacedCamera:
    """A stand-in for a frame source with a frame rate of its own (a camera, a video file)."""

    fps = 25.0


def test_min_fps_from_the_frame_source(caplog: pytest.LogCaptureFixture) -> None:
    assert source_frame_rate(PacedCamera()) == 25.0
    for frames in (object(), [1, 2], type("Odd", (), {"fps": float("nan")})(), type("No", (), {"fps": True})()):
        assert source_frame_rate(frames) is None
    source = EnvironmentConfig(min_fps="source")
    assert initial_environment(source, 25.0) == {"min_fps": 25.0}
    assert initial_environment(EnvironmentConfig(min_fps=12.0), 25.0) == {"min_fps": 12.0}
    assert initial_environment(EnvironmentConfig(), 25.0) == {}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert initial_environment(source, None) == {}
    assert "the frame source has no frame rate of its own" in caplog.records[0].getMessage()

    switches, events = Switches(), Events()
    controller = PolicyController(policed(), switches, switch_source=True)
    hub = environment_for_run(source, controller, Observers([events]), source_fps=source_frame_rate(PacedCamera()))
    assert hub is None  # no sensors, but min_fps reached the policy as an env request does
    assert controller.environment.min_fps == 25.0 and switches.calls == [("balanced", "environment")]
    assert events.environments[-1]["min_fps"] == 25.0


def test_command_line_sources_replace_the_app_files(tmp_path: Path) -> None:
    power_supply(tmp_path / "ps", "BAT0", capacity=90)
    thermal_zone(tmp_path / "th", 0, 30.0)
    config = EnvironmentConfig(sources=(parse_env_source(f"thermal:{tmp_path / 'th'}"),), poll_s=5.0, max_age_s=None)
    controller = PolicyController(policed(), Switches(), switch_source=True)
    hub = environment_for_run(config, controller, sources=[f"power_supply:{tmp_path / 'ps'}"], poll_s=0.5,
                              max_age_s=3.0)
    assert hub is not None and [s.spec.kind for s in hub.sensors] == ["power_supply"]
    assert (hub.poll_s, hub.max_age_s) == (0.5, 3.0)
    assert environment_for_run(config, controller, sources=["none"]) is None
    with pytest.raises(InputError, match=r"--env-poll: expected seconds in \[0.01, 86400\], got 0"):
        environment_for_run(config, controller, poll_s=0)
    with pytest.raises(InputError, match=r"^--env-source: power_supply:.*: no such folder$"):
        environment_for_run(config, controller, sources=[f"power_supply:{tmp_path / 'nope'}/"])
    missing = EnvironmentConfig(sources=(parse_env_source(f"thermal:{tmp_path / 'nope'}/"),))
    with pytest.raises(InputError, match=r"^environment\.sources: thermal:.*: no such folder$"):
        environment_for_run(missing, controller)  # the app file's: named as its field
