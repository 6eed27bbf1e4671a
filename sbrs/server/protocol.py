"""The request protocol of the control socket: JSON lines, one request per line, one reply per request.

Requests (an optional ``"id"``, a string of at most 256 characters or an integer, is echoed in the reply):

- ``{"op": "switch", "scenario": "eco"}``: switch now (bypasses the policy).
- ``{"op": "env", "battery": 0.2, "min_fps": 15, "energy_budget_j": 0.1, "requirements": {...}, "temperature":
  71.5}``: any non-empty subset; a value of ``null`` clears it. battery in [0, 1]; min_fps and energy_budget_j (J
  per frame) finite and ≥ 0; requirements an object of weights (accuracy, throughput, memory, energy) in [0, 1]
  summing to 1, an omitted weight being 0; temperature in °C, in [-273.15, 1000]. The app's sensors
  (``sbrs.control.sensors``) update the same values the same way.
- ``{"op": "status"}``: the controller's snapshot plus the request counters.

Replies are one JSON object per line: ``{"ok": true, "op": ..., "id": ..., ...result}``, or
``{"ok": false, "code": ..., "error": "<one line>", "id": ...}`` (``op``/``id`` when they were readable).
Error codes: ``too_long`` (a line over 64 KiB; the rest of it, up to the next newline, is discarded),
``bad_encoding`` (not UTF-8), ``bad_json`` (not JSON, NaN/Infinity, duplicate keys, too deeply nested),
``not_object``, ``missing_field``, ``unknown_op``, ``unknown_key``, ``bad_field`` (wrong type, bools are not
numbers, out of range, weights not summing to 1), ``unknown_scenario``, ``switch_failed``, ``too_many_clients``,
``idle_timeout`` (nothing received for a while; the connection is closed), ``internal``. Every error leaves the
server and the runtime as they were (DESIGN.md invariant 5).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sbrs.control.controller import Controller, RequestError
from sbrs.control.policy import ENVIRONMENT_FIELDS, check_environment_value
from sbrs.errors import InputError
from sbrs.runtime.events import Observers

MAX_LINE_BYTES = 64 * 1024
MAX_ID_CHARS = 256
OPS: dict[str, tuple[str, ...]] = {
    "switch": ("scenario",),
    "env": ENVIRONMENT_FIELDS,
    "status": (),
}


@dataclass(frozen=True)
class Request:
    """A validated request: ``op``, its ``fields`` (for ``env``: validated values) and the client's ``id``."""

    op: str
    fields: Mapping[str, Any]
    id: str | int | None = None


class RequestStats:
    """Requests counted by result: accepted by op, rejected by error code. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._accepted: Counter[str] = Counter()
        self._rejected: Counter[str] = Counter()

    def count(self, reply: Mapping[str, Any]) -> None:
        with self._lock:
            if reply.get("ok"):
                self._accepted[str(reply.get("op"))] += 1
            else:
                self._rejected[str(reply.get("code"))] += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"accepted": dict(self._accepted), "rejected": dict(self._rejected),
                    "accepted_total": sum(self._accepted.values()), "rejected_total": sum(self._rejected.values())}


class ObservedRequestStats(RequestStats):
    """The server's request counter that also reports each reply to observers (``request_handled``).

    Every reply counts once: rejected requests as ``rejected:<code>``, ``env`` and ``status`` as ``accepted``
    (an accepted ``env`` also reports ``environment_changed``), a ``switch`` that changed nothing
    (``"switched": false``) as ``accepted``. A ``switch`` that issued an SSR is reported by the control node
    when the SSR is acted on (``accepted``) or replaced before that (``replaced``).
    """

    def __init__(self, observers: Observers) -> None:
        super().__init__()
        self._observers = observers

    def count(self, reply: Mapping[str, Any]) -> None:
        super().count(reply)
        op = str(reply.get("op", "unknown"))
        if not reply.get("ok"):
            self._observers.request_handled(op, f"rejected:{reply.get('code')}")
        elif op != "switch" or not reply.get("switched"):
            self._observers.request_handled(op, "accepted")
            if op == "env" and isinstance(reply.get("environment"), Mapping):
                self._observers.environment_changed(dict(reply["environment"]))


class LineSplitter:
    """Splits a byte stream into lines of at most ``limit`` bytes without buffering more than that.

    ``feed`` returns the complete lines (without the newline) and ``None`` for each line that grew past the
    limit: that line is reported once, as soon as it is too long, and discarded up to its newline.
    """

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._discarding = False

    def feed(self, data: bytes) -> list[bytes | None]:
        lines: list[bytes | None] = []
        start = 0
        while start < len(data):
            newline = data.find(b"\n", start)
            stop = len(data) if newline < 0 else newline
            if not self._discarding:
                room = self.limit + 1 - len(self._buffer)  # never hold more than limit + 1 bytes
                self._buffer += data[start:min(stop, start + room)]
                if len(self._buffer) > self.limit:
                    lines.append(None)
                    self._buffer.clear()
                    self._discarding = True
                elif newline >= 0:
                    lines.append(bytes(self._buffer))
                    self._buffer.clear()
            if newline < 0:
                break
            self._discarding = False
            start = newline + 1
        return lines

    def finish(self) -> bytes | None:
        """At end of stream: the last line if it had no newline (None when there is none)."""
        rest = None if self._discarding or not self._buffer.strip() else bytes(self._buffer)
        self._buffer.clear()
        self._discarding = False
        return rest


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise RequestError("bad_json", f"duplicate key {key[:40]!r}")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise RequestError("bad_json", f"{name} is not valid JSON")


def _short(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _request_id(message: Mapping[str, Any]) -> str | int | None:
    if "id" not in message:
        return None
    value = message["id"]
    if isinstance(value, bool) or not isinstance(value, (str, int)) or (isinstance(value, str)
                                                                         and len(value) > MAX_ID_CHARS):
        raise RequestError("bad_field", f"id: expected a string (≤ {MAX_ID_CHARS} characters) or an integer")
    return value


def reply_context(message: Mapping[str, Any]) -> tuple[str | None, str | int | None]:
    """The ``op`` and ``id`` of a (possibly bad) request that an error reply can echo: valid ones only."""
    op = message.get("op")
    try:
        request_id = _request_id(message)
    except RequestError:
        request_id = None
    return (op if isinstance(op, str) and op in OPS else None), request_id


def decode_message(line: bytes) -> dict[str, Any]:
    """One line → the JSON object it holds; ``RequestError`` for bad encoding, bad JSON or a non-object."""
    if len(line) > MAX_LINE_BYTES:
        raise RequestError("too_long", f"request longer than {MAX_LINE_BYTES} bytes")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestError("bad_encoding", "request is not UTF-8") from None
    if not text.strip():
        raise RequestError("bad_json", "empty request")
    try:
        message = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise RequestError("bad_json", f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise RequestError("bad_json", "JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit for int() conversion
        raise RequestError("bad_json", f"invalid JSON value: {' '.join(str(exc).split())[:120]}") from None
    if not isinstance(message, dict):
        raise RequestError("not_object", f"a request is a JSON object, got {type(message).__name__}")
    return message


def parse_request(message: Mapping[str, Any], scenarios: tuple[str, ...]) -> Request:
    """Validate a decoded request against the protocol (module docstring); ``RequestError`` when it is bad."""
    if "op" not in message:
        raise RequestError("missing_field", f"missing 'op' (one of: {', '.join(OPS)})")
    op = message["op"]
    if not isinstance(op, str):
        raise RequestError("bad_field", f"op: expected a string, got {_short(op)}")
    if op not in OPS:
        raise RequestError("unknown_op", f"unknown op {_short(op)} (ops: {', '.join(OPS)})")
    request_id = _request_id(message)
    allowed = ("op", "id", *OPS[op])
    for key in message:
        if key not in allowed:
            raise RequestError("unknown_key", f"{op}: unknown key {_short(key)} (allowed: {', '.join(allowed)})")
    if op == "switch":
        if "scenario" not in message:
            raise RequestError("missing_field", "switch: missing 'scenario'")
        scenario = message["scenario"]
        if not isinstance(scenario, str):
            raise RequestError("bad_field", f"switch: scenario: expected a string, got {_short(scenario)}")
        if scenario not in scenarios:
            raise RequestError("unknown_scenario",
                               f"unknown scenario {_short(scenario)} (scenarios: {', '.join(scenarios)})")
        return Request(op, {"scenario": scenario}, request_id)
    if op == "env":
        changes: dict[str, Any] = {}
        for key in ENVIRONMENT_FIELDS:
            if key in message:
                try:
                    changes[key] = check_environment_value(key, message[key])
                except InputError as exc:
                    raise RequestError("bad_field", f"env: {exc}") from None
        if not changes:
            raise RequestError("missing_field", f"env: give at least one of {', '.join(ENVIRONMENT_FIELDS)}")
        return Request(op, changes, request_id)
    return Request(op, {}, request_id)


def error_reply(error: RequestError, op: str | None = None, request_id: str | int | None = None) -> dict[str, Any]:
    reply: dict[str, Any] = {"ok": False, "code": error.code, "error": error.message}
    if op is not None:
        reply["op"] = op
    if request_id is not None:
        reply["id"] = request_id
    return reply


def execute(request: Request, controller: Controller, stats: RequestStats | None = None) -> dict[str, Any]:
    """Carry out a validated request on ``controller``; the reply (``RequestError`` → error reply)."""
    try:
        if request.op == "switch":
            result = controller.request_switch(request.fields["scenario"], "socket")
        elif request.op == "env":
            result = controller.update_environment(request.fields)
        else:
            result = dict(controller.status())
            if stats is not None:
                result["requests"] = stats.snapshot()
    except RequestError as exc:
        return error_reply(exc, request.op, request.id)
    reply: dict[str, Any] = {"ok": True, "op": request.op}
    if request.id is not None:
        reply["id"] = request.id
    reply.update(result)
    return reply


def encode_reply(reply: Mapping[str, Any]) -> bytes:
    """One reply as a JSON line (non-finite floats become null, so the line is always valid JSON)."""
    try:
        text = json.dumps(reply, allow_nan=False, default=str)
    except ValueError:
        text = json.dumps(_finite(reply), default=str)
    return text.encode("utf-8") + b"\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
