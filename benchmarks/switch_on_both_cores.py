"""What a switch on two streams could cost: plain ONNX Runtime on an app's scenario models, no sbrs runtime.

Issue 39 wants each scenario at 0.95 of plain ONNX Runtime's better setting *and* fast switches. On two cores the
better setting of the longer models is two frames at once on one-thread sessions, while sbrs's fast switch (SBRS-TP)
runs one frame at a time on two-thread sessions. This script measures the ways a runtime on two streams could
switch, with the scenarios' own models, so that a design can be chosen on figures:

- ``plain``: a two-thread session per scenario, one frame at a time, switching at the frame boundary (the
  comparator of ``sbrs bench --switching``: ``ort-all``, its loop ``ort_switches``);
- ``wait``: two streams of one-thread frames; the first stream to come free runs the new scenario;
- ``stop-youngest``: as ``wait``, but the younger frame in flight is stopped (``RunOptions.terminate``) and its
  stream runs the new scenario while the older frame finishes (what sbrs's streams do, ``Streams.stop_for``);
- ``stop-both``: both frames in flight are stopped and the new scenario's frame runs on a two-thread session
  (a second set of sessions), the other stream waiting until it is done.

A stopped frame is dropped here, where a runtime would run it again after the switch's frame; that changes the
frames after a switch, not Δ. Switches are made by ``sbrs.bench.switching.Requests`` (random moments 1-3 frames
after the previous switch settled, Δ to the first output of the new scenario), the four ways interleaved in
rounds, each round a walk over every ordered pair (``switch_circuit``). Also reported, per scenario: frames per
second of the two-thread session and of two frames at once.

    python benchmarks/switch_on_both_cores.py [APP.yaml ...] [--rounds 4] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from sbrs.bench.switching import REQUEST_AFTER_FRAMES, Requests, ort_switches, switch_circuit
from sbrs.ort_env import create_session
from sbrs.runtime.switching import TERMINATED

ROOT = Path(__file__).resolve().parents[1]
WAYS = ("plain", "wait", "stop-youngest", "stop-both")
PROVIDERS = ("CPUExecutionProvider",)


def fps(run: Callable[[], object], seconds: float = 1.0, threads: int = 1) -> float:
    counts = [0] * threads
    end = time.perf_counter() + seconds

    def loop(k: int) -> None:
        while time.perf_counter() < end:
            run()
            counts[k] += 1

    workers = [threading.Thread(target=loop, args=(k,)) for k in range(threads)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts) / (time.perf_counter() - start)


def two_streams(one: dict[str, Any], two: dict[str, Any], feed: dict[str, np.ndarray], requests: Requests,
                way: str) -> None:
    """Two worker threads of one-thread frames under ``requests``, switching the ``way`` asked (module docstring)."""
    lock = threading.Lock()
    wanted = [requests.current]
    running: list[tuple[float, str] | None] = [None, None]  # per stream: when its frame began, its scenario
    options = [ort.RunOptions(), ort.RunOptions()]
    solo_free = threading.Event()  # cleared while a stop-both switch's frame is due or runs
    solo_free.set()
    solo = {"pending": False, "claimed": False}

    def ask(name: str) -> None:
        with lock:
            wanted[0] = name
            busy = [k for k in (0, 1) if running[k] is not None and running[k][1] != name]  # type: ignore[index]
            if way == "wait" or len(busy) < 2:
                return
            if way == "stop-youngest":
                options[max(busy, key=lambda k: running[k][0])].terminate = True  # type: ignore[index]
                return
            solo_free.clear()
            solo["pending"], solo["claimed"] = True, False
            for k in busy:
                options[k].terminate = True

    def held(name: str) -> None:
        with lock:
            requests.held(name)

    def work(k: int) -> None:
        while not requests.done.is_set():
            with lock:
                claim = solo["pending"] and not solo["claimed"]
                if claim:
                    solo["claimed"] = True
            if claim:  # the switch's frame, on both cores; the other stream waits
                name = wanted[0]
                two[name].run(None, feed)
                held(name)
                with lock:
                    solo["pending"] = False
                solo_free.set()
                continue
            solo_free.wait(1.0)
            with lock:
                name = wanted[0]
                running[k] = (time.perf_counter(), name)
            try:
                one[name].run(None, feed, options[k])
                stopped = False
            except Exception as error:  # onnxruntime's Fail: stopped by terminate
                if TERMINATED not in str(error):
                    raise
                stopped = True
            with lock:
                running[k] = None
                options[k].terminate = False
            if not stopped:
                held(name)

    requests.ask = ask
    workers = [threading.Thread(target=work, args=(k,), daemon=True) for k in (0, 1)]
    requests.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def measure(app: str, rounds: int, seed: int) -> dict[str, Any]:
    from sbrs.app.config import load_app_config
    from sbrs.model.input_size import plain_model_file

    config = load_app_config(app)
    scratch = tempfile.TemporaryDirectory(prefix="sbrs-both-cores-")  # scenarios at their own input size
    paths = {s.name: plain_model_file(s.model_path, config.input.shape, s.input_size, scratch.name)
             for s in config.scenarios}
    # sessions whose idle pools sleep, as sbrs's and as ``sbrs bench --switching``'s comparator
    one = {name: create_session(path, PROVIDERS, threads=1) for name, path in paths.items()}
    two = {name: create_session(path, PROVIDERS, threads=2) for name, path in paths.items()}
    first = next(iter(one.values())).get_inputs()[0]
    feed = {first.name: np.random.default_rng(seed).standard_normal(config.input.shape).astype(np.float32)}
    throughput = {}
    frame_s = {}
    for name in paths:
        for s in (one[name], two[name]):
            s.run(None, feed)
        threads_fps = fps(lambda name=name: two[name].run(None, feed))
        two_frames_fps = fps(lambda name=name: one[name].run(None, feed), threads=2)
        throughput[name] = {"threads_fps": round(threads_fps, 2), "two_frames_fps": round(two_frames_fps, 2),
                            "two_frames_gain": round(two_frames_fps / threads_fps, 3)}
        frame_s[name] = 1 / threads_fps
    rng = random.Random(seed)
    scenarios = list(paths)
    delays: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(rounds):
        targets = switch_circuit(scenarios, scenarios[0], rng)
        waits = [rng.uniform(*REQUEST_AFTER_FRAMES) for _ in targets]
        for way in rng.sample(WAYS, len(WAYS)):
            requests = Requests(scenarios[0], targets, waits, frame_s)
            if way == "plain":
                ort_switches(two, first.name, feed[first.name], requests)
            else:
                two_streams(one, two, feed, requests, way)
            requests.stop()
            if requests.failed is not None:
                raise SystemExit(f"{app}: the switch {requests.failed} ({way}) did not end")
            delays[way].extend(delay for _, _, delay, _ in requests.switches)
    means = {way: statistics.fmean(values) for way, values in delays.items()}
    return {"app": config.name, "throughput": throughput, "switches": len(delays["plain"]),
            "delta_ms": {way: round(mean * 1e3, 3) for way, mean in means.items()},
            "delta_ratio": {way: round(mean / means["plain"], 3) for way, mean in means.items() if way != "plain"}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("apps", nargs="*", default=[str(ROOT / "apps" / f"{a}.yaml")
                                                    for a in ("drone", "detect", "multi-cnn")])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    reports = [measure(app, args.rounds, args.seed) for app in args.apps]
    if args.json:
        print(json.dumps(reports, indent=1))
        return 0
    for report in reports:
        gains = [row["two_frames_gain"] for row in report["throughput"].values()]
        print(f"{report['app']}: two frames at once over the two-thread session {min(gains):.2f}-{max(gains):.2f}; "
              f"Δ over {report['switches']} switches a way, ms: "
              + ", ".join(f"{way} {ms}" for way, ms in report["delta_ms"].items())
              + "; over plain: " + ", ".join(f"{way} {r}" for way, r in report["delta_ratio"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
