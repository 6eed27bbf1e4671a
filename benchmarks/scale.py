"""How the build and the run grow with the number of scenarios: N members of one ResNet-18 family.

The app has N variants of the zoo's ``resnet18`` (20 classes, 224x224 frames), the shape of a NAS front or an
OFA-style family: without and with a 256-wide hidden head; exiting after the fourth, third, second or first
stage; and with every subset of the droppable blocks of the stages it keeps removed (the second block of each
stage keeps its stage's shape: blocks 1, 3, 5 and 7). That makes 60 members; the first N are taken in that
order. For each N (default 5, 15, 30 and 60), in one run:

- build: ``sbrs build APP`` in a fresh process, into a fresh build folder, after ``sbrs check APP`` (not timed:
  it exports the zoo's models into the user's cache, as a new user's first command does): wall time, peak RSS
  (the kernel's ``ru_maxrss`` from ``wait4``), the build folder's size and how many execution units it holds;
- run: ``sbrs run APP --frames F --no-socket`` in a fresh process (``sbrs.bench.probe``'s ``run`` mode): the
  time to its first output line and its peak RSS; beside it plain ONNX Runtime running the initial member's
  model alone (probe ``ort``, the app's threads);
- switch: Δ of ``--pairs`` switches along a random walk over the members, each requested by another thread at a
  random moment 1-3 frames of the current member (sbrs' median frame time) into a running stream of frames,
  measured as the caller sees it: from the request to the moment the caller holds the output of the frame that
  took it (``sbrs bench --switching``'s harness, ``sbrs.bench.switching``). Beside it what a plain ONNX Runtime
  user who cannot hold sixty sessions does: create the new member's session at the frame boundary and run the
  frame (``ort-load``, the same walk and moments, in alternating order).

With ``--repeats R`` builds and runs are repeated in rounds over the sizes, so that a drift of the shared
machine hits every size alike, and medians are reported. Then: the largest build's time over the 15-member
build's (linear growth would be 4 for 60 against 15), and the growth of the run's peak RSS per member (least
squares over the sizes). The load averages before and after tell how busy the machine was.

    python benchmarks/scale.py [--sizes 5 15 30 60] [--frames 10] [--pairs 20] [--repeats 1] [--folder DIR] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sbrs.bench.probe import probe_command

#: The children's environment: a user's Python, which caches bytecode (as ``benchmarks/startup.py``'s).
CHILD_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
#: The blocks a member may drop: the second block of each stage, which keeps the stage's shape.
DROPPABLE = (1, 3, 5, 7)


def family() -> list[dict[str, Any]]:
    """Every member of the family, in the order the app takes them (module docstring)."""
    members = []
    for head_width in (0, 256):
        for exit_stage, stages in ((None, 4), (3, 3), (2, 2), (1, 1)):
            droppable = DROPPABLE[:stages]
            for count in range(len(droppable) + 1):
                for dropped in itertools.combinations(droppable, count):
                    members.append({"drop_blocks": list(dropped), "exit_stage": exit_stage, "head_width": head_width})
    return members


def write_family_app(folder: Path, size: int) -> Path:
    """``folder/app.yaml``: the first ``size`` members of the family, scenarios ``s0`` .. ``s{size-1}``."""
    members = family()
    if not 1 <= size <= len(members):
        raise SystemExit(f"scale: a size must be 1..{len(members)}, got {size}")
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["name: family", "input: {name: input, shape: [1, 3, 224, 224], dtype: float32}", "initial: s0",
             "scenarios:"]
    for index, member in enumerate(members[:size]):
        options = ["name: resnet18", "classes: 20", f"drop_blocks: {member['drop_blocks']}"]
        if member["exit_stage"] is not None:
            options.append(f"exit_stage: {member['exit_stage']}")
        if member["head_width"]:
            options.append(f"head_width: {member['head_width']}")
        lines += [f"  - name: s{index}", f"    zoo: {{{', '.join(options)}}}"]
    path = folder / "app.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def timed(command: list[str]) -> dict[str, float]:
    """Run ``command``: its wall time, seconds to its first stdout line and its peak RSS (bytes)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=CHILD_ENV)
    assert process.stdout is not None and process.stderr is not None
    first = None
    for _ in process.stdout:
        if first is None:
            first = time.perf_counter() - start
    errors = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        last = errors.strip().splitlines()[-1:] or [f"status {status}"]
        raise SystemExit(f"scale: {' '.join(command[:5])}... failed: {last[0]}")
    return {"wall_s": wall, "first_s": first if first is not None else wall, "peak": usage.ru_maxrss * 1024}


def sbrs_command(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "sbrs.cli", *arguments]


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def build_once(app: Path) -> dict[str, float]:
    """``sbrs build APP`` into a fresh build folder: time, peak RSS, folder size, units."""
    shutil.rmtree(app.with_suffix(".build"), ignore_errors=True)
    app.with_suffix(".plan.json").unlink(missing_ok=True)
    figures = timed(sbrs_command("build", str(app)))
    build = app.with_suffix(".build")
    manifest = json.loads((build / "manifest.json").read_text(encoding="utf-8"))
    units = len(manifest["plan"]["units"]) if manifest.get("plan") else 0
    return {"build_s": figures["wall_s"], "build_peak": figures["peak"], "folder": folder_bytes(build),
            "units": units}


def run_once(app: Path, frames: int) -> dict[str, float]:
    """``sbrs run APP --frames F --no-socket`` (probe ``run``) and plain ORT with the initial model (probe ``ort``)."""
    from sbrs.app.config import load_app_config

    config = load_app_config(str(app))
    sbrs = timed(probe_command("run", str(app), str(frames)))
    plain = {"models": [config.scenario(config.initial).model_path], "providers": ["CPUExecutionProvider"],
             "threads": config.runtime.threads or os.cpu_count() or 1, "shape": list(config.input.shape),
             "dtype": config.input.dtype, "frames": frames, "random": True}
    ort = timed(probe_command("ort", json.dumps(plain)))
    return {"first_s": sbrs["first_s"], "run_peak": sbrs["peak"], "ort_first_s": ort["first_s"],
            "ort_peak": ort["peak"]}


def switch_delays(app: Path, pairs: int, seed: int) -> dict[str, float]:
    """Δ of ``pairs`` switches on a random walk over the scenarios, sbrs and ``ort-load`` (module docstring), as the
    caller sees it: ``sbrs bench --switching``'s harness (``sbrs.bench.switching``), requests at random moments of
    a running stream, the walk split in two rounds whose sides run in alternate order."""
    import numpy as np

    from sbrs.app.config import load_app_config
    from sbrs.bench.switching import REQUEST_AFTER_FRAMES, Requests, ort_switches, sbrs_switches
    from sbrs.model.input_size import plain_model_file
    from sbrs.ort_env import create_session
    from sbrs.runtime import runtime_for

    config = load_app_config(str(app))
    names = [s.name for s in config.scenarios]
    rng = random.Random(seed)
    walk = [names[0]]
    for _ in range(pairs):
        walk.append(rng.choice([n for n in names if n != walk[-1]]))
    waits = [rng.uniform(*REQUEST_AFTER_FRAMES) for _ in range(pairs)]
    shape, dtype = config.input.shape, config.input.dtype
    frame = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    samples: dict[str, list[float]] = {"sbrs": [], "ort": []}
    with tempfile.TemporaryDirectory(prefix="sbrs-scale-") as scratch, runtime_for(app) as runtime:
        paths = {s.name: plain_model_file(s.model_path, shape, s.input_size, scratch) for s in config.scenarios}
        threads = runtime.thread_pool.count

        def load(name: str) -> Any:
            return create_session(paths[name], runtime.providers, threads=threads)

        feed_name = load(names[0]).get_inputs()[0].name
        frame_s: dict[str, float] = {}
        for name in dict.fromkeys(walk):
            runtime.switch(name, "bench")
            runtime.infer(frame)  # the first frame of a scenario sets up its bindings
            times = []
            for _ in range(3):
                start = time.perf_counter()
                runtime.infer(frame)
                times.append(time.perf_counter() - start)
            frame_s[name] = statistics.median(times)
        half = pairs // 2
        for round_, (first, last) in enumerate(((0, half), (half, pairs))):
            sides = ["sbrs", "ort"] if round_ % 2 == 0 else ["ort", "sbrs"]
            for side in sides:
                requests = Requests(walk[first], walk[first + 1:last + 1], waits[first:last], frame_s)
                if side == "sbrs":
                    sbrs_switches(runtime, frame, requests, "sbrs-tp")
                else:
                    ort_switches({}, feed_name, frame, requests, load=load)
                requests.stop()
                if requests.failed is not None:
                    raise SystemExit(f"scale: the switch {requests.failed} ({side}) did not end")
                samples[side].extend(delay for _, _, delay, _ in requests.switches)
    sbrs_samples, ort_samples = samples["sbrs"], samples["ort"]
    return {"switch_mean_s": statistics.fmean(sbrs_samples), "switch_p95_s": _p95(sbrs_samples),
            "ort_load_mean_s": statistics.fmean(ort_samples), "ort_load_p95_s": _p95(ort_samples),
            "frame_s": statistics.fmean(frame_s[new] for new in walk[1:])}


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _slope(points: list[tuple[float, float]]) -> float:
    """The least-squares slope of ``points`` (0 with fewer than two sizes)."""
    if len(points) < 2:
        return 0.0
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def measure(sizes: list[int], folder: Path, *, frames: int, pairs: int, repeats: int, seed: int) -> dict[str, Any]:
    load_before = os.getloadavg()
    apps = {size: write_family_app(folder / f"family{size}", size) for size in sizes}
    for app in apps.values():
        timed(sbrs_command("check", str(app)))  # the zoo's exports into the user's cache (module docstring)
    builds: dict[int, list[dict[str, float]]] = {size: [] for size in sizes}
    runs: dict[int, list[dict[str, float]]] = {size: [] for size in sizes}
    for _ in range(repeats):  # rounds over the sizes: a drift of the machine hits every size alike
        for size in sizes:
            builds[size].append(build_once(apps[size]))
    for _ in range(repeats):
        for size in sizes:
            runs[size].append(run_once(apps[size], frames))
    rows = []
    for size in sizes:
        row: dict[str, Any] = {"scenarios": size}
        for samples in (builds[size], runs[size]):
            row.update({key: statistics.median(sample[key] for sample in samples) for key in samples[0]})
        row.update(switch_delays(apps[size], pairs, seed) if pairs > 0 and size > 1 else {})
        rows.append(row)
    by_size = {row["scenarios"]: row for row in rows}
    summary: dict[str, Any] = {
        "run_peak_growth_mb_per_scenario": _slope([(row["scenarios"], row["run_peak"] / 1e6) for row in rows]),
        "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
        "cores": os.cpu_count(), "repeats": repeats, "frames": frames, "pairs": pairs}
    largest = max(sizes)
    if 15 in by_size and largest > 15:
        summary[f"build_{largest}_over_build_15"] = by_size[largest]["build_s"] / by_size[15]["build_s"]
    return {"rows": rows, "summary": summary}


def format_table(report: dict[str, Any]) -> str:
    lines = [f"{'N':>3} {'units':>5} {'build s':>8} {'build peak MB':>13} {'folder MB':>9} {'first output s':>14}"
             f" {'run peak MB':>11} {'ORT 1 model MB':>14} {'switch Δ ms':>15} {'ort-load Δ ms':>15}"
             f" {'frame ms':>8}"]
    for row in report["rows"]:
        switch = ort = "-"
        if "switch_mean_s" in row:
            switch = f"{row['switch_mean_s'] * 1e3:.0f} ({row['switch_p95_s'] * 1e3:.0f})"
            ort = f"{row['ort_load_mean_s'] * 1e3:.0f} ({row['ort_load_p95_s'] * 1e3:.0f})"
        frame = f"{row['frame_s'] * 1e3:.0f}" if "frame_s" in row else "-"
        lines.append(f"{row['scenarios']:>3} {row['units']:>5.0f} {row['build_s']:>8.1f}"
                     f" {row['build_peak'] / 1e6:>13.0f} {row['folder'] / 1e6:>9.1f} {row['first_s']:>14.2f}"
                     f" {row['run_peak'] / 1e6:>11.0f} {row['ort_peak'] / 1e6:>14.0f} {switch:>15} {ort:>15}"
                     f" {frame:>8}")
    summary = report["summary"]
    lines.append("switch Δ: mean (p95) over a random walk's switches, request to the output of the frame that took "
                 "it, as the caller holds it; ort-load: a plain ONNX Runtime user creating the new member's session "
                 "then")
    ratio = next((key for key in summary if key.startswith("build_") and key.endswith("_over_build_15")), None)
    if ratio is not None:
        lines.append(f"build {ratio.split('_')[1]} / build 15: {summary[ratio]:.2f} (linear: "
                     f"{int(ratio.split('_')[1]) / 15:.1f})")
    lines.append(f"run peak RSS grows {summary['run_peak_growth_mb_per_scenario']:.2f} MB a scenario (least squares)")
    before, after = summary["load_average_before"], summary["load_average_after"]
    lines.append(f"load average (1, 5, 15 min) on {summary['cores']} cores: before {before[0]:.2f} {before[1]:.2f} "
                 f"{before[2]:.2f}, after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}; medians of "
                 f"{summary['repeats']} round(s)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5, 15, 30, 60])
    parser.add_argument("--frames", type=int, default=10, help="frames of each sbrs run (default 10)")
    parser.add_argument("--pairs", type=int, default=20, help="random ordered pairs switched per size (0: none)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of builds and runs (medians)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folder", type=Path, help="write the apps and builds here and keep them (default: a "
                                                    "temporary folder)")
    parser.add_argument("--json", action="store_true", help="the figures as JSON instead of the table")
    args = parser.parse_args()
    if args.repeats < 1 or args.frames < 1 or args.pairs < 0:
        raise SystemExit("scale: --repeats and --frames must be >= 1, --pairs >= 0")
    with tempfile.TemporaryDirectory(prefix="sbrs-scale-") as scratch:
        folder = args.folder.resolve() if args.folder is not None else Path(scratch)
        report = measure(sorted(set(args.sizes)), folder, frames=args.frames, pairs=args.pairs,
                         repeats=args.repeats, seed=args.seed)
    print(json.dumps(report, indent=1) if args.json else format_table(report))


if __name__ == "__main__":
    main()
