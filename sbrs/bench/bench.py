"""``sbrs bench``: throughput of every scenario against its own model in plain ONNX Runtime, and device memory.

Throughput (DESIGN.md, "Benchmarks": ratios against a baseline in the same process and run, interleaved,
medians): for each scenario, sbrs (``process`` over a stream of frames, as ``sbrs run`` feeds it: one frame
after another, or two at once on band streams) and plain ONNX Runtime running the scenario's own ONNX file as a
user would at its best settings, each measured: a session with ONNX Runtime's default options (its intra-op
threads on every core), and two frames at once on two threads sharing one session of one intra-op thread each
(``session.run`` with a feed dict). They run alternate blocks of ``frames`` frames (more where that is shorter
than ``MIN_BLOCK_S``), ``repeats`` times; each fps is the median over its blocks, ``ort_fps`` the better of the
two plain settings and ``ratio`` = sbrs fps / ``ort_fps``. Each block starts ``DEFAULT_SPIN_SETTLE_S`` after the
one before: the default session's threads spin on after its block, and two frames at once timed in that moment ran
at one thread's speed (``sbrs.ort_env``).

Device memory (``sbrs.bench.device_memory``): ``sbrs run``, ``sbrs.runtime_for(app.yaml)`` and plain ONNX
Runtime in fresh processes, every scenario run, PSS and RSS read from outside above a bare interpreter, with the
plan and where the memory goes.
"""

from __future__ import annotations

import itertools
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from sbrs.compile.unit_streams import two_frames_at_once
from sbrs.errors import InputError
from sbrs.ort_env import DEFAULT_SPIN_SETTLE_S
from sbrs.runtime.open import runtime_for

WARMUP_FRAMES = 3


def resident_bytes() -> tuple[int, int]:
    """(current, peak) resident set size of this process in bytes, from /proc (Linux), else (peak, peak)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            fields = dict(line.split(":", 1) for line in status if ":" in line)
        return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return peak, peak


#: The shortest block of frames timed (seconds at the fastest side's warm-up speed): 20 frames of 0.05-0.1 ms
#: (tiny, pamap2) gave ratios from 0.17 to 1.2 between scenarios of one app in one run.
MIN_BLOCK_S = 0.05


#: Seconds each side runs before it is timed: one block of 20 frames was not enough for the first scenario of a
#: run (tiny's first scenario timed at 0.31-0.50 of plain ONNX Runtime after one warm-up block, 0.93 after three).
WARM_UP_S = 0.3


def _warmed(measure: Callable[[], float]) -> float:
    """Run ``measure`` for at least ``WARM_UP_S``; its last fps."""
    time.sleep(DEFAULT_SPIN_SETTLE_S)
    end = time.perf_counter() + WARM_UP_S
    fps = measure()
    while time.perf_counter() < end:
        fps = measure()
    return fps


def _fps(run_frame: Callable[[], object], frames: int) -> float:
    start = time.perf_counter()
    for _ in range(frames):
        run_frame()
    return frames / (time.perf_counter() - start)


def _fps_stream(runtime: Any, frame: np.ndarray, frames: int) -> float:
    """``frames`` frames through ``runtime.process``, the frame loop of ``sbrs run`` (band streams keep two in
    flight), as each result reaches the caller; frames per second."""
    start = time.perf_counter()
    for _ in runtime.process(itertools.repeat(frame, frames)):
        pass
    return frames / (time.perf_counter() - start)


def _sides(runtime: Any, default: Any, single: Any, feed: dict[str, np.ndarray],
           frames: int) -> dict[str, Callable[[], float]]:
    """Each way of running one scenario, as a measurement of its fps over ``frames`` frames."""
    frame = next(iter(feed.values()))
    return {"sbrs": lambda: _fps_stream(runtime, frame, frames),
            "ort_threads": lambda: _fps(lambda: default.run(None, feed), frames),
            # half the frames on this thread, half on another, both let go at once: as the build times it
            "ort_two_frames": lambda: 1 / two_frames_at_once([(single, feed)], max(frames, 2) // 2)}


def measure_throughput(app_path: str, *, frames: int, repeats: int, granularity: str | None) -> dict[str, Any]:
    """The fps part of the benchmark, in this process (module docstring)."""
    import onnxruntime as ort

    from sbrs.app import load_app
    from sbrs.model.input_size import plain_model_file

    app = load_app(app_path)
    runtime = runtime_for(app, granularity=granularity)
    frame = np.random.default_rng(0).standard_normal(app.config.input.shape).astype(app.config.input.dtype)
    scenarios: dict[str, Any] = {}
    facts = runtime.facts()  # units or band calls (``sbrs.runtime.engine``): the same figures
    one_thread = ort.SessionOptions()
    one_thread.intra_op_num_threads = 1
    scratch = tempfile.TemporaryDirectory(prefix="sbrs-bench-")  # plain models behind a scenario's Resize
    with runtime, scratch:
        for scenario in app.config.scenarios:
            plain = plain_model_file(scenario.model_path, app.config.input.shape, scenario.input_size, scratch.name)
            default = ort.InferenceSession(plain, providers=list(runtime.providers))
            single = ort.InferenceSession(plain, one_thread, providers=list(runtime.providers))
            feed = {default.get_inputs()[0].name: frame}
            runtime.switch(scenario.name)
            sides = _sides(runtime, default, single, feed, frames)
            samples: dict[str, list[float]] = {side: [] for side in sides}
            warm = [_warmed(measure) for measure in sides.values()]  # how fast a frame is, once warm
            block = max(frames, math.ceil(MIN_BLOCK_S * max(warm)))
            if block > frames:  # sub-millisecond frames: blocks of MIN_BLOCK_S at least
                sides = _sides(runtime, default, single, feed, block)
            for _ in range(repeats):
                for side, measure in sides.items():
                    time.sleep(DEFAULT_SPIN_SETTLE_S)  # the default session's threads spin on after its block
                    samples[side].append(measure())
            del default, single
            fps = {side: statistics.median(values) for side, values in samples.items()}
            best = max(fps["ort_threads"], fps["ort_two_frames"])
            scenarios[scenario.name] = {
                "fps": round(fps["sbrs"], 3), "ort_fps": round(best, 3), "ratio": round(fps["sbrs"] / best, 4),
                "ort_fps_threads": round(fps["ort_threads"], 3), "ort_fps_two_frames": round(fps["ort_two_frames"], 3),
                "ort_best": "threads" if fps["ort_threads"] >= fps["ort_two_frames"] else "two_frames",
                "units_per_frame": facts["steps"][scenario.name]}
        return {"app": app.name, "granularity": facts["granularity"], "units": facts["units"],
                "arena_bytes": runtime.arena_bytes, "frames": frames, "repeats": repeats,
                "threads": runtime.thread_pool.count, "threads_scope": runtime.thread_pool.scope,
                "scenarios": scenarios}


def current_build(app_path: str) -> None:
    """Make the app's build first (in a child process) unless it is current: every figure of ``sbrs bench`` is
    of what ``sbrs run`` would run, and an app under a memory limit runs the band heights ``sbrs build``
    searched."""
    from sbrs.artifact.child import build_in_child
    from sbrs.artifact.read import build_dir, verify_build
    from sbrs.bench.device_memory import build_facts

    try:
        verify_build(build_dir(app_path), app_path)
        build_facts(app_path)  # plain ONNX Runtime's side needs each scenario's model file too
    except InputError:
        build_in_child(app_path)


def bench_app(app_path: str, *, frames: int = 20, repeats: int = 3, granularity: str | None = None,
              memory: bool = True) -> dict[str, Any]:
    """The whole ``sbrs bench`` report as one JSON-ready dictionary."""
    if frames < 1 or repeats < 1:
        raise InputError(f"--frames {frames}, --repeats {repeats}: both must be >= 1")
    current_build(app_path)
    report = measure_throughput(app_path, frames=frames, repeats=repeats, granularity=granularity)
    if memory:
        from sbrs.bench.device_memory import measure_device_memory

        report["device_memory"] = measure_device_memory(app_path)
    return report


def format_report(report: dict[str, Any]) -> str:
    """A table for people: fps per scenario against plain ORT at its best setting, then device memory."""
    lines = [f"app {report['app']}: granularity {report['granularity']}, {report['units']} units, arena "
             f"{report['arena_bytes'] / 1e6:.2f} MB, {report['threads']} threads per unit session "
             f"({report['threads_scope']}), median of {report['repeats']} blocks of {report['frames']} frames",
             "plain ORT: default options (intra-op threads), or two frames at once on one-thread sessions; "
             "the ratio is against the better",
             f"{'scenario':<16} {'units/frame':>11} {'sbrs fps':>10} {'ORT threads':>12} {'ORT 2 frames':>13} "
             f"{'ratio':>7}"]
    for name, row in report["scenarios"].items():
        lines.append(f"{name:<16} {row['units_per_frame']:>11} {row['fps']:>10.2f} {row['ort_fps_threads']:>12.2f} "
                     f"{row['ort_fps_two_frames']:>13.2f} {row['ratio']:>7.3f}")
    if "device_memory" in report:
        from sbrs.bench.device_memory import format_device_memory

        lines.append(format_device_memory(report["device_memory"]))
    return "\n".join(lines)
