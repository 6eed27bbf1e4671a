"""Memory per switch is constant: a long run keeps counters and bounded windows, never growing lists.

One run of ``run_frames`` (the loop of ``sbrs run``) switches scenario on every frame; Python's own
allocations (tracemalloc), taken once the bounded windows are full and again thousands of switches later,
must not grow with the number of switches. The first version kept every switch record in the run's summary
(issue 14, row 6: +1.08 MB over 6,251 switches).
"""

from __future__ import annotations

import gc
import itertools
import tracemalloc
from collections.abc import Callable, Iterator

import numpy as np

from sbrs.app import App
from sbrs.run.loop import FrameRecord, run_frames
from sbrs.runtime import runtime_for
from tests.runtime.conftest import random_frame

WARM_UP = 1000
MEASURED = 4000


def test_memory_per_switch_is_constant(load_example: Callable[[str], App]) -> None:
    app = load_example("tiny")
    frame = random_frame(app, 0)
    traced: dict[int, int] = {}
    with runtime_for(app) as runtime:
        scenarios = itertools.cycle(runtime.scenarios)

        def switching_frames() -> Iterator[np.ndarray]:
            while True:
                runtime.switch(next(scenarios), "socket")
                yield frame

        def on_frame(record: FrameRecord) -> None:
            if record.index in (WARM_UP, WARM_UP + MEASURED):
                gc.collect()
                traced[record.index] = tracemalloc.get_traced_memory()[0]

        tracemalloc.start()
        try:
            summary = run_frames(runtime, switching_frames(), limit=WARM_UP + MEASURED + 1, on_frame=on_frame)
        finally:
            tracemalloc.stop()
    assert summary.switch_count >= (WARM_UP + MEASURED) // 2
    growth = traced[WARM_UP + MEASURED] - traced[WARM_UP]
    assert growth < 16 * MEASURED, f"{growth} bytes more after {MEASURED} frames, each with a switch request"
