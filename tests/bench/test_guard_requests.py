"""The guard's switching harness (benchmarks/guard.py, ``_Requests``): sbrs's Δ ends at the output of the frame that
took the request, never at an older frame of the scenario asked for, and the next request waits until every frame
taken before that one is out. Logic only: no timing decides anything here."""

from __future__ import annotations

import importlib.util
import random
import sys
from types import ModuleType

from tests.conftest import REPO

GUARD = REPO / "benchmarks" / "guard.py"


def guard() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sbrs_guard_script", GUARD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_a_switch_ends_at_the_frame_that_took_the_request_and_settles_after_every_older_frame() -> None:
    requests = guard()._Requests(lambda _: None, ["a", "b"], "a", {"a": 1e-3, "b": 1e-3}, 1, random.Random(0))
    requests.target = "b"  # as ``_run`` does when it asks
    requests.out(0, "a", took_request=False)
    requests.out(2, "b", took_request=False)  # an older frame of b, still in flight when b was asked for
    assert not requests.switched.is_set() and requests.delays == []
    requests.out(4, "b", took_request=True)
    assert requests.switched.is_set() and len(requests.delays) == 1 and not requests.settled.is_set()
    requests.out(1, "a", took_request=False)
    assert not requests.settled.is_set()  # frame 3 is still in flight
    requests.out(3, "a", took_request=False)
    assert requests.settled.is_set()
    requests.out(5, "b", took_request=False)
    assert len(requests.delays) == 1


def test_plain_onnx_runtime_switches_at_the_first_output_of_the_scenario_asked_for() -> None:
    requests = guard()._Requests(lambda _: None, ["a", "b"], "a", {"a": 1e-3, "b": 1e-3}, 1, random.Random(0))
    requests.target = "b"
    requests.held("a")
    assert not requests.switched.is_set()
    requests.held("b")
    assert requests.switched.is_set() and requests.settled.is_set() and len(requests.delays) == 1
