"""``sbrs run`` with the environment from sensors, end to end (CI has no drone and no battery: the tests make them).

A stand-in flight controller (pymavlink's encoder) sends HEARTBEAT and BATTERY_STATUS on loopback UDP; power-supply
and thermal trees in a temporary folder hold the kernel's files. The run switches as the app's policy says, and the
JSON lines, ``sbrs status``, the metrics and the summary show it; garbage changes nothing and is counted; a file
that vanishes is logged once and its value ages out; a temperature hovering at its threshold switches once. A
stress test reads sensors at random moments while clients send requests and frames run. The drone example is run
once the same way, from accurate to frugal (12 s here when it builds the drone app first).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sbrs.cli import main
from sbrs.server.client import send_request
from tests.conftest import FORBIDDEN, REPO, REPO_BUILDS, modules_a_run_loads
from tests.control.mavlink_sender import free_tcp_port, free_udp_port, udp_flight_controller
from tests.control.sysfs_trees import power_supply, thermal_zone, write_attribute

LAYERS = """\
  - name: full
    seed: 1
    layers:
      - {name: stem, op: conv, out: 8, kernel: 3, pad: 1, act: relu}
      - {name: body, op: conv, out: 8, kernel: 3, pad: 1, act: relu}
      - {name: pool, op: gap}
      - {name: flat, op: flatten}
      - {name: head, op: fc, out: 4}
    characteristics: {accuracy: 90, fps: 10}
  - name: half
    seed: 1
    layers:
      - {name: stem, op: conv, out: 8, kernel: 3, pad: 1, act: relu}
      - {name: pool, op: gap}
      - {name: flat, op: flatten}
      - {name: head, op: fc, out: 4}
    characteristics: {accuracy: 85, fps: 30}
  - name: low
    seed: 1
    layers:
      - {name: stem, op: conv, out: 8, kernel: 3, pad: 1, act: relu}
      - {name: pool, op: gap}
      - {name: flat, op: flatten}
      - {name: low_head, op: fc, out: 4}
    characteristics: {accuracy: 80, fps: 60}
"""
#: An app of three small scenarios whose policy reads the battery and the temperature.
SENSED_APP = """\
name: sensed
input: {name: input, shape: [1, 3, 16, 16], dtype: float32}
initial: full
scenarios:
""" + LAYERS + """\
policy:
  battery: [{below: 0.5, scenario: half}, {below: 0.2, scenario: low}]
  temperature: [{above: 80, scenario: low}]
  hysteresis: {battery: 0.05, temperature: 5}
"""


@pytest.fixture(scope="module")
def sensed_app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SENSED_APP, built once for the module."""
    path = tmp_path_factory.mktemp("sensed") / "sensed.yaml"
    path.write_text(SENSED_APP)
    assert main(["build", str(path), "--json"]) == 0
    return path


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="sbrs-s", dir="/tmp"))  # Unix socket paths are short
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


class Run:
    """``sbrs run APP ARGS`` in a process of its own, JSON lines in stream order to a file, its control socket in
    ``sock_dir``; ``stop()`` sends SIGTERM and returns (status, stderr)."""

    def __init__(self, app: Path, folder: Path, sock_dir: Path, *args: str, first_frame_s: float = 60.0) -> None:
        self.out = folder / "frames.jsonl"
        self.err = folder / "stderr.txt"
        self.summary = folder / "summary.json"
        self.socket = sock_dir / "s.sock"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "sbrs.cli", "run", str(app), "--output", str(self.out), "--order", "stream",
                 "--socket", str(self.socket), "--summary", str(self.summary), *args],
                stdout=out, stderr=err, env=dict(os.environ))
        self.wait(lambda: self.out.stat().st_size > 0, "the first frame", timeout=first_frame_s)

    def wait(self, condition: Callable[[], object], what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"sbrs run ended ({self.process.returncode}) waiting for {what}: "
                                     f"{self.err.read_text()}")
            if condition():
                return
            time.sleep(0.02)
        raise AssertionError(f"no {what} within {timeout} s; status: {self.status()}")

    def status(self) -> dict[str, Any]:
        return send_request(self.socket, {"op": "status"})

    def sensor(self, index: int = 0) -> dict[str, Any]:
        return self.status()["sensors"][index]

    def settle(self, **expected: Any) -> dict[str, Any]:
        """Wait until ``sbrs status`` shows ``expected`` (``scenario=``, or the first sensor's ``value=``,
        ``malformed=``, ...; a callable is a test of the value) and return it."""
        status: dict[str, Any] = {}

        def holds(value: Any, wanted: Any) -> bool:
            return bool(wanted(value)) if callable(wanted) else value == wanted

        def shown() -> bool:
            nonlocal status
            status = self.status()
            sensor = status["sensors"][0]
            return all(holds((status if key == "scenario" else sensor)[key], wanted)
                       for key, wanted in expected.items())

        self.wait(shown, f"status showing {expected}")
        return status

    def frames_on(self, scenario: str) -> None:
        """Wait until a frame ran on ``scenario`` after it was asked for (its JSON line is written)."""
        self.wait(lambda: any(line["scenario"] == scenario for line in self.lines()[-50:]), f"a frame on {scenario}")

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.endswith("}")]

    def stop(self) -> tuple[int, str]:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)
        return self.process.returncode, self.err.read_text()

    def switches(self) -> list[tuple[str, str, str]]:
        return [(line["switch"]["old"], line["switch"]["new"], line["switch"]["source"])
                for line in self.lines() if "switch" in line]


def scenarios_in_order(lines: list[dict[str, Any]]) -> list[str]:
    """The scenarios frames ran on, each run of frames on one scenario once."""
    order: list[str] = []
    for line in lines:
        if not order or order[-1] != line["scenario"]:
            order.append(line["scenario"])
    return order


def metrics(port: int) -> dict[str, float]:
    """The samples of a metrics endpoint, ``name{labels}`` → value (labels as Prometheus writes them)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_a_flight_controller_drives_the_policy_over_udp(sensed_app: Path, tmp_path: Path, sock_dir: Path) -> None:
    port, metrics_port = free_udp_port(), free_tcp_port()
    spec = f"mavlink:udpin:127.0.0.1:{port}"
    run = Run(sensed_app, tmp_path, sock_dir, "--env-source", spec, "--metrics-port", str(metrics_port))
    autopilot, sender = udp_flight_controller(port)
    try:
        for percent, scenario in ((100, "full"), (60, "full"), (45, "half"), (30, "half"), (15, "low")):
            autopilot.send(autopilot.heartbeat(), autopilot.battery_status(percent))
            run.settle(value=percent / 100, scenario=scenario)
            run.frames_on(scenario)
        sender.sendto(b"\xfd\x09garbage, not MAVLink", ("127.0.0.1", port))  # on the same port
        status = run.settle(malformed=1)
        assert status["scenario"] == "low" and status["environment"]["battery"] == 0.15
        autopilot.send(autopilot.heartbeat(), autopilot.battery_status(5))
        status = run.settle(value=0.05)
        assert status["scenario"] == "low" and status["last_switch_source"] == "sensor:mavlink"
        samples = metrics(metrics_port)
    finally:
        sender.close()
        code, err = run.stop()
    assert code == 0, err
    assert run.switches() == [("full", "half", "sensor:mavlink"), ("half", "low", "sensor:mavlink")]
    assert scenarios_in_order(run.lines()) == ["full", "half", "low"]
    assert samples['sbrs_scenario_switches_total{from="full",to="half"}'] == 1
    assert samples['sbrs_scenario_switches_total{from="half",to="low"}'] == 1
    assert samples['sbrs_sensor_readings_total{result="accepted",sensor="mavlink"}'] == 6
    assert samples['sbrs_sensor_readings_total{result="malformed",sensor="mavlink"}'] == 1
    assert samples["sbrs_environment_battery_ratio"] == 0.05
    assert samples['sbrs_active_scenario{sbrs_active_scenario="low"}'] == 1
    summary = json.loads(run.summary.read_text())
    assert summary["switches"] == 2 and summary["sensors"][0]["malformed"] == 1
    assert f"sensors: {spec} 6 readings, 1 malformed" in err
    assert err.count("ignored a malformed reading") == 1 and "Traceback" not in err


def test_a_power_supply_tree_garbage_and_a_file_that_vanishes(sensed_app: Path, tmp_path: Path,
                                                              sock_dir: Path) -> None:
    folder = power_supply(tmp_path / "power_supply", "BAT0", capacity=80)
    run = Run(sensed_app, tmp_path, sock_dir, "--env-source", f"power_supply:{tmp_path / 'power_supply'}",
              "--env-poll", "0.05", "--env-max-age", "0.6")
    try:
        run.settle(value=0.8, scenario="full")
        write_attribute(folder / "capacity", 40)
        run.settle(value=0.4, scenario="half")
        run.frames_on("half")
        write_attribute(folder / "capacity", "garbage")
        status = run.settle(scenario="half", malformed=lambda count: count >= 3)
        assert status["environment"]["battery"] == 0.4  # ignored
        (folder / "capacity").unlink()
        status = run.settle(value=None, scenario="full")  # aged out: the battery is unknown now
        assert status["environment"]["battery"] is None and status["sensors"][0]["answering"] is False
        run.frames_on("full")
        time.sleep(0.3)  # more failed polls: said once
        write_attribute(folder / "capacity", 10)
        run.settle(value=0.1, scenario="low", answering=True)
        run.frames_on("low")
    finally:
        code, err = run.stop()
    assert code == 0, err
    assert run.switches() == [("full", "half", "sensor:power_supply"), ("half", "full", "sensor:power_supply"),
                              ("full", "low", "sensor:power_supply")]
    assert err.count("does not answer") == 1 and err.count("the battery is unknown now") == 1, err
    assert err.count("answers again") == 1 and err.count("ignored a malformed reading") == 1, err
    sensor = json.loads(run.summary.read_text())["sensors"][0]
    assert sensor["expired"] == 1 and sensor["failed"] >= 2 and sensor["malformed"] >= 3


def test_a_thermal_tree_in_the_app_file_and_its_hysteresis(tmp_path: Path, sock_dir: Path) -> None:
    zone = thermal_zone(tmp_path / "thermal", 0, 60.0)
    thermal_zone(tmp_path / "thermal", 1, 40.0, "gpu-thermal")
    app = tmp_path / "hot.yaml"
    app.write_text(SENSED_APP.replace("name: sensed", "name: hot") +
                   "environment: {sources: [thermal:./thermal], poll_s: 0.05}\n")
    run = Run(app, tmp_path, sock_dir)
    try:
        for celsius, scenario in ((79.0, "full"), (81.0, "low"), (77.0, "low"), (80.5, "low"), (75.5, "low"),
                                  (79.0, "low"), (74.5, "full"), (79.5, "full")):
            write_attribute(zone / "temp", int(celsius * 1000))
            run.settle(value=celsius, scenario=scenario)
        run.frames_on("full")
    finally:
        code, err = run.stop()
    assert code == 0, err
    assert run.switches() == [("full", "low", "sensor:thermal"), ("low", "full", "sensor:thermal")]
    assert "temperature from thermal:./thermal" in err


def test_min_fps_from_a_frame_source_with_a_frame_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``sbrs run`` gives the policy the frame rate of its frame source when the app says ``min_fps: source``:
    a 25 fps video file chooses, from the first frame, the most accurate scenario that meets 25 fps."""
    from tests.run.videos import make_video

    app = tmp_path / "paced.yaml"
    app.write_text(SENSED_APP.replace("name: sensed", "name: paced") + "environment: {min_fps: source}\n")
    clip = make_video(tmp_path / "clip.mp4", 32, 32, frames=3, fps=25)
    assert main(["run", str(app), "--source", str(clip), "--no-socket"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # declared fps: full 10, half 30, low 60; the most accurate meeting 25 fps is half, from the first frame
    assert [line["scenario"] for line in lines] == ["half"] * 3
    assert lines[0]["switch"]["source"] == "environment"
    assert main(["run", str(app), "--frames", "2", "--no-socket"]) == 0  # synthetic frames: no rate of their own
    captured = capsys.readouterr()
    assert "min_fps stays unknown" in captured.err
    assert {json.loads(line)["scenario"] for line in captured.out.splitlines()} == {"full"}


def test_bad_sources_stop_the_run_before_its_first_frame(sensed_app: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    for args, fragment in (
            (["--env-source", "gps"], "--env-source: unknown sensor source 'gps'"),
            (["--env-source", f"power_supply:{tmp_path}/none/"], "no such folder"),
            (["--env-source", "thermal", "--env-source", f"thermal:{tmp_path}/"], "two sources of the temperature"),
            (["--env-source", "mavlink:udpout:127.0.0.1:14550"], "sbrs only listens"),
            (["--env-max-age", "-1", "--env-source", "none"], "--env-max-age: expected seconds")):
        assert main(["run", str(sensed_app), "--frames", "1", "--no-socket", *args]) == 2, args
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1 and fragment in captured.err, captured.err


def test_a_run_with_sysfs_sensors_imports_no_socket_and_no_compile_stage(sensed_app: Path, tmp_path: Path) -> None:
    thermal_zone(tmp_path, 0, 50.0)
    power_supply(tmp_path / "ps", "BAT0", capacity=50)
    sources = ("--env-source", f"thermal:{tmp_path}", "--env-source", f"power_supply:{tmp_path / 'ps'}")
    assert modules_a_run_loads(sensed_app, extra=sources) == []
    compile_stage = tuple(name for name in FORBIDDEN if name.startswith(("onnx", "pydantic", "yaml", "deap",
                                                                        "sbrs.")))
    udp = ("--env-source", f"mavlink:udpin:127.0.0.1:{free_udp_port()}")
    assert modules_a_run_loads(sensed_app, forbidden=compile_stage, extra=udp) == []


def test_readings_at_random_moments_beside_requests_and_frames(sensed_app: Path, tmp_path: Path,
                                                              sock_dir: Path) -> None:
    """Three sources of environment values at once (a flight controller, a thermal zone, clients of the socket)
    and frames running: every request is answered, no frame is lost or repeated, nothing is logged as an error,
    every datagram is counted as what it was, and once the readings stop the run rests on the policy's choice."""
    port = free_udp_port()
    zone = thermal_zone(tmp_path / "thermal", 0, 50.0)
    run = Run(sensed_app, tmp_path, sock_dir, "--env-source", f"mavlink:udpin:127.0.0.1:{port}",
              "--env-source", f"thermal:{tmp_path / 'thermal'}", "--env-poll", "0.01", "--env-max-age", "60")
    autopilot, sender = udp_flight_controller(port)
    stop = threading.Event()
    sent = {"valid": 0, "garbage": 0}
    replies: list[dict[str, Any]] = []
    failures: list[BaseException] = []

    def flight_controller(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            if rng.random() < 0.1:  # garbage; its first byte starts no packet, so it is garbage for certain
                garbage = bytes([rng.randrange(0xFD)]) + bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
                sender.sendto(garbage, ("127.0.0.1", port))
                sent["garbage"] += 1
            else:
                autopilot.send(autopilot.battery_status(rng.randrange(0, 101)))
                sent["valid"] += 1
            time.sleep(rng.uniform(0, 0.01))

    def board(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            write_attribute(zone / "temp", rng.choice([rng.randrange(60_000, 95_000), "garbage"]))
            time.sleep(rng.uniform(0, 0.01))

    def client(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                request = rng.choice([{"op": "status"}, {"op": "switch", "scenario": rng.choice(["full", "low"])},
                                      {"op": "env", "battery": round(rng.random(), 2)},
                                      {"op": "env", "temperature": rng.uniform(60, 95)},
                                      {"op": "env", "min_fps": rng.choice([None, 20])}])
                replies.append(send_request(run.socket, request))
                time.sleep(rng.uniform(0, 0.01))
        except BaseException as error:  # the test's thread: reported, not lost
            failures.append(error)

    threads = [threading.Thread(target=target, args=(seed,)) for seed, target in
               enumerate((flight_controller, board, client, client))]
    try:
        for thread in threads:
            thread.start()
        time.sleep(3.0)
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        # at rest: cool, a full battery; each sensor's last two values differ, so the last one reaches the policy
        # whatever the clients' requests set meanwhile
        send_request(run.socket, {"op": "env", "min_fps": None})
        write_attribute(zone / "temp", 51_000)
        run.wait(lambda: run.status()["sensors"][1]["value"] == 51.0, "the zone at 51")
        write_attribute(zone / "temp", 50_000)
        autopilot.send(autopilot.battery_status(99))
        run.settle(value=0.99)
        autopilot.send(autopilot.battery_status(100))
        expected = sent["valid"] + 2
        run.wait(lambda: run.sensor(0)["readings"] + run.sensor(0)["malformed"] >= expected + sent["garbage"],
                 "every datagram counted", timeout=15)
        status = run.settle(value=1.0)
        run.wait(lambda: run.status()["sensors"][1]["value"] == 50.0, "the zone at rest")
        status = run.status()
    finally:
        stop.set()
        sender.close()
        code, err = run.stop()
    assert failures == [] and code == 0, (failures, err)
    assert replies and all(reply["ok"] for reply in replies), [r for r in replies if not r["ok"]][:3]
    battery = status["sensors"][0]
    assert battery["readings"] == sent["valid"] + 2 and battery["malformed"] == sent["garbage"]
    assert status["scenario"] == "full" and status["decision"]["reason"].startswith("ranked by")
    lines = run.lines()
    assert [line["frame"] for line in lines] == list(range(len(lines)))  # none lost, none twice
    assert lines[-1]["scenario"] == "full"
    assert not re.search(r"\berror\b|Traceback", err, re.IGNORECASE), err


@REPO_BUILDS  # builds apps/drone.yaml inside the repository when it has no build
def test_drone_from_accurate_to_frugal_over_mavlink(tmp_path: Path, sock_dir: Path) -> None:
    """The issue's check: a MAVLink battery source drives apps/drone.yaml's policy from accurate to frugal over
    loopback UDP, the battery falling from 100 % to 5 %; the JSON lines and the metrics show each switch."""
    port, metrics_port = free_udp_port(), free_tcp_port()
    app = REPO / "apps" / "drone.yaml"
    run = Run(app, tmp_path, sock_dir, "--env-source", f"mavlink:udpin:127.0.0.1:{port}",
              "--metrics-port", str(metrics_port), first_frame_s=900)  # it builds the app first when needed
    autopilot, sender = udp_flight_controller(port)
    decisions = []
    try:
        for percent in range(100, 0, -5):
            autopilot.send(autopilot.heartbeat(), autopilot.battery_status(percent))
            status = run.settle(value=percent / 100)
            decisions.append((percent, status["scenario"]))
            run.frames_on(status["scenario"])
        samples = metrics(metrics_port)
    finally:
        sender.close()
        code, err = run.stop()
    assert code == 0, err
    # drone.yaml: accurate above 40 %, then ranked by r5 (memory and energy first), frugal below 15 %
    assert all(scenario == "accurate" for percent, scenario in decisions if percent >= 45)
    assert all(scenario == "frugal" for percent, scenario in decisions if percent <= 10)
    visited = scenarios_in_order([{"scenario": scenario} for _, scenario in decisions])
    assert visited[0] == "accurate" and visited[-1] == "frugal"
    switches = run.switches()
    assert switches == [(old, new, "sensor:mavlink") for old, new in itertools.pairwise(visited)]
    assert scenarios_in_order(run.lines()) == visited
    for old, new, _ in switches:
        assert samples[f'sbrs_scenario_switches_total{{from="{old}",to="{new}"}}'] >= 1
    assert samples["sbrs_environment_battery_ratio"] == 0.05
    assert samples['sbrs_active_scenario{sbrs_active_scenario="frugal"}'] == 1
