"""``sbrs switch|env|status`` through ``add_client_commands``, run by ``sbrs.cli.main`` against a fake controller."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sbrs import cli
from sbrs.server import Server, add_client_commands
from tests.server.fakes import FakeController

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def controller() -> FakeController:
    return FakeController()


@pytest.fixture
def server(controller: FakeController, sock_dir: Path) -> Iterator[Server]:
    with Server(controller, sock_dir / "s.sock", listen="127.0.0.1:0") as running:
        yield running


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """Run ``sbrs ARGS...`` with a parser holding only the client commands; (status, stdout, stderr)."""

    def build_parser(command: str | None = None) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog="sbrs")
        add_client_commands(parser.add_subparsers(dest="command", required=True))
        return parser

    monkeypatch.setattr(cli, "build_parser", build_parser)

    def run_cli(*argv: str) -> tuple[int, str, str]:
        status = cli.main(list(argv))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run_cli


def test_switch(run: Run, server: Server, controller: FakeController) -> None:
    status, out, err = run("switch", "eco", "--socket", str(server.socket_path))
    assert (status, out, err) == (0, "switched to eco (was accurate)\n", "")
    assert controller.switches == [("eco", "socket")]
    status, out, _ = run("switch", "eco", "--socket", str(server.socket_path), "--json")
    assert status == 0 and json.loads(out) == {"ok": True, "op": "switch", "scenario": "eco", "previous": "eco",
                                               "switched": False}


def test_error_reply_exits_2_with_one_line(run: Run, server: Server) -> None:
    status, out, err = run("switch", "turbo", "--socket", str(server.socket_path))
    assert status == 2 and out == ""
    assert err == 'sbrs: error: unknown scenario "turbo" (scenarios: accurate, eco, frugal, broken)\n'
    status, out, err = run("env", "--battery", "1.5", "--socket", str(server.socket_path), "--json")
    assert status == 2 and json.loads(out)["code"] == "bad_field"
    assert err.startswith("sbrs: error: env: battery: battery level must be in [0, 1]") and err.count("\n") == 1


def test_env(run: Run, server: Server, controller: FakeController) -> None:
    status, out, _ = run("env", "--battery", "0.3", "--min-fps", "20", "--energy-budget", "0.1",
                         "--requirements", "accuracy=0.5, energy=0.5", "--socket", str(server.socket_path))
    assert status == 0 and out == "scenario accurate (unchanged): fake\n"
    update = controller.updates[-1]
    assert (update["battery"], update["min_fps"], update["energy_budget_j"]) == (0.3, 20.0, 0.1)
    assert update["requirements"].energy == 0.5
    assert run("env", "--clear", "min_fps", "--socket", str(server.socket_path))[0] == 0
    assert controller.updates[-1] == {"min_fps": None}


@pytest.mark.parametrize(("args", "fragment"), [
    ((), "give at least one of --battery"),
    (("--requirements", "accuracy"), "--requirements: expected NAME=WEIGHT"),
    (("--requirements", "accuracy=high"), "--requirements: expected NAME=WEIGHT"),
    (("--requirements", "accuracy=0.5"), "requirement weights must sum to 1"),
    # JSON has no NaN: the server could only say "NaN is not valid JSON", naming no option
    (("--battery", "nan"), "--battery: expected a finite number, got nan"),
    (("--min-fps", "inf"), "--min-fps: expected a finite number, got inf"),
    (("--requirements", "accuracy=nan"), "--requirements: expected a finite number, got nan"),
])
def test_env_bad_options_exit_2(run: Run, server: Server, args: tuple[str, ...], fragment: str) -> None:
    status, _, err = run("env", *args, "--socket", str(server.socket_path))
    assert status == 2 and fragment in err and err.count("\n") == 1


@pytest.mark.parametrize("timeout", ["-1", "0", "nan", "inf"])
def test_bad_timeout_exits_2_naming_it(run: Run, server: Server, timeout: str) -> None:
    """A timeout socket.settimeout refuses was an internal error (ValueError), 0 a non-blocking socket."""
    status, out, err = run("status", "--timeout", timeout, "--socket", str(server.socket_path))
    assert status == 2 and out == ""
    assert err.startswith("sbrs: error: --timeout: expected a finite number > 0") and err.count("\n") == 1


def test_status(run: Run, server: Server) -> None:
    run("switch", "frugal", "--socket", str(server.socket_path))
    status, out, _ = run("status", "--socket", str(server.socket_path))
    assert status == 0
    assert out.splitlines()[0] == "scenario: frugal (mode fake, scenarios: accurate, eco, frugal, broken)"
    assert "requests: 1 accepted, 0 rejected" in out
    status, out, _ = run("status", "--socket", str(server.socket_path), "--json")
    reply = json.loads(out)
    assert status == 0 and reply["scenario"] == "frugal" and reply["requests"]["accepted_total"] == 2


def test_env_temperature_and_the_sensors_in_status(run: Run, server: Server, controller: FakeController) -> None:
    assert run("env", "--temperature", "71.5", "--socket", str(server.socket_path))[0] == 0
    assert controller.updates[-1] == {"temperature": 71.5}
    assert run("env", "--clear", "temperature", "--socket", str(server.socket_path))[0] == 0
    assert controller.updates[-1] == {"temperature": None}
    controller.sensors = [
        {"source": "thermal", "field": "temperature", "value": 71.5, "age_s": 0.4, "answering": True},
        {"source": "mavlink:udpin:127.0.0.1:14550", "field": "battery", "value": None, "age_s": None,
         "answering": False}]
    status, out, _ = run("status", "--socket", str(server.socket_path))
    assert status == 0 and "sensors: thermal temperature 71.5 (0.4 s ago); mavlink:udpin:127.0.0.1:14550 battery " \
        "unknown, not answering" in out


def test_connect_over_tcp(run: Run, server: Server, controller: FakeController) -> None:
    assert server.tcp_address is not None
    host, port = server.tcp_address
    assert run("switch", "eco", "--connect", f"{host}:{port}")[0] == 0
    assert controller.current == "eco"
    status, _, err = run("switch", "eco", "--connect", "nonsense")
    assert status == 2 and "--connect: expected HOST:PORT" in err


def test_unreachable_socket_exits_1_naming_it(run: Run, sock_dir: Path) -> None:
    path = sock_dir / "none.sock"
    status, out, err = run("status", "--socket", str(path))
    assert status == 1 and out == ""
    assert err.count("\n") == 1 and f"cannot reach the sbrs control socket {path}" in err


def test_default_socket_by_app_and_discovery(run: Run, controller: FakeController, sock_dir: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(sock_dir))
    status, _, err = run("status")
    assert status == 1 and f"no sbrs control socket in {sock_dir / 'sbrs'}" in err
    with Server(controller, app_name="drone"):
        assert run("switch", "eco", "--app", "drone")[0] == 0
        assert run("switch", "frugal")[0] == 0  # the only running app is found
        with Server(controller, app_name="pamap2"):
            status, _, err = run("status")
            assert status == 2 and "several sbrs apps are running (drone, pamap2)" in err
            assert run("status", "--app", "pamap2")[0] == 0
    assert controller.current == "frugal"


def test_options_are_exclusive(run: Run) -> None:
    with pytest.raises(SystemExit) as caught:
        run("status", "--socket", "a", "--app", "b")
    assert caught.value.code == 2
