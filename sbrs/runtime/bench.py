"""``sbrs bench``: throughput of every scenario against its own model in plain ONNX Runtime, and process memory.

Throughput (DESIGN.md, "Benchmarks": ratios against a baseline in the same process and run, interleaved,
medians): for each scenario, sbrs and a standalone ONNX Runtime session of the scenario's own ONNX file (same
providers, same global thread pool, ``session.run`` with a feed dict, as a plain ORT user would) run
alternate blocks of ``frames`` frames, ``repeats`` times; each side's fps is the median over its blocks and
``ratio`` = sbrs fps / ORT fps.

Process memory: fresh interpreters started in this run one after another, each figure its resident set
size (VmRSS; peak VmHWM, which covers loading and switching through every scenario) minus that of a *bare*
interpreter that imported numpy and onnxruntime and not sbrs, so sbrs' own imports count against it. The sbrs
probe runs the app's verified build (``sbrs.build``), as ``sbrs run`` does; the ORT probes load every
scenario's ONNX file as its own session, or only the initial scenario's. Every loaded scenario runs warm-up
frames before the figures are read.
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from sbrs.errors import InputError, SbrsRuntimeError

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


def _fps(run_frame: Callable[[], object], frames: int) -> float:
    start = time.perf_counter()
    for _ in range(frames):
        run_frame()
    return frames / (time.perf_counter() - start)


def measure_throughput(app_path: str, *, frames: int, repeats: int, granularity: str | None) -> dict[str, Any]:
    """The fps part of the benchmark, in this process (module docstring)."""
    from sbrs.app import load_app
    from sbrs.runtime.device import create_session

    app = load_app(app_path)
    runtime = app.runtime(granularity=granularity)
    rng = np.random.default_rng(0)
    frame = rng.standard_normal(app.config.input.shape).astype(app.config.input.dtype)
    scenarios: dict[str, Any] = {}
    with runtime:
        for scenario in app.config.scenarios:
            session = create_session(scenario.model_path, runtime.providers)
            feed = {session.get_inputs()[0].name: frame}
            runtime.switch(scenario.name)

            def run_sbrs() -> object:
                return runtime.infer(frame)

            def run_ort(session: Any = session, feed: dict[str, np.ndarray] = feed) -> object:
                return session.run(None, feed)

            _fps(run_sbrs, WARMUP_FRAMES)
            _fps(run_ort, WARMUP_FRAMES)
            sbrs_fps, ort_fps = [], []
            for _ in range(repeats):
                sbrs_fps.append(_fps(run_sbrs, frames))
                ort_fps.append(_fps(run_ort, frames))
            del session
            fps, baseline = statistics.median(sbrs_fps), statistics.median(ort_fps)
            scenarios[scenario.name] = {"fps": round(fps, 3), "ort_fps": round(baseline, 3),
                                        "ratio": round(fps / baseline, 4),
                                        "units_per_frame": len(runtime.plan.sequences[scenario.name])}
        return {"app": app.name, "granularity": runtime.plan.granularity, "units": len(runtime.plan.units),
                "arena_bytes": runtime.arena_bytes, "frames": frames, "repeats": repeats,
                "threads": runtime.thread_pool.requested, "scenarios": scenarios}


# -- process memory, each figure in its own fresh interpreter ---------------------------------------------


def _child(mode: str, argument: dict[str, Any]) -> dict[str, int]:
    """Run ``rss_child(mode, argument)`` in a fresh interpreter and return its JSON answer.

    The ``bare`` probe imports numpy and onnxruntime only (not sbrs): the baseline every figure is above.
    """
    if mode in ("bare", "ort"):  # plain scripts: nothing of sbrs is imported in these probes
        command = [sys.executable, "-c", _PLAIN_PROBE, mode, json.dumps({**argument, "warmup": WARMUP_FRAMES})]
    else:
        code = "import json, sys; from sbrs.runtime.bench import rss_child; print(json.dumps(rss_child(sys.argv[1], " \
               "json.loads(sys.argv[2]))))"
        command = [sys.executable, "-c", code, mode, json.dumps(argument)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SbrsRuntimeError(f"bench: the {mode} memory probe failed: {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])


_PLAIN_PROBE = """
import gc, json, sys
import numpy as np, onnxruntime as ort
mode, argument = sys.argv[1], json.loads(sys.argv[2])
if mode == "ort":
    ort.set_global_thread_pool_sizes(int(argument["threads"]), 1)
    options = ort.SessionOptions()
    options.use_per_session_threads = False
    options.log_severity_level = 3
    sessions = [ort.InferenceSession(path, options, providers=argument["providers"]) for path in argument["models"]]
    frame = np.zeros(argument["shape"], argument["dtype"])
    for session in sessions:
        for _ in range(argument["warmup"]):
            session.run(None, {session.get_inputs()[0].name: frame})
gc.collect()
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
print(json.dumps({"rss": int(status["VmRSS"].split()[0]) * 1024, "peak": int(status["VmHWM"].split()[0]) * 1024}))
"""


def rss_child(mode: str, argument: dict[str, Any]) -> dict[str, int]:
    """In a fresh interpreter: the app's build in sbrs (``sbrs``), every scenario warmed up; the ORT and bare
    probes are plain scripts (``_PLAIN_PROBE``)."""
    if mode == "sbrs":
        from sbrs.build.artifact import load_build
        from sbrs.runtime.executor import Runtime

        build = load_build(argument["app"])
        runtime = Runtime(build=build)
        frame = np.zeros(build.config.input.shape, build.config.input.dtype)
        for scenario in runtime.scenarios:
            runtime.switch(scenario)
            for _ in range(WARMUP_FRAMES):
                runtime.infer(frame)
    else:
        raise ValueError(f"unknown memory probe {mode!r}")
    gc.collect()
    rss, peak = resident_bytes()
    return {"rss": rss, "peak": peak}


def measure_memory(app_path: str, *, granularity: str | None) -> dict[str, Any]:
    """Steady and peak RSS above a bare interpreter (numpy and onnxruntime imported, not sbrs), each in a fresh
    process: sbrs running the app's current build (made first if needed), plain ORT with all N scenario
    sessions, and plain ORT with only the initial scenario's session. Granularity ``layer`` has no build."""
    from sbrs.app.config import load_app_config
    from sbrs.build.artifact import build_dir, compile_in_child, verify_build
    from sbrs.runtime.device import resolve_providers

    config = load_app_config(app_path)
    providers = resolve_providers(tuple(config.runtime.providers), where=config.path)
    try:
        verify_build(build_dir(app_path), app_path)
    except InputError:
        compile_in_child(app_path)
    bare = _child("bare", {})
    sbrs = _child("sbrs", {"app": app_path})
    common = {"providers": list(providers), "threads": config.runtime.threads or _cpu_count(),
              "shape": list(config.input.shape), "dtype": config.input.dtype}
    ort = _child("ort", {"models": [s.model_path for s in config.scenarios], **common})
    active = _child("ort", {"models": [config.scenario(config.initial).model_path], **common})
    rss, ort_rss = sbrs["rss"] - bare["rss"], ort["rss"] - bare["rss"]
    return {"rss_bytes": rss, "ort_rss_bytes": ort_rss, "rss_ratio": round(rss / ort_rss, 4) if ort_rss > 0 else None,
            "bare_rss_bytes": bare["rss"], "peak_rss_bytes": sbrs["peak"] - bare["rss"],
            "ort_peak_rss_bytes": ort["peak"] - bare["rss"], "ort_active_rss_bytes": active["rss"] - bare["rss"],
            "ort_active_peak_rss_bytes": active["peak"] - bare["rss"]}


def _cpu_count() -> int:
    import os

    return os.cpu_count() or 1


def bench_app(app_path: str, *, frames: int = 20, repeats: int = 3, granularity: str | None = None,
              memory: bool = True) -> dict[str, Any]:
    """The whole ``sbrs bench`` report as one JSON-ready dictionary."""
    if frames < 1 or repeats < 1:
        raise InputError(f"--frames {frames}, --repeats {repeats}: both must be >= 1")
    report = measure_throughput(app_path, frames=frames, repeats=repeats, granularity=granularity)
    if memory:
        report.update(measure_memory(app_path, granularity=granularity))
    return report


def format_report(report: dict[str, Any]) -> str:
    """A table for people: fps per scenario against ORT, then process memory."""
    lines = [f"app {report['app']}: granularity {report['granularity']}, {report['units']} units, arena "
             f"{report['arena_bytes'] / 1e6:.2f} MB, {report['threads']} threads, median of {report['repeats']} "
             f"blocks of {report['frames']} frames",
             f"{'scenario':<16} {'units/frame':>11} {'sbrs fps':>10} {'ORT fps':>10} {'ratio':>7}"]
    for name, row in report["scenarios"].items():
        lines.append(f"{name:<16} {row['units_per_frame']:>11} {row['fps']:>10.2f} {row['ort_fps']:>10.2f} "
                     f"{row['ratio']:>7.3f}")
    if "rss_bytes" in report:
        ratio = report["rss_ratio"]
        lines.append("process memory, MB above a bare interpreter with numpy and onnxruntime "
                     f"({report['bare_rss_bytes'] / 1e6:.1f} MB), steady / peak:")
        for label, steady, peak in (("sbrs (from its build)", "rss_bytes", "peak_rss_bytes"),
                                    ("ORT, all N sessions", "ort_rss_bytes", "ort_peak_rss_bytes"),
                                    ("ORT, active one only", "ort_active_rss_bytes", "ort_active_peak_rss_bytes")):
            lines.append(f"  {label:<22} {report[steady] / 1e6:>7.1f} / {report[peak] / 1e6:>7.1f}")
        lines.append(f"  steady ratio sbrs / ORT all N: {ratio if ratio is None else f'{ratio:.3f}'}")
    return "\n".join(lines)


# -- switching: the response delay Δ of every ordered pair (thesis Figure 5.7) ----------------------------


def measure_switching(app_path: str, *, repeats: int = 7, granularity: str | None = None,
                      transition_arena: str | None = None, ssr_steps: str = "all") -> dict[str, Any]:
    """Δ for every ordered pair o → n under naive switching and SBRS-TP, as in thesis Figure 5.7.

    Both modes are measured on the SBRS-TP runtime (``transition_arena``, default ``shadow``), so the SSR
    arrives at the same step of the same units; the arena a naive runtime would need (``shared`` arena, no
    switch cuts) is planned, not loaded, for the report. For each pair and each SSR step s (``ssr_steps``: ``first`` or
    ``all`` old steps; the SSR arrives as old step s starts, ``Runtime.measure_switch``), the two modes run
    alternately ``repeats`` times and each Δ is the median (DESIGN.md, "Benchmarks"). ``naive_s``/``tp_s``:
    s = 1 (Figure 5.7); ``naive_avg_s``/``tp_avg_s``: mean over s. ``new_latency_s``: median latency of a
    frame on n alone, the physical floor of Δ when the SSR arrives at a frame boundary.
    """
    from sbrs.app import load_app
    from sbrs.runtime.executor import build_unit_plan

    if repeats < 1:
        raise InputError(f"--repeats {repeats}: must be >= 1")
    app = load_app(app_path)
    shape, dtype = app.config.input.shape, app.config.input.dtype
    rng = np.random.default_rng(0)
    frames = (rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype))
    naive_arena_bytes = build_unit_plan(app, granularity, transition="naive").arena_bytes
    tp = app.runtime(granularity=granularity, transition="sbrs-tp", transition_arena=transition_arena)
    del app
    pairs: dict[str, Any] = {}
    with tp:
        scenarios = tp.scenarios
        latency: dict[str, float] = {}
        for scenario in scenarios:
            tp.switch(scenario, "bench")
            for _ in range(WARMUP_FRAMES):
                tp.infer(frames[0])
            times = []
            for _ in range(max(repeats, 5)):
                start = time.perf_counter()
                tp.infer(frames[0])
                times.append(time.perf_counter() - start)
            latency[scenario] = statistics.median(times)
        for old in scenarios:
            for new in scenarios:
                if old == new:
                    continue
                steps = len(tp.plan.sequences[old])
                chosen = [1] if ssr_steps == "first" else list(range(1, steps + 1))
                by_step: dict[str, list[float]] = {"naive": [], "tp": []}
                overlapped = 0
                for step in chosen:
                    samples: dict[str, list[float]] = {"naive": [], "tp": []}
                    for _ in range(repeats):
                        # Both modes run on the same steps (the SSR arrives at the same point of the old
                        # frame); naive switching waits for the frame boundary whatever the arena.
                        samples["naive"].append(tp.measure_switch(old, new, frames, ssr_step=step, mode="naive")
                                                .response_delay_s)
                        record = tp.measure_switch(old, new, frames, ssr_step=step)
                        samples["tp"].append(record.response_delay_s)
                        if step == 1:
                            overlapped = record.overlapped_steps
                    for key in by_step:
                        by_step[key].append(statistics.median(samples[key]))
                naive_s, tp_s = by_step["naive"][0], by_step["tp"][0]
                pairs[f"{old}->{new}"] = {
                    "naive_s": round(naive_s, 7), "tp_s": round(tp_s, 7), "new_latency_s": round(latency[new], 7),
                    "naive_avg_s": round(statistics.mean(by_step["naive"]), 7),
                    "tp_avg_s": round(statistics.mean(by_step["tp"]), 7),
                    "tp_over_naive": round(tp_s / naive_s, 4), "tp_over_new_latency": round(tp_s / latency[new], 4),
                    "old_steps": steps, "new_steps": len(tp.plan.sequences[new]), "overlapped_steps": overlapped,
                }
        ratios = [row["tp_over_naive"] for row in pairs.values()]
        return {"app": tp.plan.app, "granularity": tp.plan.granularity, "repeats": repeats, "ssr_steps": ssr_steps,
                "transition_arena": tp.transitions.arena, "arena_bytes": tp.arena_bytes,
                "naive_arena_bytes": naive_arena_bytes, "schedule": tp.transition_schedule,
                "mean_tp_over_naive": round(statistics.mean(ratios), 4) if ratios else None,
                "pairs": pairs}


def format_switching(report: dict[str, Any]) -> str:
    """Figure 5.7 as a table: Δ per ordered pair under naive and SBRS-TP, in milliseconds."""
    lines = [f"app {report['app']}: switch response delay Δ (ms), granularity {report['granularity']}, SBRS-TP arena "
             f"{report['transition_arena']} {report['arena_bytes']} bytes (naive {report['naive_arena_bytes']}), "
             f"median of {report['repeats']}",
             f"{'pair':<26} {'naive':>8} {'tp':>8} {'tp/naive':>8} {'new frame':>9} {'tp/new':>7} {'naive avg':>9} "
             f"{'tp avg':>8}"]
    for key, row in report["pairs"].items():
        lines.append(f"{key:<26} {row['naive_s'] * 1e3:>8.3f} {row['tp_s'] * 1e3:>8.3f} {row['tp_over_naive']:>8.3f} "
                     f"{row['new_latency_s'] * 1e3:>9.3f} {row['tp_over_new_latency']:>7.3f} "
                     f"{row['naive_avg_s'] * 1e3:>9.3f} {row['tp_avg_s'] * 1e3:>8.3f}")
    lines.append(f"mean tp/naive {report['mean_tp_over_naive']}")
    return "\n".join(lines)
