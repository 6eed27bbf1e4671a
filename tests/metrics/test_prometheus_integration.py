"""A real Prometheus server scrapes sbrs metrics (1 s scrape interval) and its HTTP API reports what happened.

(a) ``MetricsObserver`` plus ``start_metrics_server`` driven directly by the test: start, frames, a low battery
    on a high-power scenario (the alert rule goes pending), a switch, a rejected request.
(b) End to end: ``sbrs run apps/tiny.yaml --socket S --metrics-port P`` as a subprocess, switched with
    ``sbrs switch`` over the socket. Skipped until ``sbrs run`` has the ``--metrics-port`` and ``--socket`` options.

Both need the ``prometheus`` binary (skipped with a reason when it is absent; CI installs it). Ports are free
loopback ports chosen at run time, temporary folders are removed, every process is stopped by the test, and each
test gives up after ``DEADLINE_S`` seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbrs.metrics import MetricsObserver, MetricsServer
from tests.conftest import REPO_BUILDS

from .prom import DEADLINE_S, MONITORING, REPO, PrometheusServer, free_port, http_get, requires_prometheus, wait_for

# one test runs apps/tiny.yaml, building it inside the repository (tests/conftest.py)
pytestmark = [requires_prometheus, REPO_BUILDS]

SBRS = [sys.executable, "-c", "import sys; from sbrs.cli import main; sys.exit(main())"]


def _value(prom: PrometheusServer, expr: str, expected: float) -> bool:
    value = prom.value(expr)
    return value is not None and abs(value - expected) < 1e-9


def test_prometheus_scrapes_the_observer(tmp_path: Path, observer: MetricsObserver,
                                         metrics_server: MetricsServer) -> None:
    deadline = time.monotonic() + DEADLINE_S
    observer.started("full", {"arena_bytes": 8192, "params_bytes": 65536, "naive_bytes": 40960,
                              "lower_bound_bytes": 8192})
    for seconds in (0.002, 0.003, 0.004):
        observer.frame_done("full", seconds)
    observer.environment_changed({"battery": 0.1, "min_fps": 20.0, "energy_budget_j": None})

    target = f"127.0.0.1:{metrics_server.port}"
    with PrometheusServer(tmp_path / "prometheus", target, rule_files=(MONITORING / "alerts.yml",)) as prom:
        def describe() -> str:
            return prom.log_tail()

        wait_for(lambda: _value(prom, f'up{{job="sbrs", instance="{target}"}}', 1), deadline, "the target up",
                 describe)
        wait_for(lambda: _value(prom, 'sbrs_active_scenario{sbrs_active_scenario="full"}', 1), deadline,
                 "active scenario full", describe)
        assert _value(prom, 'sbrs_frames_total{scenario="full"}', 3)
        assert _value(prom, "sbrs_arena_bytes", 8192) and _value(prom, "sbrs_parameters_bytes", 65536)
        assert _value(prom, "sbrs_environment_battery_ratio", 0.1)
        assert math.isnan(prom.query("sbrs_environment_energy_budget_joules")[0][1])  # unknown
        info = prom.query("sbrs_build_info")
        assert len(info) == 1 and info[0][0]["providers"] == "CPUExecutionProvider"
        # The low-battery rule sees the high-power scenario "full" (it fires after its `for:` of 30 s).
        alert = wait_for(lambda: prom.query('ALERTS{alertname="SbrsHighPowerScenarioOnLowBattery"}'), deadline,
                         "the low-battery alert to be pending", describe)
        assert alert[0][0]["scenario"] == "full" and alert[0][0]["alertstate"] in ("pending", "firing")

        observer.request_handled("switch", "accepted")
        observer.state_changed("switching", "full")
        observer.switch_done("full", "skip", 0.02)
        observer.state_changed("running", "skip")
        observer.request_handled("switch", "rejected:unknown_scenario")
        observer.frame_done("skip", 0.001)
        observer.frame_done("skip", 0.001)

        wait_for(lambda: _value(prom, 'sbrs_active_scenario{sbrs_active_scenario="skip"}', 1), deadline,
                 "active scenario skip", describe)
        wait_for(lambda: _value(prom, 'sbrs_scenario_switches_total{from="full", to="skip"}', 1), deadline,
                 "the switch full → skip", describe)
        assert _value(prom, 'sbrs_active_scenario{sbrs_active_scenario="full"}', 0)
        assert _value(prom, 'sbrs_frames_total{scenario="skip"}', 2)
        assert _value(prom, 'sbrs_switch_requests_total{result="rejected", reason="unknown_scenario"}', 1)
        assert _value(prom, 'sbrs_switch_requests_total{result="accepted", reason="none"}', 1)
        assert _value(prom, "sbrs_switch_response_delay_seconds_count", 1)
        assert _value(prom, 'sbrs_switch_response_delay_seconds_bucket{le="0.025"}', 1)
        # "skip" is not high-power: the alert goes away.
        wait_for(lambda: not prom.query('ALERTS{alertname="SbrsHighPowerScenarioOnLowBattery"}'), deadline,
                 "the low-battery alert to clear", describe)

        rules = [rule for group in prom.api("rules")["groups"] for rule in group["rules"]]
        assert len(rules) == 5 and all(rule["health"] == "ok" for rule in rules), rules
        for expr in dashboard_queries():
            prom.query(expr)  # every dashboard query is valid PromQL (raises on an error answer)


def dashboard_queries() -> list[str]:
    """The Grafana dashboard's queries with its variables filled in as Grafana would."""
    board = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    queries = [target["expr"] for panel in board["panels"] for target in panel.get("targets", [])]
    return [query.replace("$__rate_interval", "1m").replace("$job", ".*").replace("$instance", ".*")
            for query in queries]


# -- (b) end to end with `sbrs run` --------------------------------------------------------------------------

def missing_run_options(*options: str) -> list[str]:
    """The options of ``options`` that ``sbrs run --help`` does not list."""
    from sbrs.cli import main

    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
        main(["run", "--help"])
    return [option for option in options if option not in text.getvalue()]


MISSING = missing_run_options("--metrics-port", "--socket")


@contextlib.contextmanager
def sbrs_run(app: Path, socket_path: Path, port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``sbrs run`` in the background (frames to /dev/null); SIGTERM, then SIGKILL, on the way out."""
    with log.open("wb") as err:
        process = subprocess.Popen([*SBRS, "run", str(app), "--socket", str(socket_path), "--metrics-port", str(port)],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


@pytest.mark.skipif(bool(MISSING), reason=f"`sbrs run` has no {' / '.join(MISSING)} option yet (metrics wiring of "
                                          "sbrs run not landed)")
def test_end_to_end_sbrs_run_switch_seen_by_prometheus(tmp_path: Path) -> None:
    deadline = time.monotonic() + DEADLINE_S
    socket_dir = Path(tempfile.mkdtemp(prefix="sbrs-m-"))  # short: Unix socket paths are limited to ~100 bytes
    try:
        socket_path = socket_dir / "tiny.sock"
        port = free_port()
        log = tmp_path / "sbrs-run.log"
        with sbrs_run(REPO / "apps" / "tiny.yaml", socket_path, port, log) as run:
            def describe() -> str:
                state = "running" if run.poll() is None else f"exited with {run.returncode}"
                return f"sbrs run {state}; its stderr:\n{log.read_text(errors='replace')[-3000:]}"

            def endpoint_up() -> bool:
                if run.poll() is not None:
                    pytest.fail(describe())
                return http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)[0] == 200 and socket_path.exists()

            wait_for(endpoint_up, deadline, "the metrics endpoint and the socket of sbrs run", describe)
            target = f"127.0.0.1:{port}"
            with PrometheusServer(tmp_path / "prometheus", target) as prom:
                wait_for(lambda: _value(prom, 'sbrs_active_scenario{sbrs_active_scenario="full"}', 1), deadline,
                         "Prometheus to see scenario full active", describe)
                wait_for(lambda: (prom.value('sbrs_frames_total{scenario="full"}') or 0) > 0, deadline,
                         "frames on full", describe)

                switch = subprocess.run([*SBRS, "switch", "skip", "--socket", str(socket_path)], capture_output=True,
                                        text=True, timeout=30, cwd=REPO, check=False)
                assert switch.returncode == 0, switch.stdout + switch.stderr
                rejected = subprocess.run([*SBRS, "switch", "no-such-scenario", "--socket", str(socket_path)],
                                          capture_output=True, text=True, timeout=30, cwd=REPO, check=False)
                assert rejected.returncode == 2, rejected.stdout + rejected.stderr

                wait_for(lambda: _value(prom, 'sbrs_active_scenario{sbrs_active_scenario="skip"}', 1), deadline,
                         "Prometheus to see scenario skip active", describe)
                wait_for(lambda: (prom.value('sbrs_scenario_switches_total{from="full", to="skip"}') or 0) >= 1,
                         deadline, "the switch full → skip in sbrs_scenario_switches_total", describe)
                wait_for(lambda: (prom.value('sbrs_frames_total{scenario="skip"}') or 0) > 0, deadline,
                         "frames on skip", describe)
                wait_for(lambda: (prom.value("sbrs_switch_response_delay_seconds_count") or 0) >= 1, deadline,
                         "a switch response delay", describe)
                wait_for(lambda: (prom.value('sbrs_switch_requests_total{result="accepted", reason="none"}') or 0)
                         >= 1, deadline, "the accepted switch request", describe)
                wait_for(lambda: (prom.value('sum(sbrs_switch_requests_total{result="rejected"})') or 0) >= 1,
                         deadline, "the rejected switch request", describe)
                arena = prom.value("sbrs_arena_bytes")
                assert arena is not None and arena > 0, "sbrs run reports arena_bytes in its started facts"

            run.send_signal(signal.SIGTERM)
            assert run.wait(timeout=30) == 0, describe()
            assert not socket_path.exists(), "sbrs run removes its socket when it stops"
            with pytest.raises(OSError):
                http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)
