"""Buffers reduction, planned and measured memory and measured throughput (thesis Tables 4.2 and 6.6 style).

For each CNN (MobileNetV2 1.0@224, ResNet-18, EfficientNet-B0, SqueezeNet 1.1) and the multi-CNN example app,
with conv→BN→activation folded into one layer (``sbrs.model.fold``, what ONNX Runtime runs):

- ``naive``: parameters + one buffer per edge (thesis M_naive);
- ``reuse``: parameters + whole tensors planned in one arena (no processing by parts; Algorithm 9, lines 1-5);
- ``GA tight``: Algorithm 9's search (measured cost model, band heights and partition cuts, the frame
  streamed row by row) under the memory limit ``params + 50% of the reuse buffers``; of its Pareto front, the
  member under the limit with the best modelled throughput;
- ``GA >=0.85``: the smallest memory on the front whose modelled throughput is at least 0.85 of the
  unreduced one for every scenario;
- ``GA minimal``: the smallest memory on the front (Algorithm 9 with no throughput constraint): the smallest
  reachable configuration;
- ``front >=0.85``: up to ``--front`` members of the front, spread over memory, are measured (interleaved);
  the smallest whose measured throughput is at least 0.85 of the unreduced one, measured again with the
  rows above (absent when none is; on a loaded machine the second measurement may disagree: both are
  printed). The measured front is printed last.

Planned memory is the model's (Eq. 2.5: unique parameters + the reduced arena of Algorithm 10, which counts
every tensor of the folded model, including those that exist only inside one ONNX Runtime call); ``exec
arena`` is the arena the runtime by parts (:class:`~sbrs.runtime.engine.Runtime`) allocates
(tensors between its calls).
Measured memory is the resident set of a fresh process running the configuration, above the same process
after it imported everything and built the models (so ONNX Runtime's sessions, its copies of the weights and
its own buffers count, the Python model does not), median of ``--rss-runs``. Throughput is measured on
``Runtime.from_models`` as a ratio to the unreduced model run as one ONNX Runtime session in the same
process (the same runtime, one call a frame):
blocks of frames interleaved, medians. Costs for the GA are measured once per machine and cached
(``sbrs.compile.costs``).

    python benchmarks/reduction.py [--json] [--only mobilenet_v2,multi-cnn] [--rounds 5] [--frames 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from sbrs import zoo
from sbrs.compile.costs import cached_costs
from sbrs.compile.parts import executable_bands
from sbrs.model import CnnModel, import_model, naive_buffer_bytes, params_bytes
from sbrs.model.fold import fold_model
from sbrs.reduction import GaParams, plan_reduction, reduce_buffers
from sbrs.reduction.cost import model_fps
from sbrs.reduction.phases import full_bands
from sbrs.runtime.engine import Runtime

REPO = Path(__file__).resolve().parents[1]
CASES = {
    "mobilenet_v2": "MobileNetV2 1.0@224",
    "resnet18": "ResNet-18@224",
    "efficientnet_b0": "EfficientNet-B0@224",
    "squeezenet1_1": "SqueezeNet 1.1@224",
    "multi-cnn": "apps/multi-cnn.yaml (MobileNetV2 + ResNet-50)",
}


def models_of(case: str) -> dict[str, CnnModel]:
    """The case's models, folded (conv→BN→activation one layer)."""
    if case == "multi-cnn":
        from sbrs.app import load_app

        return {s: fold_model(m) for s, m in load_app(REPO / "apps" / "multi-cnn.yaml").models.items()}
    return {case: fold_model(import_model(zoo.build(case), name=case))}


Config = tuple[dict[str, dict[str, int]], dict[str, list[str]], dict[str, list[list[Any]]]]


def frames_of(models: dict[str, CnnModel]) -> dict[str, np.ndarray]:
    result = {}
    for scenario, model in models.items():
        spec = model.tensors[model.graph_inputs[0]]
        result[scenario] = np.random.default_rng(0).standard_normal(spec.shape).astype(spec.dtype)
    return result


def measure_ratios(models: dict[str, CnnModel], configs: dict[str, Config], rounds: int,
                   frames: int) -> dict[str, dict[str, Any]]:
    """fps ratio to the unreduced one-session model per config and scenario, interleaved, medians."""
    inputs = frames_of(models)
    runtimes = {"unreduced": Runtime.from_models(models)}
    for label, (bands, cuts, tiles) in configs.items():
        runtimes[label] = Runtime.from_models(models, bands, cuts=cuts, tiles=tiles)
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for scenario in models:
            for label, runtime in runtimes.items():
                runtime.switch(scenario)
                runtime.infer(inputs[scenario])
                start = time.perf_counter()
                for _ in range(frames):
                    runtime.infer(inputs[scenario])
                samples.setdefault((label, scenario), []).append((time.perf_counter() - start) / frames)
    result: dict[str, dict[str, Any]] = {}
    for label, runtime in runtimes.items():
        per = {}
        for scenario in models:
            seconds = float(np.median(samples[(label, scenario)]))
            base = float(np.median(samples[("unreduced", scenario)]))
            best = float(np.min(samples[(label, scenario)]))
            per[scenario] = {"fps": 1.0 / seconds, "ratio": base / seconds,
                             "ratio_min": float(np.min(samples[("unreduced", scenario)])) / best,
                             "calls": len(runtime.plan.scenarios[scenario].calls),
                             "sessions": runtime.plan.scenarios[scenario].sessions}
        result[label] = {"scenarios": per, "executor_arena_bytes": runtime.arena_bytes}
        runtime.close()
    return result


def rss_child(text: str) -> None:
    """The child process of ``measure_rss`` (``python benchmarks/reduction.py --rss-child CONFIG``): the case's
    models loaded, then the runtime by parts of ``CONFIG`` made and run; its resident bytes as one JSON line."""
    from sbrs.bench.bench import resident_bytes

    config = json.loads(text)
    models = models_of(config["case"])
    inputs = frames_of(models)
    loaded, _ = resident_bytes()
    runtime = Runtime.from_models(models, config["bands"], cuts=config["cuts"], tiles=config["tiles"])
    for scenario in models:
        runtime.switch(scenario)
        for _ in range(3):
            runtime.infer(inputs[scenario])
    after, peak = resident_bytes()
    print(json.dumps({"loaded": loaded, "after": after, "peak": peak}))


def measure_rss(case: str, config: Config, runs: int) -> dict[str, int]:
    """Resident bytes a fresh process running ``config`` adds once its models are built (median of ``runs``)."""
    samples = []
    for _ in range(runs):
        text = json.dumps({"case": case, "bands": config[0], "cuts": config[1], "tiles": config[2]})
        out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--rss-child", text], check=True,
                             capture_output=True, text=True).stdout
        figures = json.loads(out.strip().splitlines()[-1])
        samples.append(figures["after"] - figures["loaded"])
    return {"rss_above_models": int(np.median(samples))}


def config_of(models: dict[str, CnnModel], point: Any) -> Config:
    return ({s: executable_bands(models[s], point.band_rows.get(s, {})) for s in models},
            {s: list(c) for s, c in point.cuts.items()},
            {s: [[list(g), b] for g, b in t] for s, t in point.tiles.items()})


def spread(front: list[Any], count: int) -> list[Any]:
    """Up to ``count`` front members spread over memory, the smallest always included."""
    if len(front) <= count:
        return list(front)
    step = (len(front) - 1) / (count - 1)
    return [front[round(i * step)] for i in range(count)]


def run_case(case: str, rounds: int, frames: int, params: GaParams, rss_runs: int, front_count: int) -> dict[str, Any]:
    models = models_of(case)
    start = time.perf_counter()
    cost = cached_costs(models, params.candidates)
    measure_s = time.perf_counter() - start
    p_bytes = params_bytes(models.values())
    unreduced = plan_reduction(models, cost=cost)
    naive = p_bytes + sum(naive_buffer_bytes(m) for m in models.values())
    start = time.perf_counter()
    base_fps = {s: model_fps(m, full_bands(m), cost) for s, m in models.items()}
    tight_limit = p_bytes + unreduced.arena.arena_bytes // 2
    # one band stream: the configurations are measured one frame at a time (``Runtime.from_models``, ``infer``);
    # ``sbrs bench`` measures an app's build, band streams included
    search = reduce_buffers(models, memory_limit=tight_limit, cost=cost, params=params, stream_input=True)
    ga_s = time.perf_counter() - start

    def ratio(point: Any) -> float:
        return min(point.fps[s] / base_fps[s] for s in models)

    under = [p for p in search.pareto if p.memory_bytes <= tight_limit]
    fast = [p for p in search.pareto if ratio(p) >= 0.85]
    chosen = {"GA tight": max(under, key=ratio)}
    if fast:
        chosen["GA >=0.85"] = min(fast, key=lambda p: p.memory_bytes)
    chosen["GA minimal"] = search.pareto[0]
    # the front, measured: the smallest member measured at >= 0.85 of the unreduced speed
    sample = [p for p in spread(list(search.pareto), front_count) if p.memory_bytes < unreduced.memory_bytes]
    front_measured = measure_ratios(models, {f"front{i}": config_of(models, p) for i, p in enumerate(sample)},
                                    rounds, frames)
    measured_front = []
    for i, point in enumerate(sample):
        scenarios = front_measured[f"front{i}"]["scenarios"]
        measured_front.append({"memory_bytes": point.memory_bytes, "model_ratio": ratio(point),
                               "ratio": min(v["ratio"] for v in scenarios.values()),
                               "calls": {s: v["calls"] for s, v in scenarios.items()}})
    fast_measured = [p for p, m in zip(sample, measured_front, strict=True) if m["ratio"] >= 0.85]
    if fast_measured:
        chosen["front >=0.85"] = min(fast_measured, key=lambda p: p.memory_bytes)
    configs: dict[str, Config] = {label: config_of(models, point) for label, point in chosen.items()}
    measured = measure_ratios(models, configs, rounds, frames)
    rss = {"unreduced": measure_rss(case, ({}, {}, {}), rss_runs)}
    for label, config in configs.items():
        rss[label] = measure_rss(case, config, rss_runs)
    rows = [
        {"config": "naive", "memory_bytes": naive, "buffer_bytes": naive - p_bytes, "measured": measured["unreduced"],
         "rss": rss["unreduced"]},
        {"config": "reuse", "memory_bytes": unreduced.memory_bytes, "buffer_bytes": unreduced.arena.arena_bytes,
         "model_fps": unreduced.fps, "measured": measured["unreduced"], "rss": rss["unreduced"]},
    ]
    for label, point in chosen.items():
        rows.append({"config": label, "memory_limit_bytes": tight_limit if label == "GA tight" else None,
                     "memory_bytes": point.memory_bytes, "buffer_bytes": point.arena_bytes, "model_fps": point.fps,
                     "model_ratio": ratio(point),
                     "layers_by_parts": {s: len(b) for s, b in point.band_rows.items()},
                     "cuts": {s: len(c) for s, c in point.cuts.items()},
                     "tiles": {s: len(t) for s, t in point.tiles.items()},
                     "tile_groups": {s: [[list(g), b] for g, b in t] for s, t in point.tiles.items()},
                     "band_rows": point.band_rows, "cut_tensors": {s: list(c) for s, c in point.cuts.items()},
                     "measured": measured[label], "rss": rss[label]})
    return {"case": case, "title": CASES.get(case, case), "params_bytes": p_bytes, "rows": rows,
            "cost_measure_s": measure_s, "ga_s": ga_s, "device": cost.device if cost else "",
            "evaluations": search.evaluations, "measured_front": measured_front}


def format_case(report: dict[str, Any]) -> str:
    lines = [f"{report['title']}: parameters {report['params_bytes'] / 1e6:.2f} MB (folded) "
             f"(cost table {report['cost_measure_s']:.0f} s, GA {report['ga_s']:.0f} s, "
             f"{report['evaluations']} configurations)",
             f"  {'config':<11} {'planned MB':>10} {'buffers MB':>10} {'exec arena':>10} {'RSS+ MB':>8}  "
             "fps ratio measured (modelled) per scenario"]
    for row in report["rows"]:
        measured = row["measured"]
        modelled = f" ({row['model_ratio']:.2f})" if "model_ratio" in row else ""
        ratios = ", ".join(f"{s} {v['ratio']:.2f}{modelled} ({v['fps']:.1f} fps, {v['calls']} calls)"
                           for s, v in measured["scenarios"].items())
        lines.append(f"  {row['config']:<11} {row['memory_bytes'] / 1e6:>10.2f} {row['buffer_bytes'] / 1e6:>10.2f} "
                     f"{measured['executor_arena_bytes'] / 1e6:>10.2f} {row['rss']['rss_above_models'] / 1e6:>8.1f}"
                     f"  {ratios}")
        if row.get("violations"):
            lines.append(f"  {'':<11} not met: {'; '.join(row['violations'])}")
    lines.append("  measured front (planned MB: measured/modelled ratio): " + ", ".join(
        f"{m['memory_bytes'] / 1e6:.2f}: {m['ratio']:.2f}/{m['model_ratio']:.2f}" for m in report["measured_front"]))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated cases")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--frames", type=int, default=5)
    parser.add_argument("--population", type=int, default=24)
    parser.add_argument("--generations", type=int, default=16)
    parser.add_argument("--rss-runs", type=int, default=3)
    parser.add_argument("--front", type=int, default=12, help="Pareto front members to measure")
    parser.add_argument("--rss-child", default=None, help=argparse.SUPPRESS)  # measure_rss's child process
    args = parser.parse_args()
    if args.rss_child is not None:
        rss_child(args.rss_child)
        return 0
    params = GaParams(population=args.population, generations=args.generations, seed=0)
    reports = []
    for case in args.only.split(","):
        report = run_case(case, args.rounds, args.frames, params, args.rss_runs, args.front)
        reports.append(report)
        if not args.json:
            print(format_case(report), flush=True)
    if args.json:
        json.dump({"cases": reports}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
