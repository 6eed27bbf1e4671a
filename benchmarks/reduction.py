"""Buffers reduction, modelled memory and measured throughput (thesis Tables 4.2 and 6.6 style).

For each CNN (MobileNetV2 1.0@224, ResNet-18, EfficientNet-B0, SqueezeNet 1.1) and the multi-CNN example app:

- ``naive``: parameters + one buffer per edge (thesis M_naive);
- ``reuse``: parameters + whole tensors planned in one arena (no processing by parts; Algorithm 9, lines 1-5);
- ``GA tight``: Algorithm 9's search (measured cost model) under the memory limit ``params + 50% of the reuse
  buffers``; of its Pareto front, the member under the limit with the best modelled throughput (Algorithm 9,
  line 14, picks the *smallest* memory meeting every constraint; with a throughput constraint that no member
  under the limit meets it falls back to the smallest memory, line 16, which is the next row);
- ``GA minimal``: the smallest memory on the same Pareto front (Algorithm 9 with no throughput constraint).

Memory is the model's (Eq. 2.5: unique parameters + the reduced arena of Algorithm 10). Throughput is measured
on :class:`sbrs.runtime.parts.PartsRuntime` and given as a ratio to the unreduced model run as one ONNX Runtime
session in the same process: blocks of frames interleaved, medians (DESIGN.md "Benchmarks"). Costs for the GA
are measured once per machine and cached (``sbrs.runtime.parts_cost``).

    python benchmarks/reduction.py [--json] [--only mobilenet_v2,multi-cnn] [--rounds 5] [--frames 5]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from sbrs import zoo
from sbrs.model import CnnModel, import_model, naive_buffer_bytes, params_bytes
from sbrs.reduction import GaParams, plan_reduction, reduce_buffers
from sbrs.reduction.cost import model_fps
from sbrs.reduction.phases import full_bands
from sbrs.runtime.parts import PartsRuntime, executable_bands
from sbrs.runtime.parts_cost import cached_costs

REPO = Path(__file__).resolve().parents[1]
CASES = {
    "mobilenet_v2": "MobileNetV2 1.0@224",
    "resnet18": "ResNet-18@224",
    "efficientnet_b0": "EfficientNet-B0@224",
    "squeezenet1_1": "SqueezeNet 1.1@224",
    "multi-cnn": "apps/multi-cnn.yaml (MobileNetV2 + ResNet-50)",
}


def models_of(case: str) -> dict[str, CnnModel]:
    if case == "multi-cnn":
        from sbrs.app import load_app

        return dict(load_app(REPO / "apps" / "multi-cnn.yaml").models)
    return {case: import_model(zoo.build(case), name=case)}


def frames_of(models: dict[str, CnnModel]) -> dict[str, np.ndarray]:
    result = {}
    for scenario, model in models.items():
        spec = model.tensors[model.graph_inputs[0]]
        result[scenario] = np.random.default_rng(0).standard_normal(spec.shape).astype(spec.dtype)
    return result


def measure_ratios(models: dict[str, CnnModel], configs: dict[str, dict[str, dict[str, int]]], rounds: int,
                   frames: int) -> dict[str, dict[str, Any]]:
    """fps ratio to the unreduced one-session model per config and scenario, interleaved, medians."""
    inputs = frames_of(models)
    runtimes = {"unreduced": PartsRuntime(models=models)}
    for label, bands in configs.items():
        runtimes[label] = PartsRuntime(models=models, band_rows=bands)
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
            per[scenario] = {"fps": 1.0 / seconds, "ratio": base / seconds,
                             "calls": len(runtime.plan.scenarios[scenario].calls)}
        result[label] = {"scenarios": per, "executor_arena_bytes": runtime.arena_bytes}
        runtime.close()
    return result


def run_case(case: str, rounds: int, frames: int, params: GaParams) -> dict[str, Any]:
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
    search = reduce_buffers(models, memory_limit=tight_limit, cost=cost, params=params)
    under = [p for p in search.pareto if p.memory_bytes <= tight_limit]
    fastest = max(under, key=lambda p: min(p.fps[s] / base_fps[s] for s in models))
    ga_s = time.perf_counter() - start
    chosen = {"GA tight": fastest, "GA minimal": search.pareto[0]}
    configs = {label: {s: executable_bands(models[s], point.band_rows.get(s, {})) for s in models}
               for label, point in chosen.items()}
    measured = measure_ratios(models, configs, rounds, frames)
    rows = [
        {"config": "naive", "memory_bytes": naive, "buffer_bytes": naive - p_bytes, "measured": measured["unreduced"]},
        {"config": "reuse", "memory_bytes": unreduced.memory_bytes, "buffer_bytes": unreduced.arena.arena_bytes,
         "model_fps": unreduced.fps, "measured": measured["unreduced"]},
    ]
    for label, point in chosen.items():
        rows.append({"config": label, "memory_limit_bytes": tight_limit if label == "GA tight" else None,
                     "memory_bytes": point.memory_bytes, "buffer_bytes": point.arena_bytes, "model_fps": point.fps,
                     "layers_by_parts": {s: len(b) for s, b in point.band_rows.items()},
                     "measured": measured[label]})
    return {"case": case, "title": CASES.get(case, case), "params_bytes": p_bytes, "rows": rows,
            "cost_measure_s": measure_s, "ga_s": ga_s, "device": cost.device if cost else ""}


def format_case(report: dict[str, Any]) -> str:
    lines = [f"{report['title']}: parameters {report['params_bytes'] / 1e6:.2f} MB "
             f"(cost table {report['cost_measure_s']:.0f} s, GA {report['ga_s']:.0f} s)",
             f"  {'config':<11} {'memory MB':>9} {'buffers MB':>10} {'exec arena':>10}  "
             "fps ratio (measured) per scenario"]
    for row in report["rows"]:
        measured = row["measured"]
        ratios = ", ".join(f"{s} {v['ratio']:.2f} ({v['fps']:.1f} fps, {v['calls']} calls)"
                           for s, v in measured["scenarios"].items())
        lines.append(f"  {row['config']:<11} {row['memory_bytes'] / 1e6:>9.2f} {row['buffer_bytes'] / 1e6:>10.2f} "
                     f"{measured['executor_arena_bytes'] / 1e6:>10.2f}  {ratios}")
        if row.get("violations"):
            lines.append(f"  {'':<11} not met: {'; '.join(row['violations'])}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated cases")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--frames", type=int, default=5)
    parser.add_argument("--population", type=int, default=24)
    parser.add_argument("--generations", type=int, default=16)
    args = parser.parse_args()
    params = GaParams(population=args.population, generations=args.generations, seed=0)
    reports = []
    for case in args.only.split(","):
        report = run_case(case, args.rounds, args.frames, params)
        reports.append(report)
        if not args.json:
            print(format_case(report), flush=True)
    if args.json:
        json.dump({"cases": reports}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
