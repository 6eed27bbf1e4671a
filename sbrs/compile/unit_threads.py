"""How many intra-op threads each execution unit runs on, measured on this machine when the build is made.

A unit's session has ``runtime.threads`` threads of its own (default: every core). A pool pays for its
threads on every call: they sleep between calls (they must, or idle pools of other units take the cores) and
are woken by the next, some 20-50 µs a call on this 2-core machine, while a small unit's layers leave a second
thread little to do. pamap2 (0.1 ms a frame) with every unit on one thread ran at 0.78-0.87 of plain ONNX
Runtime's better setting against 0.65-0.80 on two; tiny the other way (0.56-0.61 against 0.68-0.88), though
two of its three units alone measured faster on one while their pools slept. A unit that is a scenario's whole
frame keeps its pool warm instead (``whole_frame_units``, ``sbrs.ort_env``), and is measured so. So the build
times each small unit both ways, interleaved, and keeps one thread where that was faster; a unit whose call
takes longer than ``MEASURED_MAX_S`` on the pool keeps it without more measuring, as does every unit when the
app sets ``runtime.threads`` or ``threads_scope: process``. The choice is the build's (``unit_threads`` in the
manifest), never a test's: timing decides only what the build records.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence

import numpy as np

#: Units whose call takes longer than this on the pool keep it unmeasured: their layers split well (ResNet-18
#: units of 2-8 ms ran 1.7-1.9x faster on two threads than on one here), and the build stays quick.
MEASURED_MAX_S = 0.0005
#: Interleaved rounds per unit, and the shortest timed block of calls (seconds).
ROUNDS = 5
MIN_BLOCK_S = 0.002


def _block(session: object, feed: dict[str, np.ndarray], calls: int) -> float:
    run = session.run  # type: ignore[attr-defined]
    start = time.perf_counter()
    for _ in range(calls):
        run(None, feed)
    return (time.perf_counter() - start) / calls


def whole_frame_units(sequences: Mapping[str, Sequence[str]]) -> frozenset[str]:
    """The units that are some scenario's whole frame (its one step): called frame after frame, their pools
    are kept warm (``sbrs.ort_env``, "warm")."""
    return frozenset(steps[0] for steps in sequences.values() if len(steps) == 1)


def measure_unit_threads(paths: Mapping[str, str], providers: tuple[str, ...], threads: int,
                         *, optimized: bool, warm: Collection[str] = ()) -> dict[str, int]:
    """The units of ``paths`` (unit id → model file) that ran faster on one thread than on ``threads``, each
    mapped to 1 (medians of ``ROUNDS`` interleaved blocks on random inputs of the unit's shapes); the pools of
    the units in ``warm`` are measured warm, as the runtime runs them."""
    import statistics  # only a build measures: the runtime imports this module for ``whole_frame_units``

    from sbrs.ort_env import create_session

    chosen: dict[str, int] = {}
    rng = np.random.default_rng(0)
    warm_units = frozenset(warm)
    for unit, path in paths.items():
        pool = create_session(path, providers, threads=threads, optimized=optimized, warm=unit in warm_units)
        feed = random_feed(pool, rng)
        first = _block(pool, feed, 3)
        if first > MEASURED_MAX_S:
            continue
        sessions = {threads: pool, 1: create_session(path, providers, threads=1, optimized=optimized)}
        calls = max(1, int(MIN_BLOCK_S / max(first, 1e-6)))
        samples: dict[int, list[float]] = {count: [] for count in sessions}
        _block(sessions[1], feed, 3)
        for _ in range(ROUNDS):
            for count, session in sessions.items():
                samples[count].append(_block(session, feed, calls))
        if statistics.median(samples[1]) < statistics.median(samples[threads]):
            chosen[unit] = 1
    return chosen


def random_feed(session: object, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random inputs of ``session``'s shapes and types (a unit's inputs have fixed shapes)."""
    return {i.name: rng.standard_normal([int(d) for d in i.shape]).astype(numpy_type(i.type))
            for i in session.get_inputs()}  # type: ignore[attr-defined]


def numpy_type(onnx_type: str) -> np.dtype:
    """numpy's dtype for ONNX Runtime's ``tensor(float)``-style type names."""
    names = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
             "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(int32)": np.int32,
             "tensor(int64)": np.int64, "tensor(bool)": np.bool_}
    return np.dtype(names.get(onnx_type, np.float32))
