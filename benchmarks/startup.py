"""Start-up and process memory of `sbrs run` against the plain ONNX Runtime scripts a user would write instead.

For each example app, in one run, fresh processes, median of ``--repeats`` (default 3):

- ``sbrs``: ``sbrs run APP --frames F --no-socket`` from a current build (made before timing where it is not);
- ``ort all-N``: a Python script that creates one ONNX Runtime session per scenario model (best settings:
  full graph optimisation, global thread pool of the app's size) and runs F frames on the initial one;
- ``ort active``: the same script loading only the initial scenario's model.

The children are the modes of ``sbrs.bench.probe`` (``run``, ``ort``, ``bare``), run as a script.

Figures: time to first output (process start → first JSON line on stdout), peak RSS of the process (its
``VmHWM`` as it ends), and steady RSS and PSS *above a bare interpreter that imported numpy
and onnxruntime* (read by each process from /proc after its frames; the bare interpreter is measured too).
PSS counts a page several mappings share once (weights that several unit sessions map from the build's one
file), RSS once per mapping.
Usage:

    python benchmarks/startup.py [APP.yaml ...] [--frames 50] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sbrs.bench.probe import probe_command, read_memory

ROOT = Path(__file__).resolve().parents[1]
APPS = ["drone", "multi-cnn", "cifar10", "pamap2", "tiny"]

#: The children's environment: a user's Python, which caches bytecode (see the module docstring).
CHILD_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def measure(command: list[str]) -> dict[str, float]:
    """Run ``command``: seconds to its first stdout line, peak RSS (bytes), the RSS it printed last.

    The peak is the one the child printed (``VmHWM``, counted from its ``exec``); the kernel's ``ru_maxrss``
    also counts the moment between ``fork`` and ``exec`` when the child maps all of its parent (in a parent
    holding sessions itself, ``benchmarks/guard.py``, every child's peak read as the parent's size)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=CHILD_ENV)
    assert process.stdout is not None
    first = None
    steady = pss = peak = 0
    for line in process.stdout:
        if first is None:
            first = time.perf_counter() - start
        figures = read_memory([line])
        steady, pss, peak = figures.get("rss", steady), figures.get("pss", pss), figures.get("peak", peak)
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"{command[:4]}... failed with status {status}")
    return {"first_s": first or 0.0, "peak": peak or usage.ru_maxrss * 1024, "steady": steady, "pss": pss}


def _current(path: str) -> bool:
    """Whether the app's build is current (``sbrs build`` measures and compiles: not every run)."""
    from sbrs.artifact.read import build_dir, verify_build
    from sbrs.errors import InputError

    try:
        verify_build(build_dir(path), path)
    except InputError:
        return False
    return True


def app_row(app: str, frames: int, repeats: int) -> dict[str, object]:
    from sbrs.app.config import load_app_config

    path = str(ROOT / "apps" / f"{app}.yaml")
    config = load_app_config(path)
    if not _current(path):
        subprocess.run([sys.executable, "-m", "sbrs.cli", "build", path], check=True, stdout=subprocess.DEVNULL,
                       env=CHILD_ENV)
    measure(probe_command("run", path, "1"))  # writes the bytecode of the run path's modules
    order = [config.initial] + [s.name for s in config.scenarios if s.name != config.initial]
    models = [config.scenario(name).model_path for name in order]
    threads = config.runtime.threads or os.cpu_count() or 1
    shape, dtype = list(config.input.shape), config.input.dtype
    ort = {"providers": ["CPUExecutionProvider"], "threads": threads, "shape": shape, "dtype": dtype, "frames": frames,
           "random": True}
    sides = {  # the children are sbrs.bench.probe's modes: sbrs run itself, a plain ORT user, a bare interpreter
        "sbrs": probe_command("run", path, str(frames)),
        "ort_all": probe_command("ort", json.dumps({"models": models, **ort})),
        "ort_active": probe_command("ort", json.dumps({"models": models[:1], **ort})),
        "bare": probe_command("bare"),
    }
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for _ in range(repeats):  # interleaved, so drifts on a shared machine hit every side alike
        for side, command in sides.items():
            runs[side].append(measure(command))
    median = {side: {key: statistics.median(r[key] for r in results) for key in results[0]}
              for side, results in runs.items()}
    bare, bare_pss, bare_peak = median["bare"]["steady"], median["bare"]["pss"], median["bare"]["peak"]
    row: dict[str, object] = {"app": app, "bare_rss_mb": round(bare / 1e6, 1)}
    for side in ("sbrs", "ort_all", "ort_active"):
        row[side] = {"first_output_s": round(median[side]["first_s"], 3),
                     "peak_rss_mb": round(median[side]["peak"] / 1e6, 1),
                     "peak_above_bare_mb": round((median[side]["peak"] - bare_peak) / 1e6, 1),
                     "steady_above_bare_mb": round((median[side]["steady"] - bare) / 1e6, 1),
                     "steady_pss_above_bare_mb": round((median[side]["pss"] - bare_pss) / 1e6, 1)}
    sbrs, ort_all = median["sbrs"], median["ort_all"]
    row["peak_ratio"] = round(sbrs["peak"] / ort_all["peak"], 3)
    row["first_output_ratio"] = round(sbrs["first_s"] / ort_all["first_s"], 3)
    row["steady_ratio"] = round((sbrs["steady"] - bare) / max(ort_all["steady"] - bare, 1), 3)
    row["peak_above_bare_ratio"] = round((sbrs["peak"] - bare_peak) / max(ort_all["peak"] - bare_peak, 1), 3)
    row["pss_ratio"] = round((sbrs["pss"] - bare_pss) / max(ort_all["pss"] - bare_pss, 1), 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("apps", nargs="*", default=APPS)
    parser.add_argument("--frames", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [app_row(Path(app).stem, args.frames, args.repeats) for app in args.apps]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'app':<10} {'side':<11} {'first output s':>14} {'peak RSS MB':>12} {'steady above bare MB':>21} "
          f"{'steady PSS above bare':>22}")
    for row in rows:
        for side in ("sbrs", "ort_all", "ort_active"):
            figures = row[side]
            assert isinstance(figures, dict)
            print(f"{row['app']:<10} {side:<11} {figures['first_output_s']:>14.3f} {figures['peak_rss_mb']:>12.1f} "
                  f"{figures['steady_above_bare_mb']:>21.1f} {figures['steady_pss_above_bare_mb']:>22.1f}")
        print(f"{'':<10} sbrs / ort all-N: first output {row['first_output_ratio']}, peak {row['peak_ratio']}, "
              f"steady above bare {row['steady_ratio']} (bare interpreter {row['bare_rss_mb']} MB)")


if __name__ == "__main__":
    main()
