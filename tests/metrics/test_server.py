"""The ``/metrics`` endpoint (free loopback ports only), its errors, and the ``sbrs run`` CLI helpers."""

from __future__ import annotations

import argparse
import socket
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sbrs.app.config import AppConfig, MetricsConfig
from sbrs.errors import InputError
from sbrs.metrics import DEFAULT_PORT, MetricsObserver, MetricsServer, cli_arguments, metrics_from_args
from sbrs.metrics import start_metrics_server as start
from tests.control.helpers import three_scenarios

from .prom import REPO, free_port, http_get


def test_serves_the_registry_in_text_format(observer: MetricsObserver, metrics_server: MetricsServer) -> None:
    observer.started("full", {"arena_bytes": 2048})
    observer.frame_done("full", 0.003)
    observer.switch_done("full", "exit", 0.05)
    assert metrics_server.address == "127.0.0.1" and metrics_server.port > 0 and metrics_server.running
    assert metrics_server.url == f"http://127.0.0.1:{metrics_server.port}/metrics"
    status, body = http_get(metrics_server.url)
    assert status == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(body) for s in family.samples}
    assert samples[("sbrs_active_scenario", (("sbrs_active_scenario", "exit"),))] == 1
    assert samples[("sbrs_frames_total", (("scenario", "full"),))] == 1
    assert samples[("sbrs_scenario_switches_total", (("from", "full"), ("to", "exit")))] == 1
    assert samples[("sbrs_arena_bytes", ())] == 2048
    assert any(name == "process_resident_memory_bytes" for name, _ in samples)


def test_stop_closes_the_port(observer: MetricsObserver) -> None:
    server = start(observer.registry, 0)
    port = server.port
    server.stop()
    server.stop()  # idempotent
    assert not server.running
    with pytest.raises(OSError):
        http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    with start(observer.registry, port) as again:  # the port is free again
        assert http_get(again.url)[0] == 200
    assert not again.running


def test_a_port_in_use_is_one_line_naming_it(observer: MetricsObserver) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(InputError, match=f"port {port} on 127.0.0.1 is already in use") as info:
            start(observer.registry, port)
    assert "\n" not in str(info.value) and info.value.exit_code == 2


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "192.0.2.10", "example.com", ""])
def test_a_non_loopback_address_needs_allow_remote(observer: MetricsObserver, address: str) -> None:
    with pytest.raises(InputError, match=r"loopback|non-empty") as info:
        start(observer.registry, free_port(), address)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("port", [-1, 65536, "9464", 1.5, True, None])
def test_a_bad_port_is_an_input_error(observer: MetricsObserver, port: object) -> None:
    with pytest.raises(InputError, match="port must be an integer"):
        start(observer.registry, port, "127.0.0.1")  # type: ignore[arg-type]


@pytest.mark.parametrize("address", ["localhost", "127.0.0.1", "127.0.0.2"])
def test_loopback_names_are_allowed(observer: MetricsObserver, address: str) -> None:
    with start(observer.registry, 0, address) as server:
        assert server.url == f"http://{address}:{server.port}/metrics"
        assert http_get(server.url)[0] == 200


def test_ipv6_loopback(observer: MetricsObserver) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        server = start(observer.registry, 0, "::1")
    except InputError as exc:
        pytest.skip(f"cannot bind ::1 here: {exc}")
    with server:
        assert server.url.startswith("http://[::1]:")
        assert http_get(server.url)[0] == 200


def test_an_address_that_cannot_be_bound_is_an_input_error(observer: MetricsObserver) -> None:
    # allow_remote passes the loopback check; TEST-NET-1 is not an address of this machine
    with pytest.raises(InputError, match=r"cannot serve metrics on 192\.0\.2\.10"):
        start(observer.registry, 0, "192.0.2.10", allow_remote=True)


# -- CLI helpers -------------------------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(prog="sbrs run")
    cli_arguments(result)
    return result


def config(metrics: MetricsConfig | None = None) -> AppConfig:
    """A three-scenario app (no model files) with the given ``metrics:`` section."""
    return replace(three_scenarios(high_power=("accurate",)), metrics=metrics or MetricsConfig())


def test_cli_arguments_and_their_defaults() -> None:
    args = parser().parse_args([])
    assert (args.metrics_port, args.metrics_address, args.metrics_allow_remote) == (None, None, False)
    args = parser().parse_args(["--metrics-port", "9500", "--metrics-address", "::1", "--metrics-allow-remote"])
    assert (args.metrics_port, args.metrics_address, args.metrics_allow_remote) == (9500, "::1", True)
    assert "--metrics-port P" in parser().format_help()


@pytest.mark.parametrize("port", ["0", "65536", "http", "-5"])
def test_cli_rejects_bad_ports_as_usage_errors(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parser().parse_args(["--metrics-port", port])
    assert info.value.code == 2 and "--metrics-port" in capsys.readouterr().err


def test_no_port_means_no_server() -> None:
    observer, server = metrics_from_args(parser().parse_args([]), config())
    assert server is None and isinstance(observer, MetricsObserver)
    assert observer.registry.get_sample_value("sbrs_scenario_high_power", {"scenario": "accurate"}) == 1


def test_the_command_line_port_starts_a_server() -> None:
    port = free_port()
    observer, server = metrics_from_args(parser().parse_args(["--metrics-port", str(port)]), config())
    assert server is not None
    try:
        observer.frame_done("frugal", 0.01)
        status, body = http_get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and 'sbrs_frames_total{scenario="frugal"} 1.0' in body
    finally:
        server.stop()


def test_the_app_file_section_is_used_and_the_command_line_overrides_it() -> None:
    app_port, cli_port = free_port(), free_port()
    _, server = metrics_from_args(parser().parse_args([]), config(MetricsConfig(port=app_port)))
    assert server is not None and server.port == app_port
    server.stop()
    _, server = metrics_from_args(parser().parse_args(["--metrics-port", str(cli_port)]),
                                  config(MetricsConfig(port=app_port)))
    assert server is not None and server.port == cli_port
    server.stop()


def test_the_app_object_is_accepted_too() -> None:
    class App:  # sbrs.app.App has .config
        def __init__(self) -> None:
            self.config = config()

    observer, server = metrics_from_args(parser().parse_args([]), App())
    assert server is None and observer.scenarios == ("accurate", "balanced", "frugal")


def test_non_loopback_from_the_command_line_needs_allow_remote() -> None:
    args = parser().parse_args(["--metrics-port", str(free_port()), "--metrics-address", "0.0.0.0"])
    with pytest.raises(InputError, match=r"not a loopback address.*--metrics-allow-remote"):
        metrics_from_args(args, config())


def test_address_without_a_port_is_an_input_error() -> None:
    with pytest.raises(InputError, match="need --metrics-port"):
        metrics_from_args(parser().parse_args(["--metrics-address", "127.0.0.1"]), config())


@pytest.mark.parametrize("options", [["--metrics-address", "0.0.0.0"], ["--metrics-allow-remote"]])
def test_sbrs_run_refuses_an_address_or_allow_remote_without_a_port(tmp_path: Path, options: list[str],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Not a run without metrics: whoever typed --metrics-address expected an endpoint (exit 2, one line)."""
    from sbrs.cli import main

    app = tmp_path / "tiny.yaml"
    app.write_text((REPO / "apps" / "tiny.yaml").read_text())
    assert main(["run", str(app), "--frames", "1", "--no-socket", "-q", *options]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # (the app's first build may warn of a busy machine before it: the last line)
    assert captured.err.splitlines()[-1].startswith("sbrs: error: ") and "need --metrics-port" in captured.err


def test_busy_port_from_the_command_line_fails_before_running(observer: MetricsObserver) -> None:
    with start(observer.registry, 0) as busy, pytest.raises(InputError, match=f"port {busy.port} "):
        metrics_from_args(parser().parse_args(["--metrics-port", str(busy.port)]), config())


def test_default_port_matches_the_scrape_config() -> None:
    text = (Path(__file__).resolve().parents[2] / "monitoring" / "prometheus.yml").read_text()
    assert f"127.0.0.1:{DEFAULT_PORT}" in text


def test_idle_connections_hold_no_thread_each(observer: MetricsObserver) -> None:
    """Issue 14, row 4: 300 idle connections held 300 threads. Now a fixed pool serves, the rest wait or are
    closed, and a scrape still gets through."""
    import threading
    import time

    from sbrs.metrics import server as metrics_server_module

    server = start(observer.registry, 0)
    idle: list[socket.socket] = []
    try:
        before = threading.active_count()
        for _ in range(300):
            try:
                idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
            except OSError:
                break
        time.sleep(0.3)
        assert threading.active_count() - before <= metrics_server_module.WORKERS
        for connection in idle:
            connection.close()
        idle.clear()
        deadline = time.monotonic() + metrics_server_module.CONNECTION_TIMEOUT_S + 5
        while True:  # the workers free up once the idle sockets are closed (or time out)
            try:
                status, body = http_get(server.url)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert status == 200 and "sbrs_" in body
    finally:
        for connection in idle:
            connection.close()
        server.stop()
