"""The regression guard: sbrs against plain ONNX Runtime at its better setting, in one run, against committed floors.

Run it before a change lands (CONTRIBUTING.md); it stays out of CI, where timing is noisy and decides nothing.
Every figure is a ratio to plain ONNX Runtime measured in the same run, interleaved:

- ``APP/throughput/SCENARIO`` (floor): frames per second of ``process`` on the app's build against the better of
  plain ONNX Runtime's default session (its intra-op threads) and two frames at once on one-thread sessions
  (``sbrs bench``'s throughput part, ``sbrs.bench.bench.measure_throughput``); ``model/NAME/throughput`` the
  same for committed real models (tests/data/torchvision, float and int8) as one-scenario apps.
- ``APP/switch`` (ceiling): the mean switch response delay Δ as the caller sees it, sbrs over plain ONNX Runtime
  with every scenario's session loaded: ``sbrs bench --switching``'s harness (``sbrs.bench.switching``;
  plain sessions on every core whose pools stop spinning when a call returns: with ONNX Runtime's default
  spinning pools every plain switch is slower, drone 48-63 against 31-33 ms, so that is not plain ONNX
  Runtime's better setting). A long stream of frames per side and round; a thread asks for another scenario at
  a random moment 1-3 frames after the previous switch settled (anywhere in a frame, never at a step boundary
  on purpose), every ordered pair once a round; Δ runs from the request to the moment the caller holds the
  output of the frame that took it. Each app in a fresh process (``switching``). The difference of the means in
  µs is printed beside it.
- ``APP/first_output`` (ceiling): a fresh process's time to its first output, ``sbrs run`` from the app's build
  against a plain ONNX Runtime script loading every scenario's model (``benchmarks/startup.py``, bytecode
  cached as a user's interpreter has it; medians of ``STARTUP_REPEATS`` processes a side, quick or not);
  ``APP/peak_rss`` and ``APP/pss`` (ceilings): its peak RSS and steady
  PSS above a bare interpreter with numpy and onnxruntime imported (/proc/PID/smaps_rollup), against the same
  ONNX Runtime script's.

Each app is measured on its build as ``sbrs run`` runs it, made again first where it is older than sbrs' code
(``--rebuild``: every one): a build chooses its streams by measuring (``runtime.streams: auto``), so the run
shows what a change to the compile stage costs too, and the notes say what each build chose.

Floors and ceilings are in ``benchmarks/floors.json``: about 10 % beyond the worst of two or more runs on a quiet
machine (``--write-floors``). A figure beyond its bound is measured once more at the end of the run (the whole
measurement that gave it: an app's throughput, its switching with other random moments, its start-up), and the
second measurement decides (``sbrs.bench.floors.measured_again``; ``--once``: the first decides): a change that
made sbrs slower falls both times, the machine's noise seldom twice in a row (the quick run of 2026-11-29 16:36
on unchanged code had tiny/throughput/skip at 0.661 against its floor of 0.671). ``--json`` keeps the first
measurements, which ``--write-floors`` sets bounds from, and the second ones apart. The run prints a table,
names every figure measured again and every one still beyond its bound, exits 1 if any is (2 for bad arguments),
and ends with a one-line verdict. ``--quick`` (at most 5 minutes on the 2-core
development machine) takes a subset: throughput of tiny, pamap2, cifar10, drone and detect and of five real
models, switching on tiny, drone and multi-cnn, start-up on tiny, cifar10 and drone.

    python benchmarks/guard.py [--quick] [--rebuild] [--once] [--only throughput,switch,startup] [--json RUN.json]
    python benchmarks/guard.py --write-floors RUN1.json RUN2.json [--margin 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sbrs.bench.floors import bounds_from_runs, check, load_bounds, measured_again, verdict

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ROOT / "benchmarks" / "floors.json"
APPS = ("tiny", "pamap2", "cifar10", "drone", "detect", "adaptive", "multi-cnn")
QUICK_THROUGHPUT = ("tiny", "pamap2", "cifar10", "drone", "detect")
QUICK_SWITCH = ("tiny", "drone", "multi-cnn")
QUICK_STARTUP = ("tiny", "cifar10", "drone")
#: Fresh processes per side for time to first output, quick or not: the bounds are set from full runs, and with 3
#: a quick run's tiny/first_output (0.12 s against plain ONNX Runtime's) read 1.305 once where full runs of the same
#: code gave 0.99-1.18 and a run just after 0.98.
STARTUP_REPEATS = 5
TORCHVISION = ROOT / "tests" / "data" / "torchvision"
#: Committed real models (guard name → file): float, and the int8 forms of tools/quantize_models.py.
MODELS = {
    "mobilenet_v3_small": TORCHVISION / "mobilenet_v3_small-legacy-64.onnx",
    "shufflenet_v2_x0_5": TORCHVISION / "shufflenet_v2_x0_5-legacy-64.onnx",
    "mobilenet_v3_small-qdq-s8": TORCHVISION / "quantized" / "mobilenet_v3_small-legacy-64-qdq-per-channel-s8.onnx",
    "shufflenet_v2_x0_5-qoperator": TORCHVISION / "quantized" / "shufflenet_v2_x0_5-legacy-64-qoperator.onnx",
    "mobilenet_v3_small-dynamic": TORCHVISION / "quantized" / "mobilenet_v3_small-legacy-64-dynamic.onnx",
    "mobilenet_v3_small-qoperator": TORCHVISION / "quantized" / "mobilenet_v3_small-legacy-64-qoperator.onnx",
    "shufflenet_v2_x0_5-qdq-u8": TORCHVISION / "quantized" / "shufflenet_v2_x0_5-legacy-64-qdq-per-tensor-u8.onnx",
    "shufflenet_v2_x0_5-dynamic": TORCHVISION / "quantized" / "shufflenet_v2_x0_5-legacy-64-dynamic.onnx",
}
QUICK_MODELS = tuple(list(MODELS)[:5])
#: Seconds of switching per side and app (drone: about 40 switches, tiny 300, ``sbrs.bench.switching``'s
#: most), and the fewest rounds (each takes every ordered pair of scenarios once).
SWITCH_BUDGET_S = 3.0
SWITCH_ROUNDS = 4
#: The kind of bound of each figure, by the last part of its name.
KINDS = {"throughput": "floor", "switch": "ceiling", "first_output": "ceiling", "peak_rss": "ceiling",
         "pss": "ceiling"}


def kind_of(name: str) -> str:
    parts = name.split("/")
    return KINDS[parts[-2] if parts[-2] == "throughput" else parts[-1]]


def app_path(app: str) -> str:
    return str(ROOT / "apps" / f"{app}.yaml")


def model_app(name: str, model: Path) -> str:
    """A one-scenario app of ``model`` in sbrs' cache, kept between runs so its build is reused."""
    import onnxruntime as ort

    from sbrs.cache import cache_dir

    folder = cache_dir("guard")
    folder.mkdir(parents=True, exist_ok=True)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    spec = session.get_inputs()[0]
    dtype = "float16" if spec.type == "tensor(float16)" else "float32"
    path = folder / f"{name}.yaml"
    text = (f"name: {name.replace('-', '_')}\ninput: {{name: {spec.name}, shape: {list(spec.shape)}, "
            f"dtype: {dtype}}}\nscenarios:\n  - {{name: only, model: {model.resolve()}}}\n")
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return str(path)


def fresh_build(path: str, rebuild: bool = False) -> str:
    """Make the app's build unless it is current and newer than every source file of sbrs (a build's fingerprint
    holds its inputs and sbrs' version, not the code: a change to the compile stage, such as the streams a
    build chooses, must show in the figures). Its streams and why, for the notes."""
    from sbrs.artifact.child import build_in_child
    from sbrs.artifact.read import MANIFEST, build_dir, verify_build
    from sbrs.errors import InputError

    folder = build_dir(path)
    newest = max(source.stat().st_mtime for source in (ROOT / "sbrs").rglob("*.py"))
    try:
        manifest = verify_build(folder, path)
        current = not rebuild and (folder / MANIFEST).stat().st_mtime > newest
    except InputError:
        current = False
    if not current:
        build_in_child(path)
        manifest = verify_build(folder, path)
    streams = manifest["streams"]
    return (f"{streams['streams']} stream(s), asked {streams['asked']}" + (f", gain {streams['gain']:.2f}"
            if streams.get("gain") else "") + (f", load {streams['load']:.1f}" if streams.get("load") else ""))


# -- throughput -------------------------------------------------------------------------------------------


def throughput(path: str, prefix: str, frames: int, repeats: int) -> tuple[dict[str, float], list[str]]:
    from sbrs.bench.bench import measure_throughput

    report = measure_throughput(path, frames=frames, repeats=repeats, granularity=None)
    figures: dict[str, float] = {}
    notes: list[str] = []
    for scenario, row in report["scenarios"].items():
        name = f"{prefix}/throughput" if prefix.startswith("model/") else f"{prefix}/throughput/{scenario}"
        figures[name] = row["ratio"]
        notes.append(f"{name}: sbrs {row['fps']:.1f} fps, ORT threads {row['ort_fps_threads']:.1f}, two frames "
                     f"{row['ort_fps_two_frames']:.1f}")
    return figures, notes


# -- switching at random moments, as the caller sees it ------------------------------------------------------


def switching(path: str, app: str, seed: int = 0) -> tuple[dict[str, float], list[str]]:
    """sbrs's mean Δ over plain ONNX Runtime's with every session loaded: ``sbrs bench --switching``'s harness
    (``sbrs.bench.switching``: requests at random moments of a running stream, every ordered pair in each
    round, the sides interleaved), about ``SWITCH_BUDGET_S`` of switches per side, in a fresh process of its own
    (``SWITCH_CHILD``): after another app's measurement in the same process, plain ONNX Runtime's Δ on pamap2 read
    0.28-0.48 ms where a process of its own reads 0.23 (docs/MEASUREMENTS.md); sbrs's did not move."""
    arguments = json.dumps({"path": path, "seed": seed, "repeats": SWITCH_ROUNDS, "budget_s": SWITCH_BUDGET_S})
    child = subprocess.run([sys.executable, "-P", "-c", SWITCH_CHILD, arguments], capture_output=True, text=True,
                           check=False)
    if child.returncode != 0:
        raise SystemExit(f"guard: the switching of {app} failed: {child.stderr.strip().splitlines()[-1:]}")
    report = json.loads(child.stdout)
    sbrs_mean, ort_mean = report["overall"]["sbrs-tp"]["mean_s"], report["overall"]["ort-all"]["mean_s"]
    figures = {f"{app}/switch": round(sbrs_mean / ort_mean, 4)}
    notes = [f"{app}/switch: Δ sbrs {sbrs_mean * 1e3:.3f} ms, ORT all loaded {ort_mean * 1e3:.3f} ms "
             f"({(sbrs_mean - ort_mean) * 1e6:+.0f} µs), {report['repeats'] * len(report['pairs'])} switches a side, "
             f"{report['streams']} stream(s)"]
    return figures, notes


#: The child process of ``switching``: its argument is a JSON object of ``measure_switching``'s options.
SWITCH_CHILD = """
import json, sys
from sbrs.bench.switching import measure_switching
options = json.loads(sys.argv[1])
print(json.dumps(measure_switching(options["path"], repeats=options["repeats"], methods=("sbrs-tp", "ort-all"),
                                  seed=options["seed"], budget_s=options["budget_s"])))
"""


# -- start-up and memory of a fresh process ----------------------------------------------------------------


def startup(app: str, repeats: int) -> tuple[dict[str, float], list[str]]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from startup import app_row

    row = app_row(app, frames=20, repeats=repeats)
    sbrs, ort = row["sbrs"], row["ort_all"]
    assert isinstance(sbrs, dict) and isinstance(ort, dict)
    figures = {f"{app}/first_output": row["first_output_ratio"], f"{app}/peak_rss": row["peak_above_bare_ratio"],
               f"{app}/pss": row["pss_ratio"]}
    notes = [f"{app}/first_output: sbrs {sbrs['first_output_s']:.3f} s, ORT all-N {ort['first_output_s']:.3f} s; "
             f"peak RSS above bare {sbrs['peak_above_bare_mb']} / {ort['peak_above_bare_mb']} MB, PSS above bare "
             f"{sbrs['steady_pss_above_bare_mb']} / {ort['steady_pss_above_bare_mb']} MB"]
    return figures, notes


# -- the run ---------------------------------------------------------------------------------------------------


def measure(quick: bool, only: set[str] | None, rebuild: bool = False,
            max_load: float | None = None) -> tuple[dict[str, float], list[str]]:
    """Every figure of the run (in the order measured) and a line of detail per measurement. The builds come
    first, each made again where it is older than sbrs' code (``fresh_build``; ``rebuild``: every one), after
    waiting for ``max_load`` (a build under ``runtime.streams: auto`` measures the machine as it finds it), so
    that no build runs between the measurements."""
    figures: dict[str, float] = {}
    notes: list[str] = []

    def wanted(part: str) -> bool:
        return only is None or part in only

    def add(result: tuple[dict[str, float], list[str]]) -> None:
        figures.update(result[0])
        notes.extend(result[1])
        for line in result[1]:
            print(f"  {line}", file=sys.stderr, flush=True)

    apps = [app for part, names in (("throughput", QUICK_THROUGHPUT), ("switch", QUICK_SWITCH),
                                    ("startup", QUICK_STARTUP)) if wanted(part) for app in (names if quick else APPS)]
    models = [f"model/{name}" for name in (QUICK_MODELS if quick else MODELS) if wanted("throughput")]
    for name in [*dict.fromkeys(apps), *models]:
        wait_for_load(max_load)
        add(({}, [f"{name}: build of {fresh_build(target_path(name), rebuild)}"]))
    wait_for_load(max_load)
    measurements = [*(("throughput", app) for app in (QUICK_THROUGHPUT if quick else APPS) if wanted("throughput")),
                    *(("throughput", name) for name in models),
                    *(("switch", app) for app in (QUICK_SWITCH if quick else APPS) if wanted("switch")),
                    *(("startup", app) for app in (QUICK_STARTUP if quick else APPS) if wanted("startup"))]
    for part, target in measurements:
        add(measure_one(part, target, quick))
    return figures, notes


def target_path(target: str) -> str:
    """The app file of an example app's name, or of ``model/NAME``'s one-scenario app."""
    if target.startswith("model/"):
        name = target.removeprefix("model/")
        return model_app(name, MODELS[name])
    return app_path(target)


def measure_one(part: str, target: str, quick: bool, again: bool = False) -> tuple[dict[str, float], list[str]]:
    """One measurement of the run: ``part`` (``throughput``, ``switch``, ``startup``) of ``target`` (an example app,
    or ``model/NAME``). ``again``: a second measurement of a figure that fell (``measure_again``); the switching
    then asks at other random moments."""
    frames, repeats = (10, 3) if quick else (20, 5)
    if part == "throughput":
        return throughput(target_path(target), target, frames, repeats)
    if part == "switch":
        return switching(app_path(target), target, seed=int(again))
    return startup(target, STARTUP_REPEATS)


def measurement_of(name: str) -> tuple[str, str]:
    """The measurement that gives figure ``name``: (part, target) of ``measure_one``."""
    parts = name.split("/")
    if parts[0] == "model":
        return "throughput", "/".join(parts[:2])
    if parts[1] in ("throughput", "switch"):
        return parts[1], parts[0]
    return "startup", parts[0]


def measure_again(names: list[str], quick: bool) -> dict[str, float]:
    """The figures of every measurement that gave one of ``names``, measured once more (``floors.measured_again``:
    the second measurement decides)."""
    figures: dict[str, float] = {}
    for part, target in dict.fromkeys(measurement_of(name) for name in names):
        result = measure_one(part, target, quick, again=True)
        figures.update(result[0])
        for line in result[1]:
            print(f"  again: {line}", file=sys.stderr, flush=True)
    return figures


def wait_for_load(max_load: float | None, limit_s: float = 3600) -> None:
    """Wait (at most ``limit_s``) until the 1-minute load average is under ``max_load`` (None: not at all)."""
    deadline = time.monotonic() + limit_s
    while max_load is not None and os.getloadavg()[0] >= max_load and time.monotonic() < deadline:
        time.sleep(15)


def table(figures: dict[str, float], floors: dict[str, Any], first: dict[str, float] | None = None) -> str:
    """Each figure, its bound and whether it holds it; ``first``: the first value of a figure measured again."""
    from sbrs.bench.floors import Check

    lines = [f"{'figure':<44} {'value':>7} {'bound':>16}  ok"]
    for name, value in figures.items():
        entry = Check(name, value, floors.get(name))
        bound = "" if entry.bound is None else f"{entry.bound.kind} {entry.bound.value:.3f}"
        again = f"  (measured again; first {first[name]:.3f})" if first and name in first else ""
        lines.append(f"{name:<44} {value:>7.3f} {bound:>16}  {'FAIL' if entry.failed else '✓' if bound else '-'}"
                     + again)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the subset that runs in at most 5 minutes")
    parser.add_argument("--floors", type=Path, default=FLOORS)
    parser.add_argument("--only", default=None, metavar="PART,...",
                        help="measure only these parts: throughput, switch, startup")
    parser.add_argument("--json", type=Path, default=None, metavar="RUN.json", help="also write the figures here")
    parser.add_argument("--write-floors", nargs="+", type=Path, default=None, metavar="RUN.json",
                        help="set the bounds of --floors from runs saved with --json (each beyond the worse run; "
                             "the bounds of figures not in the runs stay)")
    parser.add_argument("--margin", type=float, default=0.10)
    parser.add_argument("--max-load", type=float, default=None, metavar="L",
                        help="before the builds and before measuring, wait (up to an hour each) until the 1-minute "
                             "load average is under L")
    parser.add_argument("--rebuild", action="store_true",
                        help="make every build again first (by default only builds older than sbrs' code)")
    parser.add_argument("--once", action="store_true",
                        help="hold each figure's first measurement to its bound (by default a figure beyond its "
                             "bound is measured once more, and the second measurement decides)")
    args = parser.parse_args(argv)
    if args.write_floors:
        saved = [json.loads(path.read_text(encoding="utf-8")) for path in args.write_floors]
        runs = [run["figures"] for run in saved]
        bounds = bounds_from_runs(runs, {name: kind_of(name) for name in runs[0]}, args.margin)
        floors = json.loads(args.floors.read_text(encoding="utf-8")) if args.floors.exists() else {}
        floors["about"] = ("each bound about 10 % beyond the worst of the quiet runs (listed) of benchmarks/guard.py "
                           "(see docs/MEASUREMENTS.md): floors for throughput, ceilings for switch delay, time to "
                           "first output and memory, all ratios of sbrs to plain ONNX Runtime measured in the same run")
        floors["runs"] = sorted({*floors.get("runs", []),
                                 *(f"{run.get('when', '')} (load {run.get('load_at_start', 0):.1f}, "
                                   f"{'quick' if run.get('quick') else 'full'}"
                                   f"{', ' + run['only'] + ' only' if run.get('only') else ''})" for run in saved)})
        floors["figures"] = {**floors.get("figures", {}), **bounds}  # the figures measured replace their bounds
        args.floors.write_text(json.dumps(floors, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"guard: {len(bounds)} bounds written to {args.floors}")
        return 0
    only = None if args.only is None else set(args.only.split(","))
    if only is not None and not only <= {"throughput", "switch", "startup"}:
        print(f"guard: error: --only {args.only}: parts are throughput, switch, startup", file=sys.stderr)
        return 2
    bounds = load_bounds(args.floors) if args.floors.exists() else {}
    wait_for_load(args.max_load)
    started = time.perf_counter()
    load = os.getloadavg()[0]
    figures, notes = measure(args.quick, only, args.rebuild, args.max_load)
    scope = _scope(args.quick, only)
    first = check(figures, bounds, only=scope)
    final, retries = (dict(figures), []) if args.once else measured_again(
        figures, first, lambda names: measure_again(names, args.quick))
    elapsed = time.perf_counter() - started
    if args.json is not None:  # the first measurements: what ``--write-floors`` sets bounds from
        args.json.write_text(json.dumps({"when": time.strftime("%Y-%m-%d %H:%M"), "quick": args.quick,
                                         "only": args.only, "seconds": round(elapsed), "load_at_start": load,
                                         "figures": figures, "measured_again": {r.name: r.second for r in retries},
                                         "notes": notes}, indent=1) + "\n", encoding="utf-8")
    print(table(final, bounds, {retry.name: retry.first for retry in retries}))
    checks = check(final, bounds, only=scope)
    for retry in retries:
        print(f"measured again: {retry.name} {retry.describe()}")
    for entry in checks:
        if entry.failed:
            print(f"beyond its bound: {entry.describe()}")
    print(f"({len(figures)} figures in {elapsed:.0f} s, load average {load:.1f} at the start)")
    print(verdict(checks, retries))
    return 1 if any(entry.failed for entry in checks) else 0


def _scope(quick: bool, only: set[str] | None) -> str | None:
    """The names a run is held to: a quick run's subset, and only the parts measured."""
    throughput = [*(QUICK_THROUGHPUT if quick else APPS), *(f"model/{m}" for m in (QUICK_MODELS if quick else MODELS))]
    prefixes = []
    if only is None or "throughput" in only:
        prefixes += [f"{name}/throughput" for name in throughput]
    if only is None or "switch" in only:
        prefixes += [f"{app}/switch" for app in (QUICK_SWITCH if quick else APPS)]
    if only is None or "startup" in only:
        prefixes += [f"{app}/{part}" for app in (QUICK_STARTUP if quick else APPS)
                     for part in ("first_output", "peak_rss", "pss")]
    return ",".join(prefixes)


if __name__ == "__main__":
    sys.exit(main())
