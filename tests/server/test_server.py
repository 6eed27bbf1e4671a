"""The socket server: bad input answered, slow clients isolated, 0600 socket, loopback only, bursts, clean stop."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.server import Connection, Server, default_socket_path, parse_listen, send_request
from tests.server.fakes import FakeController

TIMEOUT = 10.0  # bounded waits only: nothing here depends on timings for correctness


@pytest.fixture
def controller() -> FakeController:
    return FakeController()


@pytest.fixture
def server(controller: FakeController, sock_dir: Path):
    with Server(controller, sock_dir / "s.sock") as running:
        yield running


def raw_exchange(path: Path, payload: bytes, replies: int) -> list[dict[str, object]]:
    """Send raw bytes on one connection and read ``replies`` reply lines."""
    with Connection(path, TIMEOUT) as connection:
        connection.send_line(payload)
        return [connection.read_reply() for _ in range(replies)]


BAD_LINES = [
    (b"not json", "bad_json"),
    (b"", "bad_json"),
    (b"\xff\xfe", "bad_encoding"),
    (b"[1, 2]", "not_object"),
    (b'"status"', "not_object"),
    (b'{"op": "status", "op": "switch"}', "bad_json"),
    (b'{"op": "env", "battery": NaN}', "bad_json"),
    (b"[" * 60000, "bad_json"),
    (b"{}", "missing_field"),
    (b'{"op": 5}', "bad_field"),
    (b'{"op": "launch"}', "unknown_op"),
    (b'{"op": "status", "verbose": true}', "unknown_key"),
    (b'{"op": "switch"}', "missing_field"),
    (b'{"op": "switch", "scenario": "turbo"}', "unknown_scenario"),
    (b'{"op": "switch", "scenario": ["eco"]}', "bad_field"),
    (b'{"op": "env"}', "missing_field"),
    (b'{"op": "env", "battery": true}', "bad_field"),
    (b'{"op": "env", "battery": 1.01}', "bad_field"),
    (b'{"op": "env", "battery": "low"}', "bad_field"),
    (b'{"op": "env", "min_fps": -1}', "bad_field"),
    (b'{"op": "env", "min_fps": 1e999}', "bad_field"),
    (b'{"op": "env", "energy_budget_j": -0.5}', "bad_field"),
    (b'{"op": "env", "requirements": {"accuracy": 0.6, "energy": 0.6}}', "bad_field"),
    (b'{"op": "env", "requirements": {"speed": 1}}', "bad_field"),
    (b'{"op": "env", "wind": 12}', "unknown_key"),
    (b'{"op": "status", "id": {"a": 1}}', "bad_field"),
    (b'{"op": "switch", "scenario": "broken"}', "switch_failed"),
    (b'{"op": "status", "pad": "' + b"x" * 70000 + b'"}', "too_long"),
]


@pytest.mark.parametrize(("line", "code"), BAD_LINES, ids=[code + str(i) for i, (_, code) in enumerate(BAD_LINES)])
def test_bad_input_gets_an_error_and_the_server_goes_on(server: Server, controller: FakeController, line: bytes,
                                                        code: str) -> None:
    bad, good = raw_exchange(server.socket_path, line + b'\n{"op": "status", "id": 1}\n', 2)
    assert bad["ok"] is False and bad["code"] == code
    assert isinstance(bad["error"], str) and bad["error"] and "\n" not in bad["error"]
    assert good == {"ok": True, "op": "status", "id": 1, **controller.status(), "requests": good["requests"]}
    assert controller.switches == [] and controller.updates == []  # bad input changed nothing
    assert send_request(server.socket_path, {"op": "status"}, TIMEOUT)["ok"]  # a new client is served too
    assert server.stats.snapshot()["rejected"] == {code: 1}


def test_error_replies_echo_op_and_id(server: Server) -> None:
    reply = send_request(server.socket_path, {"op": "switch", "scenario": "turbo", "id": "r1"}, TIMEOUT)
    assert reply["code"] == "unknown_scenario" and reply["op"] == "switch" and reply["id"] == "r1"
    reply = send_request(server.socket_path, {"op": "fly", "id": 9}, TIMEOUT)
    assert reply["code"] == "unknown_op" and reply["id"] == 9 and "op" not in reply


def test_valid_requests(server: Server, controller: FakeController) -> None:
    reply = send_request(server.socket_path, {"op": "switch", "scenario": "eco"}, TIMEOUT)
    assert reply == {"ok": True, "op": "switch", "scenario": "eco", "previous": "accurate", "switched": True}
    reply = send_request(server.socket_path, {"op": "env", "battery": 0.2, "min_fps": 15, "energy_budget_j": 0.1,
                                              "requirements": {"accuracy": 0.5, "energy": 0.5}}, TIMEOUT)
    assert reply["ok"] and controller.switches == [("eco", "socket")]
    update = controller.updates[0]
    assert (update["battery"], update["min_fps"], update["energy_budget_j"]) == (0.2, 15.0, 0.1)
    assert update["requirements"].accuracy == 0.5
    status = send_request(server.socket_path, {"op": "status"}, TIMEOUT)
    assert status["scenario"] == "eco"
    assert status["requests"]["accepted"] == {"switch": 1, "env": 1}


def test_long_line_is_reported_early_and_discarded(server: Server) -> None:
    with Connection(server.socket_path, TIMEOUT) as connection:
        connection.send_raw(b"x" * (100 * 1024))  # no newline yet: answered once it is too long
        assert connection.read_reply()["code"] == "too_long"
        connection.send_raw(b"y" * (300 * 1024) + b'\n{"op": "status"}\n')
        assert connection.read_reply()["ok"]  # the rest of the long line produced no reply of its own


def test_last_line_without_newline_is_answered(server: Server) -> None:
    with Connection(server.socket_path, TIMEOUT) as connection:
        connection.send_raw(b'{"op": "status"}')
        connection.shutdown()
        assert connection.read_reply()["ok"]


def test_slow_and_stuck_clients_do_not_block_others(server: Server, controller: FakeController) -> None:
    half = Connection(server.socket_path, TIMEOUT)
    half.send_raw(b'{"op": "sta')  # half a line, then silence
    # A client that sends a flood of requests and never reads a reply: the server blocks on it alone.
    deaf = Connection(server.socket_path, TIMEOUT)
    flood_done = threading.Event()

    def flood() -> None:
        try:
            for _ in range(2000):
                deaf.send_raw(b'{"op": "status"}\n' * 50)
        except SbrsRuntimeError:
            pass  # the test hung up on it
        flood_done.set()

    flooder = threading.Thread(target=flood, daemon=True)
    flooder.start()
    # A slow controller call (a stuck runtime) holds up only its own client.
    controller.gate = threading.Event()
    stuck = Connection(server.socket_path, TIMEOUT)
    stuck.send_line(b'{"op": "env", "battery": 0.5}')
    assert controller.entered.wait(TIMEOUT)
    try:
        for index in range(20):
            assert send_request(server.socket_path, {"op": "switch", "scenario": "eco", "id": index}, TIMEOUT)["ok"]
        assert not flood_done.is_set()  # the flooder really is stuck on backpressure
        half.send_raw(b'tus"}\n')
        assert half.read_reply()["ok"]
        controller.gate.set()
        assert stuck.read_reply()["ok"]
    finally:
        controller.gate.set()
        deaf.shutdown(socket.SHUT_RDWR)  # wakes the flooder's blocked send
        for connection in (half, deaf, stuck):
            connection.close()
    flooder.join(TIMEOUT)
    assert not flooder.is_alive()


def test_burst_from_concurrent_clients_is_all_answered(server: Server) -> None:
    clients, per_client = 8, 125
    answered: list[list[dict[str, object]]] = [[] for _ in range(clients)]

    def client(index: int) -> None:
        with Connection(server.socket_path, TIMEOUT) as connection:
            requests = [{"op": "switch", "scenario": ("accurate", "eco", "frugal")[n % 3], "id": f"{index}-{n}"}
                        if n % 2 else {"op": "status", "id": f"{index}-{n}"} for n in range(per_client)]
            connection.send_raw(b"".join(json.dumps(r).encode() + b"\n" for r in requests))  # pipelined
            answered[index] = [connection.read_reply() for _ in requests]

    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert sum(len(replies) for replies in answered) == clients * per_client == 1000
    for index, replies in enumerate(answered):
        assert [reply["id"] for reply in replies] == [f"{index}-{n}" for n in range(per_client)]  # in order
        assert all(reply["ok"] for reply in replies)
    stats = server.stats.snapshot()
    assert stats["accepted_total"] == 1000 and stats["rejected_total"] == 0


def test_socket_mode_and_clean_stop(controller: FakeController, sock_dir: Path) -> None:
    path = sock_dir / "s.sock"
    server = Server(controller, path).start()
    assert server.running
    assert stat.S_ISSOCK(os.stat(path).st_mode) and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    open_client = Connection(path, TIMEOUT)  # a connected client does not keep the server alive
    server.stop()
    assert not path.exists() and not server.running
    server.stop()  # twice is fine
    open_client.close()
    with pytest.raises(SbrsRuntimeError, match=f"cannot reach the sbrs control socket {path}"):
        send_request(path, {"op": "status"}, TIMEOUT)


def test_live_socket_is_refused_stale_one_replaced(controller: FakeController, sock_dir: Path) -> None:
    path = sock_dir / "s.sock"
    with Server(controller, path):
        with pytest.raises(SbrsRuntimeError, match="in use by a running server"):
            Server(controller, path).start()
        assert send_request(path, {"op": "status"}, TIMEOUT)["ok"]  # the first one is untouched
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # a dead server's leftover
    with Server(controller, path):
        assert send_request(path, {"op": "status"}, TIMEOUT)["ok"]
    path.write_text("precious")
    with pytest.raises(InputError, match="exists and is not a socket"):
        Server(controller, path).start()
    assert path.read_text() == "precious"


def test_two_servers_started_together_on_a_stale_socket_do_not_take_each_others_path(
        controller: FakeController, sock_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both found the path stale, and the second unlinked the first's new socket: two "running" servers, the first
    reachable by nobody. Now the second waits for the first's ``listen()`` and finds its socket live."""
    import sbrs.server.server as server_module

    path = sock_dir / "s.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()
    is_live = server_module._socket_is_live
    first_checked = threading.Event()

    def slow_first_check(checked: Path) -> bool:
        live = is_live(checked)
        if not first_checked.is_set():
            first_checked.set()
            time.sleep(0.3)  # the second server starts meanwhile
        return live

    monkeypatch.setattr(server_module, "_socket_is_live", slow_first_check)
    outcomes: list[object] = []

    def start() -> None:
        try:
            outcomes.append(server_module.bind_unix_socket(path))
        except SbrsRuntimeError as error:
            outcomes.append(error)

    first = threading.Thread(target=start)
    first.start()
    assert first_checked.wait(TIMEOUT)
    start()
    first.join(TIMEOUT)
    sockets = [outcome for outcome in outcomes if isinstance(outcome, socket.socket)]
    try:
        errors = [str(outcome) for outcome in outcomes if isinstance(outcome, SbrsRuntimeError)]
        assert len(sockets) == 1 and len(errors) == 1 and "in use by a running server" in errors[0]
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(str(path))  # the one that runs is reachable
        probe.close()
    finally:
        for sock in sockets:
            sock.close()


def test_socket_path_checks(controller: FakeController, sock_dir: Path) -> None:
    with pytest.raises(InputError, match="longer than 107 bytes"):
        Server(controller, sock_dir / ("x" * 120)).start()
    with pytest.raises(InputError, match="no such directory"):
        Server(controller, sock_dir / "missing" / "s.sock").start()


def test_default_socket_path(controller: FakeController, sock_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(sock_dir))
    assert default_socket_path("drone") == sock_dir / "sbrs" / "drone.sock"
    with Server(controller, app_name="drone") as server:
        assert server.socket_path == sock_dir / "sbrs" / "drone.sock"
        assert stat.S_IMODE(os.stat(sock_dir / "sbrs").st_mode) == 0o700
        assert send_request(server.socket_path, {"op": "status"}, TIMEOUT)["ok"]
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert default_socket_path("drone") == Path(f"/tmp/sbrs-{os.getuid()}/drone.sock")


@pytest.mark.parametrize("address", ["0.0.0.0:7070", "192.168.1.10:7070", "[::]:7070", "example.com:80",
                                     "10.0.0.1:0"])
def test_non_loopback_listen_is_refused(controller: FakeController, sock_dir: Path, address: str) -> None:
    with pytest.raises(InputError, match="only loopback addresses are accepted"):
        Server(controller, sock_dir / "s.sock", listen=address)
    assert not (sock_dir / "s.sock").exists()


@pytest.mark.parametrize(("address", "expected"), [("localhost:7070", ("127.0.0.1", 7070)),
                                                   ("127.0.0.1:0", ("127.0.0.1", 0)),
                                                   ("127.1.2.3:80", ("127.1.2.3", 80)),
                                                   ("[::1]:7070", ("::1", 7070))])
def test_loopback_listen_is_accepted(address: str, expected: tuple[str, int]) -> None:
    assert parse_listen(address) == expected


@pytest.mark.parametrize("address", ["7070", "localhost", "localhost:port", "127.0.0.1:70000", ":80"])
def test_malformed_listen(address: str) -> None:
    with pytest.raises(InputError, match="--listen"):
        parse_listen(address)


def test_tcp_listener(controller: FakeController, sock_dir: Path) -> None:
    with Server(controller, sock_dir / "s.sock", listen="127.0.0.1:0") as server:
        assert server.tcp_address is not None and server.tcp_address[0] == "127.0.0.1"
        assert send_request(server.tcp_address, {"op": "switch", "scenario": "frugal"}, TIMEOUT)["ok"]
        assert send_request(server.socket_path, {"op": "status"}, TIMEOUT)["scenario"] == "frugal"


def test_too_many_clients(controller: FakeController, sock_dir: Path) -> None:
    with Server(controller, sock_dir / "s.sock", max_clients=2) as server:
        first, second = Connection(server.socket_path, TIMEOUT), Connection(server.socket_path, TIMEOUT)
        try:
            assert first.request({"op": "status"})["ok"] and second.request({"op": "status"})["ok"]
            # past max_clients one connection at a time may still ask for status, nothing else
            assert send_request(server.socket_path, {"op": "status"}, TIMEOUT)["ok"]
            refused = send_request(server.socket_path, {"op": "switch", "scenario": "eco"}, TIMEOUT)
            assert refused["code"] == "too_many_clients" and "status" in refused["error"]
            holders = [Connection(server.socket_path, TIMEOUT) for _ in range(2)]  # wait without a request
            try:
                time.sleep(0.1)
                assert send_request(server.socket_path, {"op": "status"}, TIMEOUT)["code"] == "too_many_clients"
            finally:
                for holder in holders:
                    holder.close()
        finally:
            first.close()
            second.close()


def test_idle_connections_are_closed_and_never_lock_out_status(controller: FakeController, sock_dir: Path) -> None:
    """Issue 14, row 3: 64 connections that never send a newline used up every slot for as long as they lived."""
    with Server(controller, sock_dir / "s.sock", max_clients=8, idle_timeout_s=0.5) as server:
        stalled = [Connection(server.socket_path, TIMEOUT) for _ in range(64)]
        try:
            for connection in stalled:
                connection.send_raw(b'{"op": "sta')  # half a line, never finished
            time.sleep(1.2)  # the ones past the served slots were given a second for a status request
            assert send_request(server.socket_path, {"op": "status"}, TIMEOUT)["ok"]
            time.sleep(0.5)
            assert send_request(server.socket_path, {"op": "switch", "scenario": "eco"}, TIMEOUT)["ok"]
            reply = stalled[0].read_reply()
            assert reply["code"] == "idle_timeout"
        finally:
            for connection in stalled:
                connection.close()


def test_a_huge_integer_is_answered_and_pipelined_requests_survive(controller: FakeController,
                                                                    sock_dir: Path) -> None:
    """Issue 14, row 2: an integer of more than 4300 digits dropped the connection without a reply, with every
    request pipelined after it."""
    with Server(controller, sock_dir / "s.sock") as server, Connection(server.socket_path, TIMEOUT) as connection:
        connection.send_raw(b'{"op": "status", "id": ' + b"9" * 5000 + b"}\n" + b'{"op": "status", "id": 2}\n')
        first, second = connection.read_reply(), connection.read_reply()
        assert first["code"] == "bad_json" and "digits" in first["error"]
        assert second["ok"] and second["id"] == 2


def test_pipelined_requests_past_the_high_water_mark_are_all_answered(controller: FakeController,
                                                                      sock_dir: Path) -> None:
    """Requests sent back to back whose replies pass HIGH_WATER_BYTES were answered up to the mark and then
    never: once the queued replies were sent, the connection waited for no event at all."""
    count = 1000  # 27 KB of requests (the socket takes them at once), some 250 KB of replies: past the mark
    requests = b"".join(json.dumps({"op": "status", "id": index}).encode() + b"\n" for index in range(count))
    with Server(controller, sock_dir / "s.sock") as server, Connection(server.socket_path, TIMEOUT) as connection:
        connection.send_raw(requests)
        replies = [connection.read_reply() for _ in range(count)]
        assert [reply["id"] for reply in replies] == list(range(count))
        assert connection.request({"op": "switch", "scenario": "eco"})["ok"]
