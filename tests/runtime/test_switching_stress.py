"""Switch requests from several threads at random moments while ``process`` runs (invariant 4 under races).

Every example app, every transition mode, arena and schedule, cancelling the frame in flight on a switch
(``on_switch: cancel``), continuing it on the new scenario (``resume``) or not, and both delivery orders: for a bounded time,
three threads send switch requests (random scenario, 0-2 ms apart) while frames arrive from a paced source
(0-1 ms apart, so the runtime also waits on the source while a request may replace the pending one). The run
must raise nothing, yield every frame exactly once (indices 0..N-1, in stream order when asked for) and each
frame's outputs must equal the reference ONNX Runtime outputs of the scenario that processed it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from sbrs.app import App
from sbrs.runtime import runtime_for
from sbrs.runtime.engine import Runtime
from tests.conftest import example_apps_by_tier
from tests.runtime.conftest import NeverWaiting, References, assert_equivalent, random_frame

DISTINCT_FRAMES = 3
SECONDS_PER_CASE = 0.8
#: (transition, arena, schedule, on_switch) of every runtime configuration a switch can run under
CONFIGURATIONS = (("naive", "shared", "priority", "finish"), ("sbrs-tp", "shadow", "priority", "finish"),
                  ("sbrs-tp", "shadow", "threads", "finish"), ("sbrs-tp", "shared", "priority", "finish"),
                  ("sbrs-tp", "shared", "threads", "finish"), ("sbrs-tp", "shadow", "priority", "cancel"),
                  ("sbrs-tp", "shadow", "priority", "resume"))


def stress(runtime: Runtime, frames: list[np.ndarray], seconds: float, seed: int, order: str,
           never_waits: bool = False, frame_gap_s: float = 1e-3) -> list:
    """Run ``process`` for about ``seconds`` with three switching threads; the results in arrival order.
    ``never_waits``: the frame source says it never waits for the world (``live`` false), so that on streams the
    caller's own thread runs stream 0 (``sbrs.runtime.streams.frames_never_wait``). The source waits up to
    ``frame_gap_s`` (at random) before each frame."""
    rng = random.Random(seed)
    done = threading.Event()
    errors: list[BaseException] = []
    end = time.perf_counter() + seconds  # requests stop then too: a runtime starving frames slows, never hangs

    def pester(source: str, thread_seed: int) -> None:
        local = random.Random(thread_seed)
        try:
            while not done.is_set() and time.perf_counter() < end:
                runtime.switch(local.choice(runtime.scenarios), source)
                runtime.status()
                time.sleep(local.random() * 2e-3)
        except BaseException as error:  # reported by the test below
            errors.append(error)

    def source() -> Iterator[np.ndarray]:
        index = 0
        while time.perf_counter() < end:
            time.sleep(rng.random() * frame_gap_s)
            yield frames[index % len(frames)]
            index += 1

    threads = [threading.Thread(target=pester, args=(src, seed * 7 + k))
               for k, src in enumerate(("api", "socket", "policy"))]
    for thread in threads:
        thread.start()
    try:
        frames_given = source()
        if never_waits:
            frames_given = NeverWaiting(frames_given)
        results = list(runtime.process(frames_given, order=order))
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert not errors, f"a switching thread failed: {errors[0]!r}"
    return results


@pytest.mark.parametrize("name", example_apps_by_tier())
def test_concurrent_switches_never_lose_a_frame(load_example: Callable[[str], App], name: str) -> None:
    app = load_example(name)
    refs = References(app)
    frames = [random_frame(app, 100 + k) for k in range(DISTINCT_FRAMES)]
    want = {(s, k): refs.outputs(s, frame) for s in refs.sessions for k, frame in enumerate(frames)}
    runtimes: dict[tuple[str, str, str], Runtime] = {}
    try:
        for case, (transition, arena, schedule, on_switch) in enumerate(CONFIGURATIONS):
            runtime = runtimes.get((transition, arena, on_switch))
            if runtime is None:
                runtime = runtimes[(transition, arena, on_switch)] = runtime_for(
                    app, transition=transition, transition_arena=arena, on_switch=on_switch)
            runtime.transition_schedule = schedule
            for order in ("completion", "stream"):
                where = f"{name} {transition}/{arena}/{schedule}/{on_switch}/{order}"
                results = stress(runtime, frames, SECONDS_PER_CASE / 2, seed=case, order=order)
                indices = [r.index for r in results]
                assert sorted(indices) == list(range(len(results))), f"{where}: frames lost or repeated"
                if order == "stream":
                    assert indices == sorted(indices), f"{where}: stream order broken"
                for result in results:
                    assert_equivalent(result.outputs, want[(result.scenario, result.index % DISTINCT_FRAMES)],
                                      f"{where} frame {result.index} on {result.scenario}")
                assert runtime.node.state in ("running", "switching"), where
    finally:
        for runtime in runtimes.values():
            runtime.close()
