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

import contextlib
import gc
import itertools
import math
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from sbrs.compile.unit_streams import two_frames_at_once
from sbrs.errors import InputError, SbrsRuntimeError
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


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


# -- switching: the response delay Δ as the caller sees it (thesis Figure 5.7, measured from outside) ------

#: How the switches are made in ``measure_switching``: sbrs under SBRS-TP and naive switching, plain ONNX
#: Runtime with every scenario's session loaded (switch at the frame boundary), and ONNX Runtime loading the
#: new scenario's session when the switch comes (the two things a user would do without sbrs); the default.
#: Besides, when the frame in flight may be given up: sbrs with ``on_switch: cancel`` and plain ONNX Runtime
#: stopping its call through ``RunOptions.terminate``, each running that frame again on the new scenario; and
#: sbrs with ``on_switch: resume`` (``resume``), continuing that frame on the new scenario from the layers both
#: share (beyond the thesis; its resumed outputs are checked against the new scenario's own model).
DEFAULT_SWITCH_METHODS: tuple[str, ...] = ("sbrs-tp", "sbrs-naive", "ort-all", "ort-load")
SWITCH_METHODS: tuple[str, ...] = (*DEFAULT_SWITCH_METHODS, "sbrs-cancel", "ort-cancel", "resume")
#: Seconds a single Δ sample may stream frames before the bench gives up on it. The request thread may wait
#: for a core and the GIL for milliseconds (its request time is taken once it runs, so Δ is not affected).
MAX_SAMPLE_S = 5.0


class Requester:
    """One long-lived thread that makes each sample's switch request: armed with a delay and a request
    (``arm``), it waits that long, notes the time and asks (``ask()``), so the request arrives at a random
    point of a frame from another thread, as a socket or policy request would. ``join`` waits for the request
    and gives its time.

    One thread for every sample, as a server has one: a thread started per sample ends right after its request
    while the frame loop runs, and on two cores its exit (Python code holding the GIL) sometimes stalled the
    loop for milliseconds, whichever side was measured.
    """

    def __init__(self) -> None:
        self._armed = threading.Condition()
        self._work: tuple[float, Callable[[], None]] | None = None
        self._done = threading.Event()
        self._requested = 0.0
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="sbrs-bench-request", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._armed:
                while self._work is None and not self._stop:
                    self._armed.wait()
                if self._stop:
                    return
                assert self._work is not None
                delay_s, ask = self._work
                self._work = None
            time.sleep(delay_s)
            self._requested = time.perf_counter()
            ask()
            self._done.set()

    def arm(self, delay_s: float, ask: Callable[[], None]) -> None:
        self._done.clear()
        with self._armed:
            self._work = (delay_s, ask)
            self._armed.notify()

    def join(self) -> float:
        self._done.wait()
        return self._requested

    def close(self) -> None:
        with self._armed:
            self._stop = True
            self._armed.notify()
        self._thread.join()


def sbrs_delay(runtime: Any, old: str, new: str, frame: np.ndarray, delay_s: float, mode: str,
                request: Requester, check: Callable[[Any], None] | None = None) -> tuple[float, float]:
    """One caller-side Δ of sbrs: frames stream on ``old``, the request comes ``delay_s`` after the stream
    starts; Δ = request → the caller holds the first result of ``new``. Also the runtime's own record of it.
    ``check`` gets that first result once Δ is taken (the resumed frame's outputs and record)."""
    runtime.switch(old, "bench")
    runtime.infer(frame)  # settled on old, nothing pending

    def stream() -> Iterator[np.ndarray]:
        request.arm(delay_s, lambda: runtime.switch(new, "bench"))
        end = time.perf_counter() + MAX_SAMPLE_S
        while time.perf_counter() < end:
            yield frame

    results = runtime.process_with_hooks(stream(), mode=mode)
    try:
        for result in results:
            if result.scenario == new:
                held = time.perf_counter()
                internal = result.switch.response_delay_s if result.switch is not None else float("nan")
                delay = held - request.join()
                if check is not None:
                    check(result)
                return delay, internal
    finally:
        results.close()  # a transition's old frame still finishes (``sbrs.runtime.switching.Transition.deliver``)
    raise SbrsRuntimeError(f"bench: the switch {old}->{new} did not happen within {MAX_SAMPLE_S} s")


def ort_delay(sessions: dict[str, Any], old: str, new: str, feed_name: str, frame: np.ndarray, delay_s: float,
               load: Callable[[str], Any] | None, request: Requester, cancel: Any = None) -> float:
    """One caller-side Δ of plain ONNX Runtime, the same request thread: the loop switches session at the frame
    boundary; with ``load``, the new session is created then (and the old one dropped; ``sessions`` is not read),
    else all are loaded.
    With ``cancel`` (an ``ort.RunOptions`` every run gets), the request also sets its ``terminate``: the call
    in flight stops, and the loop runs that frame again on the new session."""
    active = {old: sessions[old]} if load is None else {old: load(old)}
    current = old
    wanted = [old]
    active[old].run(None, {feed_name: frame})

    def ask() -> None:
        wanted[0] = new
        if cancel is not None:
            cancel.terminate = True

    def stream() -> Iterator[np.ndarray]:  # the same frame source as sbrs gets
        request.arm(delay_s, ask)
        end = time.perf_counter() + MAX_SAMPLE_S
        while time.perf_counter() < end:
            yield frame

    for arrays in stream():
        while True:
            if wanted[0] != current:
                current = wanted[0]
                if load is not None:
                    active = {current: load(current)}
            try:
                (active[current] if current in active else sessions[current]).run(None, {feed_name: arrays}, cancel)
                break
            except Exception as error:  # onnxruntime's ``Fail``: stopped by ``terminate`` (set only with ``cancel``)
                if cancel is None or "terminate flag" not in str(error):
                    raise
                cancel.terminate = False
        if current == new:
            return time.perf_counter() - request.join()
    raise SbrsRuntimeError(f"bench: the ORT switch {old}->{new} did not happen within {MAX_SAMPLE_S} s")


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"mean_s": round(statistics.fmean(ordered), 7), "p95_s": round(p95, 7)}


def measure_switching(app_path: str, *, repeats: int = 10, granularity: str | None = None,
                      transition_arena: str | None = None, methods: tuple[str, ...] = DEFAULT_SWITCH_METHODS,
                      seed: int = 0) -> dict[str, Any]:
    """Δ for every ordered pair o → n, seen from the caller, for each of ``methods`` (``SWITCH_METHODS``).

    One sample: frames stream on o back to back; a thread makes the switch request after a random delay,
    uniform over one frame of o (ONNX Runtime's median frame time), so the request lands at a random point of
    a frame; Δ runs from the moment the thread makes the request to the moment the caller holds the first
    output of n (``Runtime.process`` in completion order for sbrs). Every repetition draws one delay and runs
    every method with it, in a shuffled order (DESIGN.md, "Benchmarks": the alternatives in the same run,
    interleaved). Reported per pair and over all pairs: mean and p95 per method, the ratios of the means to
    ``ort-all`` (and of ``sbrs-cancel`` to ``ort-cancel``), and beside them the runtime's own record of Δ
    (``SwitchRecord``; from the request's arrival at the control node to the new output's copy-out, before the
    caller has it). ``resume``: also how many samples continued the frame in flight (``resumed``: the record's
    ``resumed_steps`` > 0), the mean of ``resumed_steps``, and ``mismatches``: first results of the new scenario
    whose outputs differ from its own model's on the frame (DESIGN.md invariant 1's tolerance; must be 0).
    """
    import random

    from sbrs.app import load_app
    from sbrs.model.input_size import plain_model_file
    from sbrs.ort_env import create_session

    unknown = [m for m in methods if m not in SWITCH_METHODS]
    if repeats < 1 or unknown or not methods:
        raise InputError(f"--repeats {repeats} must be >= 1 and methods among {', '.join(SWITCH_METHODS)}"
                         + (f" (got {', '.join(unknown)})" if unknown else ""))
    current_build(app_path)
    app = load_app(app_path)
    shape, dtype = app.config.input.shape, app.config.input.dtype
    frame = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    scratch = tempfile.TemporaryDirectory(prefix="sbrs-bench-")  # removed when the function returns
    paths = {s.name: plain_model_file(s.model_path, shape, s.input_size, scratch.name) for s in app.config.scenarios}
    runtime = runtime_for(app, granularity=granularity, transition="sbrs-tp", transition_arena=transition_arena)
    cancelling = runtime_for(app, granularity=granularity, on_switch="cancel") if "sbrs-cancel" in methods else None
    resuming = runtime_for(app, granularity=granularity, on_switch="resume") if "resume" in methods else None
    del app
    rng = random.Random(seed)
    with runtime, contextlib.nullcontext() if cancelling is None else cancelling, \
            contextlib.nullcontext() if resuming is None else resuming:
        providers = runtime.providers
        threads = runtime.thread_pool.count  # plain sessions whose idle pools stop spinning, as sbrs' do
        sessions = {name: create_session(path, providers, threads=threads) for name, path in paths.items()}
        feed_name = next(iter(sessions.values())).get_inputs()[0].name

        def load(name: str) -> Any:
            return create_session(paths[name], providers, threads=threads)

        frame_s: dict[str, float] = {}
        for name, session in sessions.items():
            for _ in range(WARMUP_FRAMES):
                session.run(None, {feed_name: frame})
                for warmed in (runtime, cancelling, resuming):
                    if warmed is not None:
                        warmed.switch(name, "bench")
                        warmed.infer(frame)
            times = []
            for _ in range(max(5, repeats)):
                start = time.perf_counter()
                session.run(None, {feed_name: frame})
                times.append(time.perf_counter() - start)
            frame_s[name] = statistics.median(times)
        import onnxruntime as ort

        terminate = ort.RunOptions()
        # the reference of every scenario on the frame, and what the resumed first results were
        references = {name: dict(zip([o.name for o in session.get_outputs()], session.run(None, {feed_name: frame}),
                                     strict=True)) for name, session in sessions.items()} if resuming else {}
        resumed: dict[str, list[int]] = {}
        mismatches = [0]

        def check_resumed(result: Any) -> None:
            record = result.switch
            if record is None:  # (every first result of a switch carries its record)
                mismatches[0] += 1
                return
            resumed.setdefault(f"{record.old}->{record.new}", []).append(record.resumed_steps or 0)
            for name, want in references[result.scenario].items():
                if np.abs(result.outputs[name] - want).max() > 1e-5 * max(1.0, float(np.abs(want).max())):
                    mismatches[0] += 1
                    break

        run_method: dict[str, Callable[[str, str, float], tuple[float, float | None]]] = {
            "sbrs-tp": lambda o, n, d: sbrs_delay(runtime, o, n, frame, d, "sbrs-tp", requester),
            "sbrs-naive": lambda o, n, d: sbrs_delay(runtime, o, n, frame, d, "naive", requester),
            "ort-all": lambda o, n, d: (ort_delay(sessions, o, n, feed_name, frame, d, None, requester), None),
            "ort-load": lambda o, n, d: (ort_delay(sessions, o, n, feed_name, frame, d, load, requester), None),
            "sbrs-cancel": lambda o, n, d: sbrs_delay(cancelling, o, n, frame, d, "sbrs-tp", requester),
            "ort-cancel": lambda o, n, d: (ort_delay(sessions, o, n, feed_name, frame, d, None, requester,
                                                      terminate), None),
            "resume": lambda o, n, d: sbrs_delay(resuming, o, n, frame, d, "sbrs-tp", requester, check_resumed),
        }
        # Everything loaded so far stays: out of the cyclic collector's sight, its full collections (several ms
        # with the models' objects around) no longer land in a sample; both sides share this process.
        gc.collect()
        gc.freeze()
        requester = Requester()
        try:
            pairs: dict[str, Any] = {}
            every: dict[str, list[float]] = {m: [] for m in methods}
            every_internal: dict[str, list[float]] = {m: [] for m in methods if m.startswith("sbrs") or m == "resume"}
            for old in runtime.scenarios:
                for new in runtime.scenarios:
                    if old == new:
                        continue
                    samples: dict[str, list[float]] = {m: [] for m in methods}
                    internal: dict[str, list[float]] = {m: [] for m in every_internal}
                    for _ in range(repeats):
                        delay = rng.uniform(0.0, frame_s[old])
                        for method in rng.sample(methods, len(methods)):
                            caller, recorded = run_method[method](old, new, delay)
                            samples[method].append(caller)
                            if recorded is not None:
                                internal[method].append(recorded)
                    row: dict[str, Any] = {"old_frame_s": round(frame_s[old], 7), "new_frame_s": round(frame_s[new], 7)}
                    for method in methods:
                        row[method] = _summary(samples[method])
                        every[method].extend(samples[method])
                        if method in internal:
                            row[method]["internal_mean_s"] = round(statistics.fmean(internal[method]), 7)
                            every_internal[method].extend(internal[method])
                    if "resume" in methods:
                        row["resume"].update(_resumed(resumed.get(f"{old}->{new}", [])))
                    row["ratios"] = _switching_ratios(row, methods)
                    pairs[f"{old}->{new}"] = row
        finally:
            requester.close()
        overall: dict[str, Any] = {m: _summary(every[m]) for m in methods}
        for method, values in every_internal.items():
            overall[method]["internal_mean_s"] = round(statistics.fmean(values), 7)
        if "resume" in methods:
            overall["resume"].update(_resumed([r for values in resumed.values() for r in values]))
            overall["resume"]["mismatches"] = mismatches[0]
        overall["ratios"] = _switching_ratios(overall, methods)
        facts = runtime.facts()
        return {"app": facts["app"], "granularity": facts["granularity"], "repeats": repeats,
                "transition_arena": runtime.transitions.arena, "schedule": runtime.transition_schedule,
                "arena_bytes": runtime.arena_bytes, "methods": list(methods), "overall": overall, "pairs": pairs}


def _resumed(steps: list[int]) -> dict[str, Any]:
    """How the ``resume`` samples went: how many continued the frame in flight, the mean steps taken over."""
    return {"resumed": sum(1 for r in steps if r > 0), "samples": len(steps),
            "resumed_steps_mean": round(statistics.fmean(steps), 3) if steps else None}


def _switching_ratios(row: dict[str, Any], methods: tuple[str, ...]) -> dict[str, float]:
    """Each method's mean Δ over plain ORT's with every session loaded, and sbrs cancelling over ORT cancelling
    (``sbrs-cancel/ort-cancel``): each against the alternative that keeps or gives up the frame in flight alike."""
    ratios = {}
    if "ort-all" in methods:
        ratios = {m: round(row[m]["mean_s"] / row["ort-all"]["mean_s"], 4) for m in methods if m != "ort-all"}
    if "sbrs-cancel" in methods and "ort-cancel" in methods:
        ratios["sbrs-cancel/ort-cancel"] = round(row["sbrs-cancel"]["mean_s"] / row["ort-cancel"]["mean_s"], 4)
    if "resume" in methods and "sbrs-cancel" in methods:
        ratios["resume/sbrs-cancel"] = round(row["resume"]["mean_s"] / row["sbrs-cancel"]["mean_s"], 4)
    return ratios


def format_switching(report: dict[str, Any]) -> str:
    """Δ per ordered pair as the caller sees it: mean (p95) per method in ms, the ratio to plain ORT."""
    methods = report["methods"]
    lines = [f"app {report['app']}: switch response delay Δ seen by the caller (request at a random point of a "
             f"frame → the caller holds the new scenario's output), ms, mean (p95) of {report['repeats']} per pair; "
             f"SBRS-TP arena {report['transition_arena']}, schedule {report['schedule']}",
             f"{'pair':<26}" + "".join(f"{m:>20}" for m in methods) + "  sbrs-tp/ort-all"
             + ("  sbrs-cancel/ort-cancel" if "sbrs-cancel/ort-cancel" in report["overall"]["ratios"] else "")]

    def row(name: str, values: dict[str, Any]) -> str:
        cells = "".join(f"{values[m]['mean_s'] * 1e3:>11.3f} ({values[m]['p95_s'] * 1e3:>6.3f})" for m in methods)
        ratios = [values["ratios"].get(key) for key in ("sbrs-tp", "sbrs-cancel/ort-cancel")]
        return f"{name:<26}{cells}" + "".join(f"  {'' if r is None else f'{r:.3f}':>15}" for r in ratios)

    lines.extend(row(key, values) for key, values in report["pairs"].items())
    lines.append(row("all pairs", report["overall"]))
    recorded = [f"{m} {report['overall'][m]['internal_mean_s'] * 1e3:.3f} ms" for m in methods
                if "internal_mean_s" in report["overall"][m]]
    if recorded:
        lines.append("the runtime's own record of Δ (SwitchRecord, before the caller has the output), mean: "
                     + ", ".join(recorded))
    if "resume" in methods:
        resume = report["overall"]["resume"]
        ratios = report["overall"]["ratios"]
        lines.append(f"resume: {resume['resumed']} of {resume['samples']} frames continued on the new scenario "
                     f"(mean {resume['resumed_steps_mean']} new steps taken over), {resume['mismatches']} outputs "
                     f"differing from the new scenario's own model; Δ resume/ort-all "
                     f"{ratios.get('resume', float('nan')):.3f}"
                     + (f", resume/sbrs-cancel {ratios['resume/sbrs-cancel']:.3f}" if "resume/sbrs-cancel" in ratios
                        else ""))
    return "\n".join(lines)
