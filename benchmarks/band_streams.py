"""Runs by parts on one band stream and on two, against plain ONNX Runtime, in one run (device-memory issue,
part 3: "both cores busy").

For each memory limit, the zoo's MobileNetV2 1.0@224 alone in an app (seeded weights, no download) is built
with ``sbrs build`` (the cost table measured on this machine, cached), and the band heights the search chose
are compiled twice: as one band stream and as two (the same calls, a second arena). Each runs ``process`` over
``--frames`` frames; plain ONNX Runtime runs the zoo model with its default options (intra-op threads on every
core) and as two frames at once on two one-thread sessions; all four interleaved, ``--repeats`` blocks, medians.
Reported: ms a frame, the ratio to plain ONNX Runtime's better setting, calls a frame, and the plan (parameters
plus every stream's tensors) of each.

    python benchmarks/band_streams.py [--limits 16.5,15.5,14.9] [--frames 30] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

APP = """name: mobilenet
input: {{name: input, shape: [1, 3, 224, 224], dtype: float32}}
initial: m
memory_limit_mb: {limit}
scenarios:
  - {{name: m, zoo: {{name: mobilenet_v2}}}}
"""


def _seconds_per_frame(run: Callable[[], None], frames: int) -> float:
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) / frames


def measure_limit(folder: Path, limit: float, frames: int, repeats: int, model: str) -> dict[str, Any]:
    import onnxruntime as ort

    from sbrs.app import load_app
    from sbrs.cli import main
    from sbrs.compile.fit import app_parts, strategy_of
    from sbrs.compile.footprint import parts_footprint
    from sbrs.reduction.search import saved_reduction
    from sbrs.runtime.engine import Runtime

    path = folder / f"mobilenet-{limit}.yaml"
    path.write_text(APP.format(limit=limit), encoding="utf-8")
    with contextlib.redirect_stdout(io.StringIO()):  # the build's report: this benchmark prints its own
        built = main(["build", str(path)])
    if built != 0:
        raise SystemExit(f"sbrs build failed for the limit {limit} MB")
    app = load_app(path)
    reduction = saved_reduction(app)
    assert reduction is not None
    chosen = reduction["chosen"]
    per_stream = int(chosen["arena_bytes"]) // int(chosen.get("streams", 1))
    runtimes = {}
    plans = {}
    for streams in (1, 2):
        point = {**chosen, "streams": streams, "arena_bytes": streams * per_stream,
                 "memory_bytes": int(chosen["params_bytes"]) + streams * per_stream}
        plan = app_parts(app, reduction["band_rows"], {"memory_limit_bytes": 10**12, "chosen": point},
                         strategy_of(reduction))
        runtimes[streams] = Runtime.from_app(app, parts=plan)
        plans[streams] = parts_footprint(plan).plan_bytes
    frame = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    default = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    one_thread = ort.SessionOptions()
    one_thread.intra_op_num_threads = 1
    single = ort.InferenceSession(model, one_thread, providers=["CPUExecutionProvider"])
    feed = {default.get_inputs()[0].name: frame}

    def stream(rt: Runtime) -> Callable[[], None]:
        def run() -> None:
            for _ in rt.process(itertools.repeat(frame, frames)):
                pass

        return run

    def threads() -> None:
        for _ in range(frames):
            default.run(None, feed)

    def two_at_once() -> None:
        worker = threading.Thread(target=lambda: [single.run(None, feed) for _ in range(frames // 2)])
        worker.start()
        for _ in range(frames - frames // 2):
            single.run(None, feed)
        worker.join()

    sides: dict[str, Callable[[], None]] = {
        "one_stream": stream(runtimes[1]), "two_streams": stream(runtimes[2]),
        "ort_threads": threads,
        "ort_two_frames": two_at_once}
    samples: dict[str, list[float]] = {side: [] for side in sides}
    for run in sides.values():  # warm-up
        run()
    for _ in range(repeats):
        for side, run in sides.items():
            samples[side].append(_seconds_per_frame(run, frames))
    seconds = {side: statistics.median(values) for side, values in samples.items()}
    best = min(seconds["ort_threads"], seconds["ort_two_frames"])
    for rt in runtimes.values():
        rt.close()
    return {"limit_mb": limit, "calls": len(plan.scenarios["m"].calls),
            "search_chose_streams": chosen.get("streams", 1),
            "plan_mb": {str(s): round(b / 1e6, 3) for s, b in plans.items()},
            "ms": {side: round(s * 1e3, 3) for side, s in seconds.items()},
            "ratio": {"one_stream": round(best / seconds["one_stream"], 3),
                      "two_streams": round(best / seconds["two_streams"], 3)}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limits", default="16.5,15.5,14.9")
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from sbrs import zoo

    with tempfile.TemporaryDirectory(prefix="sbrs-band-streams-") as scratch:
        folder = Path(scratch)
        model = str(zoo.export("mobilenet_v2", folder / "mobilenet_v2.onnx"))
        rows = [measure_limit(folder, float(limit), args.frames, args.repeats, model)
                for limit in args.limits.split(",")]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("| limit MB | calls a frame | search chose | plan MB: 1 / 2 streams | ms a frame: 1 stream / 2 streams / "
          "ORT threads / ORT two frames | ratio to ORT's best: 1 / 2 streams |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        ms, plan, ratio = row["ms"], row["plan_mb"], row["ratio"]
        print(f"| {row['limit_mb']} | {row['calls']} | {row['search_chose_streams']} | {plan['1']} / {plan['2']} | "
              f"{ms['one_stream']} / {ms['two_streams']} / {ms['ort_threads']} / {ms['ort_two_frames']} | "
              f"{ratio['one_stream']} / {ratio['two_streams']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
