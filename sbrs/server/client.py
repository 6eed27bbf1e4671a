"""Clients of the control socket: ``send_request``, a ``Connection`` for many requests, and the CLI commands.

``sbrs switch NAME``, ``sbrs env [--battery F] [--min-fps F] [--energy-budget J] [--requirements W]
[--clear FIELD]`` and ``sbrs status`` send one request each. The server is found by ``--socket PATH``,
``--connect HOST:PORT`` or ``--app NAME`` (its default socket path), else by the one socket in the default
socket directory. Exit status: 0 on an ok reply, 2 on an error reply (``sbrs: error: <error text>``) or bad
options, 1 when the server cannot be reached or does not answer. ``--json`` prints the reply object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from sbrs.errors import InputError, SbrsRuntimeError

Target = str | os.PathLike[str] | tuple[str, int]
"""A Unix socket path, or a (host, port) TCP address."""

Handler = Callable[[argparse.Namespace], int]
AddCommand = Callable[[str, Handler, str], argparse.ArgumentParser]

MAX_REPLY_BYTES = 16 * 1024 * 1024
DEFAULT_TIMEOUT_S = 5.0


def describe_target(target: Target) -> str:
    return f"{target[0]}:{target[1]}" if isinstance(target, tuple) else f"socket {os.fspath(target)}"


class Connection:
    """One connection to the control server; ``request`` sends a request and waits for its reply."""

    def __init__(self, target: Target, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        import socket  # here, not at the top: `sbrs run` builds the client commands' parser, never connects

        self.where = describe_target(target)
        try:
            if isinstance(target, tuple):
                self._sock = socket.create_connection(target, timeout=timeout)
            else:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self._sock.settimeout(timeout)
                try:
                    self._sock.connect(os.fspath(target))
                except OSError:
                    self._sock.close()
                    raise
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise SbrsRuntimeError(f"cannot reach the sbrs control {self.where}: {reason}"
                                   " (is `sbrs run` running?)") from None
        self._buffer = bytearray()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are (tests use this for partial and malformed lines)."""
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise SbrsRuntimeError(f"sbrs control {self.where}: cannot send: {exc.strerror or exc}") from None

    def send_line(self, line: bytes) -> None:
        """Send one line (a newline is added when missing)."""
        self.send_raw(line if line.endswith(b"\n") else line + b"\n")

    def shutdown(self, how: int | None = None) -> None:
        """Close our sending side (default ``SHUT_WR``: the server sees end of stream, replies still arrive)."""
        import socket

        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR if how is None else how)

    def read_reply(self) -> dict[str, Any]:
        """The next reply line, decoded."""
        while b"\n" not in self._buffer:
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                raise SbrsRuntimeError(f"sbrs control {self.where}: no reply in time") from None
            except OSError as exc:
                raise SbrsRuntimeError(f"sbrs control {self.where}: {exc.strerror or exc}") from None
            if not chunk:
                raise SbrsRuntimeError(f"sbrs control {self.where} closed the connection without a reply")
            self._buffer += chunk
            if len(self._buffer) > MAX_REPLY_BYTES:
                raise SbrsRuntimeError(f"sbrs control {self.where}: reply longer than {MAX_REPLY_BYTES} bytes")
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        try:
            reply = json.loads(line)
        except ValueError:
            raise SbrsRuntimeError(f"sbrs control {self.where}: the reply is not JSON") from None
        if not isinstance(reply, dict):
            raise SbrsRuntimeError(f"sbrs control {self.where}: the reply is not a JSON object")
        return reply

    def request(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Send ``request`` and return its reply (also when the server answered and hung up before reading it,
        as it does with ``too_many_clients``)."""
        try:
            self.send_line(json.dumps(request).encode("utf-8"))
        except SbrsRuntimeError as failure:
            try:
                return self.read_reply()
            except SbrsRuntimeError:
                raise failure from None
        return self.read_reply()


def send_request(target: Target, request: Mapping[str, Any], timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Send one request to the server at ``target`` and return its reply (``SbrsRuntimeError`` if unreachable)."""
    with Connection(target, timeout) as connection:
        return connection.request(request)


def resolve_target(args: argparse.Namespace) -> Target:
    """The server the CLI options name (module docstring)."""
    from sbrs.server.server import default_socket_dir, default_socket_path, parse_host_port  # not at parse

    if getattr(args, "connect", None):
        return parse_host_port(args.connect, "--connect")
    if getattr(args, "socket", None):
        return Path(args.socket)
    if getattr(args, "app", None):
        return default_socket_path(args.app)
    directory = default_socket_dir()
    found = sorted(directory.glob("*.sock")) if directory.is_dir() else []
    if not found:
        raise SbrsRuntimeError(f"no sbrs control socket in {directory} (is `sbrs run` running? or give --socket PATH)")
    if len(found) > 1:
        names = ", ".join(path.stem for path in found)
        raise InputError(f"several sbrs apps are running ({names}): choose one with --app NAME or --socket PATH")
    return found[0]


def _check_finite(value: float, option: str, *, positive: bool = False) -> float:
    """An option's number, refused in one line when it is NaN or infinite (or, ``positive``, ≤ 0): JSON has no
    NaN for the server to name the option by, and a socket's timeout must be a positive number of seconds."""
    if not math.isfinite(value) or (positive and value <= 0):
        raise InputError(f"expected a finite number{' > 0' if positive else ''}, got {value:g}", field=option)
    return value


def _exchange(args: argparse.Namespace, request: Mapping[str, Any], describe: Callable[[dict[str, Any]], str]) -> int:
    """Send ``request``, print the reply (``--json``: as is; else ``describe``'s text); exit status."""
    timeout = _check_finite(args.timeout, "--timeout", positive=True)
    reply = send_request(resolve_target(args), request, timeout)
    if args.json:
        json.dump(reply, sys.stdout, indent=2)
        sys.stdout.write("\n")
    if not reply.get("ok"):
        raise InputError(str(reply.get("error") or f"request failed ({reply.get('code', 'no error text')})"))
    if not args.json:
        print(describe(reply))
    return 0


def _switched_text(reply: Mapping[str, Any]) -> str:
    if reply.get("switched"):
        return f"switched to {reply.get('scenario')} (was {reply.get('previous')})"
    return f"scenario {reply.get('scenario')} (unchanged)"


def cmd_switch(args: argparse.Namespace) -> int:
    return _exchange(args, {"op": "switch", "scenario": args.scenario}, _switched_text)


def _parse_requirements(text: str) -> dict[str, float]:
    """``accuracy=0.5,energy=0.5`` → weights (the server checks names and sum)."""
    weights: dict[str, float] = {}
    for part in filter(None, (item.strip() for item in text.split(","))):
        key, separator, value = part.partition("=")
        try:
            if not separator:
                raise ValueError(part)
            weights[key.strip()] = _check_finite(float(value), "--requirements")
        except ValueError:
            raise InputError(f"expected NAME=WEIGHT,... (e.g. accuracy=0.5,energy=0.5), got {text!r}",
                             field="--requirements") from None
    return weights


def cmd_env(args: argparse.Namespace) -> int:
    request: dict[str, Any] = {"op": "env"}
    for field in args.clear:
        request[field] = None
    for field, option, value in (("battery", "--battery", args.battery), ("min_fps", "--min-fps", args.min_fps),
                                 ("energy_budget_j", "--energy-budget", args.energy_budget),
                                 ("temperature", "--temperature", args.temperature)):
        if value is not None:
            request[field] = _check_finite(value, option)
    if args.requirements is not None:
        request["requirements"] = _parse_requirements(args.requirements)
    if len(request) == 1:
        raise InputError("give at least one of --battery, --min-fps, --energy-budget, --temperature, --requirements, "
                         "--clear")

    def describe(reply: dict[str, Any]) -> str:
        text = _switched_text(reply)
        reason = reply.get("reason")
        return text + (f": {reason}" if reason else "") + ("" if reply.get("satisfied", True) else " [unsatisfied]")

    return _exchange(args, request, describe)


def _status_text(reply: dict[str, Any]) -> str:
    environment = reply.get("environment") or {}
    known = ", ".join(f"{key} {value}" for key, value in environment.items() if value is not None) or "nothing known"
    lines = [f"scenario: {reply.get('scenario')} (mode {reply.get('mode', '?')}, "
             f"scenarios: {', '.join(reply.get('scenarios', []))})",
             f"environment: {known}"]
    decision = reply.get("decision")
    if isinstance(decision, dict):
        state = "" if decision.get("satisfied", True) else " [unsatisfied]"
        lines.append(f"last decision: {decision.get('scenario')}: {decision.get('reason')}{state}")
    sensors = reply.get("sensors")
    if isinstance(sensors, list) and sensors:
        lines.append("sensors: " + "; ".join(_sensor_text(item) for item in sensors if isinstance(item, dict)))
    requests = reply.get("requests")
    if isinstance(requests, dict):
        rejected = ", ".join(f"{code} {count}" for code, count in sorted(requests.get("rejected", {}).items()))
        lines.append(f"requests: {requests.get('accepted_total', 0)} accepted, {requests.get('rejected_total', 0)}"
                     f" rejected{f' ({rejected})' if rejected else ''}")
    return "\n".join(lines)


def _sensor_text(item: Mapping[str, Any]) -> str:
    """One sensor of ``status``: ``thermal temperature 71.5 (0.4 s ago)``, or ``... not answering``."""
    value, age = item.get("value"), item.get("age_s")
    known = "unknown" if value is None else f"{value:g}" + ("" if age is None else f" ({age:g} s ago)")
    quiet = "" if item.get("answering", True) else ", not answering"
    return f"{item.get('source')} {item.get('field')} {known}{quiet}"


def cmd_status(args: argparse.Namespace) -> int:
    return _exchange(args, {"op": "status"}, _status_text)


def _add_target_options(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--socket", metavar="PATH", default=None, help="the server's Unix socket")
    where.add_argument("--connect", metavar="HOST:PORT", default=None, help="the server's loopback TCP address")
    where.add_argument("--app", metavar="NAME", default=None, help="the app's name (its default socket path)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                        help=f"seconds to wait for the reply (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--json", action="store_true", help="print the reply as one JSON object")


def add_client_commands(subparsers: Any, add: AddCommand | None = None) -> None:
    """Add ``switch``, ``env`` and ``status`` to ``subparsers`` (through ``add(name, handler, help)`` if given,
    the helper of ``sbrs.cli.build_parser``)."""
    def add_here(name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    add = add or add_here
    switch = add("switch", cmd_switch, "ask the running app to switch scenario now (bypasses the policy)")
    switch.add_argument("scenario", metavar="SCENARIO")
    _add_target_options(switch)

    env = add("env", cmd_env, "tell the running app about its environment; its policy may switch scenario")
    env.add_argument("--battery", type=float, default=None, metavar="F", help="battery level in [0, 1]")
    env.add_argument("--min-fps", type=float, default=None, metavar="F", help="required frames per second")
    env.add_argument("--energy-budget", type=float, default=None, metavar="J", help="energy budget per frame (J)")
    env.add_argument("--temperature", type=float, default=None, metavar="C",
                     help="temperature in °C (policy.temperature thresholds)")
    env.add_argument("--requirements", default=None, metavar="W",
                     help="requirement weights, e.g. accuracy=0.5,energy=0.5 (thesis 5.6; sum to 1)")
    env.add_argument("--clear", action="append", default=[], metavar="FIELD",
                     choices=("battery", "min_fps", "energy_budget_j", "requirements", "temperature"),
                     help="forget a value (battery, min_fps, energy_budget_j, requirements, temperature); repeatable")
    _add_target_options(env)

    status = add("status", cmd_status, "the running app's scenario, environment, last decision and request counts")
    _add_target_options(status)
