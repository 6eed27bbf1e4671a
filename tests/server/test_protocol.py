"""The request protocol without sockets: line splitting, decoding, validation, replies, counters."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sbrs.control import RequestError
from sbrs.server.protocol import (
    LineSplitter,
    RequestStats,
    decode_message,
    encode_reply,
    execute,
    parse_request,
)
from tests.server.fakes import FakeController

SCENARIOS = ("accurate", "eco")


def test_splitter_lines_and_long_lines() -> None:
    splitter = LineSplitter(limit=5)
    assert splitter.feed(b"ab\ncdefgh") == [b"ab", None]  # reported as soon as it is too long
    assert splitter.feed(b"ij") == []  # ... and discarded up to its newline
    assert splitter.feed(b"\nkl") == []
    assert splitter.feed(b"m\n12345\n123456\n\n") == [b"klm", b"12345", None, b""]
    assert splitter.finish() is None
    assert splitter.feed(b"tail") == [] and splitter.finish() == b"tail"


@given(st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=20),
       st.lists(st.integers(min_value=1, max_value=17), min_size=1, max_size=10))
def test_splitter_matches_split_for_any_chunking(lines: list[bytes], sizes: list[int]) -> None:
    limit = 12
    stream = b"".join(line + b"\n" for line in lines)
    splitter, got, position, index = LineSplitter(limit), [], 0, 0
    while position < len(stream):
        size = sizes[index % len(sizes)]
        got += splitter.feed(stream[position:position + size])
        position, index = position + size, index + 1
        assert len(splitter._buffer) <= limit + 1  # never holds more than one line's worth
    assert got == [line if len(line) <= limit else None for line in lines]


@pytest.mark.parametrize(("line", "code"), [
    (b"not json", "bad_json"),
    (b"", "bad_json"),
    (b"   ", "bad_json"),
    (b"\xff\xfe{}", "bad_encoding"),
    (b"[1, 2]", "not_object"),
    (b"null", "not_object"),
    (b'{"op": "status", "op": "switch"}', "bad_json"),
    (b'{"op": "env", "battery": NaN}', "bad_json"),
    (b'{"op": "env", "battery": -Infinity}', "bad_json"),
    (b"[" * 60000, "bad_json"),
])
def test_decode_errors(line: bytes, code: str) -> None:
    with pytest.raises(RequestError) as caught:
        decode_message(line)
    assert caught.value.code == code and "\n" not in caught.value.message


@pytest.mark.parametrize(("message", "code", "fragment"), [
    ({}, "missing_field", "missing 'op'"),
    ({"op": 5}, "bad_field", "op: expected a string"),
    ({"op": "launch"}, "unknown_op", 'unknown op "launch" (ops: switch, env, status)'),
    ({"op": "status", "extra": 1}, "unknown_key", 'status: unknown key "extra" (allowed: op, id)'),
    ({"op": "switch"}, "missing_field", "missing 'scenario'"),
    ({"op": "switch", "scenario": 1}, "bad_field", "scenario: expected a string"),
    ({"op": "switch", "scenario": "turbo"}, "unknown_scenario", "(scenarios: accurate, eco)"),
    ({"op": "env"}, "missing_field", "give at least one of battery"),
    ({"op": "env", "battery": True}, "bad_field", "battery: expected a finite number, got True"),
    ({"op": "env", "battery": 1.5}, "bad_field", "battery level must be in [0, 1]"),
    ({"op": "env", "battery": "0.5"}, "bad_field", "battery: expected a finite number"),
    ({"op": "env", "min_fps": -1}, "bad_field", "min_fps: must be ≥ 0"),
    ({"op": "env", "min_fps": float("inf")}, "bad_field", "min_fps: expected a finite number"),
    ({"op": "env", "min_fps": 10 ** 400}, "bad_field", "min_fps: expected a finite number"),
    ({"op": "env", "energy_budget_j": -0.1}, "bad_field", "energy_budget_j: must be ≥ 0"),
    ({"op": "env", "requirements": {"accuracy": 0.5}}, "bad_field", "must sum to 1, they sum to 0.5"),
    ({"op": "env", "requirements": {"accuracy": True}}, "bad_field", "requirements.accuracy: weight must be"),
    ({"op": "env", "requirements": "accurate"}, "bad_field", "requirements: expected an object"),
    ({"op": "env", "wind": 3}, "unknown_key", 'env: unknown key "wind"'),
    ({"op": "status", "id": [1]}, "bad_field", "id: expected a string"),
    ({"op": "status", "id": True}, "bad_field", "id: expected a string"),
    ({"op": "status", "id": "x" * 300}, "bad_field", "id: expected a string"),
])
def test_parse_errors(message: dict[str, object], code: str, fragment: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse_request(message, SCENARIOS)
    assert caught.value.code == code
    assert fragment in caught.value.message


def test_parse_valid_requests() -> None:
    request = parse_request({"op": "env", "battery": 1, "min_fps": None, "id": 7,
                             "requirements": {"accuracy": 0.5, "energy": 0.5}}, SCENARIOS)
    assert request.op == "env" and request.id == 7
    assert request.fields["battery"] == 1.0 and request.fields["min_fps"] is None
    assert request.fields["requirements"].energy == 0.5
    assert parse_request({"op": "switch", "scenario": "eco", "id": "a"}, SCENARIOS).fields == {"scenario": "eco"}


def test_execute_replies_and_counts() -> None:
    controller, stats = FakeController(SCENARIOS), RequestStats()
    reply = execute(parse_request({"op": "switch", "scenario": "eco", "id": "r"}, SCENARIOS), controller, stats)
    assert reply == {"ok": True, "op": "switch", "id": "r", "scenario": "eco", "previous": "accurate",
                     "switched": True}
    stats.count(reply)
    stats.count({"ok": False, "code": "bad_json", "error": "x"})
    reply = execute(parse_request({"op": "status"}, SCENARIOS), controller, stats)
    assert reply["requests"] == {"accepted": {"switch": 1}, "rejected": {"bad_json": 1}, "accepted_total": 1,
                                 "rejected_total": 1}


def test_encode_reply_is_one_valid_json_line() -> None:
    line = encode_reply({"ok": True, "value": float("nan"), "nested": [float("inf")], "text": "a\nb"})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"ok": True, "value": None, "nested": [None], "text": "a\nb"}
