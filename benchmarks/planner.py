"""Memory-planner benchmark: every zoo CNN alone and every example app.

Prints naive (thesis M_naive: one buffer per edge), Algorithm 8 (shared buffers), the offset arena and the
lower bound in MB, and arena / lower bound. Buffers only (parameters are listed apart). Usage:

    python benchmarks/planner.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from sbrs import zoo
from sbrs.app import load_app
from sbrs.memory.app_plan import plan_scenarios
from sbrs.moc import derive_moc
from sbrs.model import CnnModel, import_model

ROOT = Path(__file__).resolve().parents[1]


def _row(name: str, models: dict[str, CnnModel], adaptive: tuple[str, ...]) -> dict[str, object]:
    started = time.perf_counter()
    moc = derive_moc(models, adaptive)
    _, arena, _, memory = plan_scenarios(moc, models)
    return {
        "name": name,
        "params_mb": memory.params_bytes / 1e6,
        "naive_mb": memory.naive_bytes / 1e6,
        "reuse_mb": memory.reuse_bytes / 1e6,
        "arena_mb": memory.arena_bytes / 1e6,
        "lower_bound_mb": memory.lower_bound_bytes / 1e6,
        "arena_over_bound": memory.arena_bytes / memory.lower_bound_bytes,
        "arena_over_reuse": memory.arena_bytes / memory.reuse_bytes,
        "strategy": arena.strategy,
        "seconds": time.perf_counter() - started,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for entry in zoo.list_models():
        model = import_model(zoo.build(entry.name), source=entry.name, name=entry.name)
        rows.append(_row(f"zoo:{entry.name}", {entry.name: model}, ("I", "O", "par")))
    for path in sorted((ROOT / "apps").glob("*.yaml")):
        app = load_app(path)
        rows.append(_row(f"app:{app.name}", app.models, app.config.adaptive))
    if args.json:
        json.dump({"rows": rows}, sys.stdout, indent=1)
        print()
        return 0
    print(f"{'CNN / app':<24} {'params':>8} {'naive':>8} {'Alg. 8':>8} {'arena':>8} {'bound':>8} {'arena/bd':>8}"
          f" {'arena/A8':>8}  strategy")
    for row in rows:
        print(f"{row['name']:<24} {row['params_mb']:>8.2f} {row['naive_mb']:>8.2f} {row['reuse_mb']:>8.2f}"
              f" {row['arena_mb']:>8.2f} {row['lower_bound_mb']:>8.2f} {row['arena_over_bound']:>8.3f}"
              f" {row['arena_over_reuse']:>8.3f}  {row['strategy']} ({row['seconds']:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
