"""The regression guard: sbrs against plain ONNX Runtime at its better setting, in one run, against committed floors.

Run it before a change lands (CONTRIBUTING.md); it stays out of CI, where timing is noisy and decides nothing.
Every figure is a ratio to plain ONNX Runtime measured in the same run, interleaved:

- ``APP/throughput/SCENARIO`` (floor): frames per second of ``process`` on the app's build against the better of
  plain ONNX Runtime's default session (its intra-op threads) and two frames at once on one-thread sessions
  (``sbrs bench``'s throughput part, ``sbrs.bench.bench.measure_throughput``); ``model/NAME/throughput`` the
  same for committed real models (tests/data/torchvision, float and int8) as one-scenario apps.
- ``APP/switch`` (ceiling): the mean switch response delay Δ as the caller sees it, sbrs over plain ONNX Runtime
  with every scenario's session loaded (``sbrs bench --switching``'s comparator: sessions on every core whose
  pools stop spinning when a call returns; with ONNX Runtime's default spinning pools every plain switch is
  slower, drone 48-63 against 31-33 ms, so that is not plain ONNX Runtime's better setting). One long stream of
  frames on each side; a thread asks for another scenario at a random moment (1-3 frames after the previous
  switch ended, so anywhere in a frame, never at a step boundary on purpose); Δ runs from the request to the
  moment the caller holds the output of the frame that took it (``_Requests``: since 2026-11-29's fourth stop;
  before, the first output of the scenario asked for, which could be an older frame's). Blocks of both sides
  alternate. The difference of the
  means in µs is printed beside it.
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
machine (``--write-floors``). The run prints a table, names every figure beyond its bound, exits 1 if any is
(2 for bad arguments), and ends with a one-line verdict. ``--quick`` (at most 5 minutes on the 2-core
development machine) takes a subset: throughput of tiny, pamap2, cifar10, drone and detect and of five real
models, switching on tiny, drone and multi-cnn, start-up on tiny, cifar10 and drone.

    python benchmarks/guard.py [--quick] [--rebuild] [--only throughput,switch,startup] [--json RUN.json]
    python benchmarks/guard.py --write-floors RUN1.json RUN2.json [--margin 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from sbrs.bench.floors import bounds_from_runs, check, load_bounds, verdict

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
#: Seconds of switching per side and app (drone: about 40 switches, tiny several hundred), and the bounds on
#: the number of switches.
SWITCH_BUDGET_S = 3.0
SWITCH_SAMPLES = (12, 300)
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


class _Requests:
    """The thread that asks for switches: each at a random moment 1-3 frames of the current scenario after the
    previous switch ended; ``delays`` are the caller's Δ. Plain ONNX Runtime's loop reports every output
    (``held``: a switch ends at the first output of the scenario asked for); sbrs's reports every result
    (``out``): its Δ ends at the output of the frame that took the request (the result carrying the switch's
    record), and the switch at the output of every frame taken before that one. An older frame of the scenario
    asked for may still be in flight when the request comes: on one stream the old frame of the previous SBRS-TP
    switch (multi-cnn: a ResNet-50 frame, 30 ms, finishing 3-9 ms after MobileNet took over), on two streams a
    frame stopped and run again. Counting its output ended such switches early (multi-cnn's Δ read 10.6-10.9 ms
    where the frame that took the request came out after 20.5-22.4 ms); asking while it ran measured a switch
    from inside another."""

    def __init__(self, ask: Callable[[str], None], scenarios: list[str], start: str, frame_s: dict[str, float],
                 count: int, rng: random.Random) -> None:
        self.ask, self.scenarios, self.frame_s, self.count, self.rng = ask, scenarios, frame_s, count, rng
        self.current = start
        self.target: str | None = None
        self.requested = 0.0
        self.delays: list[float] = []
        self.switched = threading.Event()
        self.settled = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="guard-requests", daemon=True)
        self._first_not_out = 0  # sbrs's frames: every frame before it is out
        self._out: set[int] = set()  # frames out after ``_first_not_out``
        self._switch_frame: int | None = None  # the frame that took the request, until every frame before it is out

    def _run(self) -> None:
        for _ in range(self.count):
            time.sleep(self.rng.uniform(1.0, 3.0) * self.frame_s[self.current])
            target = self.rng.choice([s for s in self.scenarios if s != self.current])
            self.switched.clear()
            self.settled.clear()
            self.target = target
            self.requested = time.perf_counter()
            self.ask(target)
            if not (self.switched.wait(30.0) and self.settled.wait(30.0)):
                break
            self.current = target
        self.done.set()

    def held(self, scenario: str, *, settled: bool = True) -> None:
        """The caller holds an output of ``scenario`` now (``settled``: nothing of the old scenario is in flight)."""
        if scenario == self.target and not self.switched.is_set():
            self.delays.append(time.perf_counter() - self.requested)
            self.target = None
            self.switched.set()
        if settled:
            self.settled.set()

    def out(self, index: int, scenario: str, took_request: bool) -> None:
        """sbrs's result of frame ``index`` on ``scenario`` is with the caller now; ``took_request``: the frame
        took the request (its result carries the switch's record)."""
        self._out.add(index)
        while self._first_not_out in self._out:
            self._out.remove(self._first_not_out)
            self._first_not_out += 1
        if took_request:
            self._switch_frame = index
            self.held(scenario, settled=False)
        if self._switch_frame is not None and self._first_not_out > self._switch_frame:
            self._switch_frame = None
            self.settled.set()


def _sbrs_switches(runtime: Any, frame: np.ndarray, requests: _Requests) -> None:
    def frames() -> Iterator[np.ndarray]:
        while not requests.done.is_set():
            yield frame

    runtime.switch(requests.current, "guard")
    requests.thread.start()
    for result in runtime.process(frames()):
        requests.out(result.index, result.scenario, result.switch is not None)


def _ort_switches(sessions: dict[str, Any], feed: str, frame: np.ndarray, requests: _Requests) -> None:
    wanted = [requests.current]
    requests.ask = lambda name: wanted.__setitem__(0, name)
    requests.thread.start()
    while not requests.done.is_set():
        name = wanted[0]  # the frame boundary: a request made during the frame takes effect here
        sessions[name].run(None, {feed: frame})
        requests.held(name)


def switching(path: str, app: str, seed: int = 0) -> tuple[dict[str, float], list[str]]:
    from sbrs.app import load_app
    from sbrs.model.input_size import plain_model_file
    from sbrs.ort_env import create_session
    from sbrs.runtime import runtime_for

    loaded = load_app(path)
    config = loaded.config
    frame = np.random.default_rng(seed).standard_normal(config.input.shape).astype(config.input.dtype)
    scratch = tempfile.TemporaryDirectory(prefix="sbrs-guard-")
    files = {s.name: plain_model_file(s.model_path, config.input.shape, s.input_size, scratch.name)
             for s in config.scenarios}
    del loaded
    rng = random.Random(seed)
    with scratch, runtime_for(path) as runtime:
        # plain sessions of the scenarios' files, their pools stopping to spin when a call returns: ONNX Runtime's
        # default sessions keep spinning, and on two cores the idle pools of the other sessions make every switch
        # slower (drone, quiet: Δ 48-63 ms against 31-33 ms) and slow whatever runs beside them in this process
        sessions = {name: create_session(file, ("CPUExecutionProvider",), threads=runtime.thread_pool.count)
                    for name, file in files.items()}
        feed = next(iter(sessions.values())).get_inputs()[0].name
        frame_s = {}
        for name, session in sessions.items():  # warm both sides; ORT's frame time paces the requests
            runtime.switch(name)
            for _ in range(3):
                runtime.infer(frame)
            times = []
            for _ in range(5):
                start = time.perf_counter()
                session.run(None, {feed: frame})
                times.append(time.perf_counter() - start)
            frame_s[name] = statistics.median(times)
        scenarios = list(sessions)
        per_switch = 3 * statistics.fmean(frame_s.values())
        count = int(min(SWITCH_SAMPLES[1], max(SWITCH_SAMPLES[0], SWITCH_BUDGET_S / per_switch)) // SWITCH_ROUNDS)
        delays: dict[str, list[float]] = {"sbrs": [], "ort": []}
        start = scenarios[0]
        for round_ in range(SWITCH_ROUNDS):
            for side in (("sbrs", "ort") if round_ % 2 == 0 else ("ort", "sbrs")):
                requests = _Requests(runtime.switch, scenarios, start, frame_s, count, rng)
                if side == "sbrs":
                    _sbrs_switches(runtime, frame, requests)
                else:
                    _ort_switches(sessions, feed, frame, requests)
                requests.thread.join()
                delays[side].extend(requests.delays)
        streams = runtime.memory_report().get("streams", 1)
    sbrs_mean, ort_mean = statistics.fmean(delays["sbrs"]), statistics.fmean(delays["ort"])
    figures = {f"{app}/switch": round(sbrs_mean / ort_mean, 4)}
    notes = [f"{app}/switch: Δ sbrs {sbrs_mean * 1e3:.3f} ms, ORT all loaded {ort_mean * 1e3:.3f} ms "
             f"({(sbrs_mean - ort_mean) * 1e6:+.0f} µs), {len(delays['sbrs'])}/{len(delays['ort'])} switches, "
             f"{streams} stream(s)"]
    return figures, notes


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
    frames, repeats = (10, 3) if quick else (20, 5)
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
    models = {name: model_app(name, MODELS[name]) for name in (QUICK_MODELS if quick else MODELS)
              if wanted("throughput")}
    builds = {**{app: app_path(app) for app in dict.fromkeys(apps)}, **{f"model/{m}": p for m, p in models.items()}}
    for name, path in builds.items():
        wait_for_load(max_load)
        add(({}, [f"{name}: build of {fresh_build(path, rebuild)}"]))
    wait_for_load(max_load)
    if wanted("throughput"):
        for app in QUICK_THROUGHPUT if quick else APPS:
            add(throughput(app_path(app), app, frames, repeats))
        for name, path in models.items():
            add(throughput(path, f"model/{name}", frames, repeats))
    if wanted("switch"):
        for app in QUICK_SWITCH if quick else APPS:
            add(switching(app_path(app), app))
    if wanted("startup"):
        for app in QUICK_STARTUP if quick else APPS:
            add(startup(app, STARTUP_REPEATS))
    return figures, notes


def wait_for_load(max_load: float | None, limit_s: float = 3600) -> None:
    """Wait (at most ``limit_s``) until the 1-minute load average is under ``max_load`` (None: not at all)."""
    deadline = time.monotonic() + limit_s
    while max_load is not None and os.getloadavg()[0] >= max_load and time.monotonic() < deadline:
        time.sleep(15)


def table(figures: dict[str, float], floors: dict[str, Any]) -> str:
    from sbrs.bench.floors import Check

    lines = [f"{'figure':<44} {'value':>7} {'bound':>16}  ok"]
    for name, value in figures.items():
        entry = Check(name, value, floors.get(name))
        bound = "" if entry.bound is None else f"{entry.bound.kind} {entry.bound.value:.3f}"
        lines.append(f"{name:<44} {value:>7.3f} {bound:>16}  {'FAIL' if entry.failed else '✓' if bound else '-'}")
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
    elapsed = time.perf_counter() - started
    if args.json is not None:
        args.json.write_text(json.dumps({"when": time.strftime("%Y-%m-%d %H:%M"), "quick": args.quick,
                                         "only": args.only, "seconds": round(elapsed), "load_at_start": load,
                                         "figures": figures, "notes": notes}, indent=1) + "\n", encoding="utf-8")
    print(table(figures, bounds))
    checks = check(figures, bounds, only=_scope(args.quick, only))
    for entry in checks:
        if entry.failed:
            print(f"below its bound: {entry.describe()}")
    print(f"({len(figures)} figures in {elapsed:.0f} s, load average {load:.1f} at the start)")
    print(verdict(checks))
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
