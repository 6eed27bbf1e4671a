"""``runtime.session: one`` against today's execution units and plain ONNX Runtime, in one run.

For each app (default drone and cifar10) a copy of the app file with ``runtime: {session: one}`` is written to
``--folder`` (scenario and model paths made absolute) and both are built (``sbrs build``). Then:

1. **Device memory**, each process fresh and read from outside above a bare interpreter (numpy and onnxruntime
   imported) started beside it (``sbrs.bench.device_memory``): ``sbrs.runtime_for(APP)`` on the units build and on
   the one-graph build (the ``python_api`` probe: every scenario run ``--frames`` frames, PSS read after), plain
   ONNX Runtime with every scenario's model loaded and run (``plain_ort``), and with the largest model alone after
   ``malloc_trim`` (``plain_ort_active``). ``floor``: the issue's target on the CPU, that last figure plus the
   other scenarios' unique parameters plus 3 MB.
2. **Time per frame**, in this process after the memory probes (their PSS would share this process's pages
   otherwise): per scenario, the units runtime, the one-graph runtime (``infer``), a plain ONNX Runtime session
   of the scenario's own model with default options (``run``) and one of the one graph (as a server runs the
   export), in interleaved blocks, medians.
3. **Switching on the one session** (``--switching``): whether starting the new scenario's frame beside the old
   one on the same session (ONNX Runtime runs concurrent calls of one session) beats waiting for the old frame:
   for every ordered pair, a frame of the old scenario starts on a thread, the request comes at a random moment
   within it, and the new frame runs either at once on the calling thread (``concurrent``) or after the old one
   returns (``wait``); Δ is request → new output, paired moments, interleaved, medians. The session is the
   build's ``one.onnx`` made as sbrs makes it (``sbrs.ort_env.create_session``, the app's threads).

4. **Against plain ONNX Runtime as ``sbrs bench`` measures** (``--table``, the issue's table): throughput per
   scenario of each build against plain ONNX Runtime at its better setting (intra-op threads or two frames at
   once; ``sbrs.bench.bench.measure_throughput``), switch Δ as the caller sees it, SBRS-TP against plain ONNX
   Runtime with every session loaded (``measure_switching``, mean over every ordered pair), and time to the
   first output of ``sbrs run APP --frames 1`` on each build against a plain ONNX Runtime script loading every
   scenario's model and running one frame (fresh processes, interleaved, medians of ``--repeats``).
5. **What ``runtime.session: auto`` adds to ``sbrs build``** (``--build-cost``, alone): for each app, a copy with
   ``session: auto`` and one with the default, each built with the build's timings removed (cold) and again
   with them kept (warm), interleaved, in fresh processes: seconds per build and what auto chose.

Usage: ``python benchmarks/one_session.py [APP.yaml ...] [--frames 20] [--repeats 5] [--switching] [--table]
[--build-cost] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def one_session_copy(app_path: Path, folder: Path, session: str = "one") -> Path:
    """``app_path`` rewritten into ``folder`` with ``runtime.session: session`` (``None``: as it is), its relative
    paths made absolute."""
    import yaml

    base = app_path.parent
    data = yaml.safe_load(app_path.read_text())
    for scenario in data["scenarios"]:
        for key in ("file", "model"):
            if key in scenario:
                scenario[key] = str((base / scenario[key]).resolve())
        calibration = (scenario.get("quantize") or {}).get("calibration")
        if calibration:
            scenario["quantize"]["calibration"] = str((base / calibration).resolve())
    tag = session or "default"
    data["name"] = f"{data['name']}-{tag}"
    if session is not None:
        data.setdefault("runtime", {})["session"] = session
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{app_path.stem}-{tag}.yaml"
    target.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


def build(app_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "sbrs.cli", "build", str(app_path), "-q"], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)


def memory(units_app: Path, one_app: Path, frames: int) -> dict[str, Any]:
    """PSS above the bare interpreter (MB) of every process (module docstring, 1)."""
    from sbrs.artifact.read import build_dir
    from sbrs.bench.device_memory import PROBES, Probe, bare_interpreter, build_facts, staged

    facts = build_facts(units_app)
    # a scenario of its own input size runs behind its Resize; made in a child, as this process must not map numpy
    # or onnxruntime before the probes (their PSS would share those pages with it)
    code = ("import json, sys; sys.path.insert(0, sys.argv[2]); from one_session import plain_model; "
            "from sbrs.app import load_app; app = load_app(sys.argv[1]); "
            "print(json.dumps([plain_model(app, s.name) for s in app.config.scenarios]))")
    models = json.loads(subprocess.run([sys.executable, "-c", code, str(units_app), str(Path(__file__).parent)],
                                       check=True, capture_output=True, text=True, cwd=ROOT).stdout)
    weights = (str(build_dir(units_app)) + os.sep, str(build_dir(one_app)) + os.sep,
               *sorted({str(Path(m).parent) + os.sep for m in (*facts["models"], *models)}))
    ort_args = {"shape": list(facts["input"]["shape"]), "dtype": facts["input"]["dtype"], "frames": frames}
    largest = max(models, key=lambda path: Path(path).stat().st_size)
    probes = {
        "sbrs units": ("python_api.py", str(units_app), str(frames)),
        "sbrs one": ("python_api.py", str(one_app), str(frames)),
        "plain ORT, all N": ("plain_ort.py", json.dumps({"models": models, **ort_args})),
        "plain ORT, largest alone": ("plain_ort.py", json.dumps({"models": [largest], **ort_args})),
    }
    figures: dict[str, Any] = {}
    for label, (script, *args) in probes.items():
        with bare_interpreter() as bare:
            stages = staged(Probe(label, [sys.executable, str(PROBES / script), *args], weights), bare)["stages"]
        stage = "trimmed" if label == "plain ORT, largest alone" else "ran"
        figures[label] = stages[stage]["pss_bytes"] / 1e6
    return figures


def unique_beside_largest(app_path: Path) -> int:
    """The app's unique parameter bytes that the largest scenario's model does not hold."""
    from sbrs.app import load_app
    from sbrs.model import params_bytes, unique_params

    app = load_app(app_path)
    largest = max(app.models.values(), key=lambda model: params_bytes([model]))
    own = set(unique_params([largest]))
    return sum(p.nbytes for digest, p in unique_params(app.models.values()).items() if digest not in own)


def frame_times(units_app: Path, one_app: Path, frames: int, repeats: int) -> dict[str, dict[str, float]]:
    """ms per frame per scenario: units, one, plain ORT (module docstring, 2)."""
    import numpy as np
    import onnxruntime as ort

    import sbrs
    from sbrs.app import load_app
    from sbrs.artifact.read import build_dir

    app = load_app(units_app)
    frame = np.random.default_rng(0).standard_normal(app.config.input.shape).astype(app.config.input.dtype)
    units, one = sbrs.runtime_for(units_app), sbrs.runtime_for(one_app)
    # the same graph as a server runs the export: a plain ONNX Runtime session with its default options
    graph = ort.InferenceSession(str(build_dir(one_app) / "one.onnx"), providers=["CPUExecutionProvider"])
    table: dict[str, dict[str, float]] = {}
    try:
        for index, scenario in enumerate(app.config.scenarios):
            plain = ort.InferenceSession(plain_model(app, scenario.name), providers=["CPUExecutionProvider"])
            feed = {plain.get_inputs()[0].name: frame}
            chosen = {app.config.input.name: frame, "scenario": np.array(index, np.int64)}
            units.switch(scenario.name)
            one.switch(scenario.name)
            sides = {"units": lambda: units.infer(frame), "one": lambda: one.infer(frame),
                     "plain": lambda feed=feed, plain=plain: plain.run(None, feed),
                     "graph in plain ORT": lambda chosen=chosen: graph.run(None, chosen)}
            samples: dict[str, list[float]] = {side: [] for side in sides}
            for run in sides.values():  # warm-up
                for _ in range(frames):
                    run()
            for _ in range(repeats):
                for side, run in sides.items():
                    start = time.perf_counter()
                    for _ in range(frames):
                        run()
                    samples[side].append((time.perf_counter() - start) / frames * 1e3)
            table[scenario.name] = {side: statistics.median(values) for side, values in samples.items()}
    finally:
        units.close()
        one.close()
    return table


def plain_model(app: Any, scenario: str) -> str:
    """The file plain ONNX Runtime runs for ``scenario``: its own model (behind its Resize where it has its own
    input size)."""
    config = app.config.scenario(scenario)
    if config.input_size is None:
        return config.model_path
    from sbrs.model.input_size import plain_model_file

    return plain_model_file(config.model_path, list(app.config.input.shape), config.input_size, tempfile.mkdtemp())


def switching(one_app: Path, repeats: int, seed: int = 0) -> dict[str, dict[str, float]]:
    """Median Δ (ms) per ordered pair: the new frame at once beside the old one, or after it (module docstring, 3)."""
    import numpy as np

    from sbrs.app import load_app
    from sbrs.artifact.read import build_dir
    from sbrs.ort_env import create_session, resolve_providers, use_threads

    app = load_app(one_app)
    providers = resolve_providers(tuple(app.config.runtime.providers))
    threads = use_threads(app.config.runtime.threads, app.config.runtime.threads_scope, None)
    session = create_session(str(build_dir(one_app) / "one.onnx"), providers, threads=threads.count,
                             scope=threads.scope)
    frame = np.random.default_rng(0).standard_normal(app.config.input.shape).astype(app.config.input.dtype)
    names = [s.name for s in app.config.scenarios]
    feeds = {s: {app.config.input.name: frame, "scenario": np.array(k, np.int64)} for k, s in enumerate(names)}
    length = {}
    for s in names:
        session.run(None, feeds[s])
        start = time.perf_counter()
        for _ in range(5):
            session.run(None, feeds[s])
        length[s] = (time.perf_counter() - start) / 5
    rng = random.Random(seed)
    table: dict[str, dict[str, float]] = {}
    for old in names:
        for new in names:
            if old == new:
                continue
            deltas: dict[str, list[float]] = {"wait": [], "concurrent": []}
            old_ends: dict[str, list[float]] = {"wait": [], "concurrent": []}
            for _ in range(repeats):
                moment = rng.random() * length[old]
                for method in ("wait", "concurrent"):
                    delta, old_end = _one_switch(session, feeds[old], feeds[new], moment, method)
                    deltas[method].append(delta * 1e3)
                    old_ends[method].append(old_end * 1e3)
            table[f"{old}->{new}"] = {f"{m} delta_ms": statistics.median(v) for m, v in deltas.items()} | {
                f"{m} old_frame_ms": statistics.median(v) for m, v in old_ends.items()}
    return table


def _one_switch(session: Any, old_feed: dict[str, Any], new_feed: dict[str, Any], moment: float,
                method: str) -> tuple[float, float]:
    """A frame on the old feed on a thread, a request ``moment`` seconds into it; (Δ, the old frame's time)."""
    finished: list[float] = []
    started = threading.Event()
    begin = 0.0

    def old_frame() -> None:
        nonlocal begin
        begin = time.perf_counter()
        started.set()
        session.run(None, old_feed)
        finished.append(time.perf_counter())

    thread = threading.Thread(target=old_frame)
    thread.start()
    started.wait()  # from the old call's start: a thread's start (a millisecond at times) is no part of Δ
    while time.perf_counter() - begin < moment:  # spin: a sleep's granularity is coarser than tiny's frames
        pass
    request = time.perf_counter()
    if method == "wait":
        thread.join()
    session.run(None, new_feed)
    done = time.perf_counter()
    thread.join()
    return done - request, finished[0] - begin


def first_outputs(units_app: Path, one_app: Path, repeats: int) -> dict[str, float]:
    """Seconds from a fresh process's start to its first output (module docstring, 4): ``sbrs run`` on each build
    (``sbrs.bench.probe``'s ``run`` mode) and a plain ONNX Runtime script with every scenario's model."""
    from sbrs.app.config import load_app_config
    from sbrs.bench.probe import probe_command

    config = load_app_config(units_app)
    order = [config.initial] + [s.name for s in config.scenarios if s.name != config.initial]
    plain = {"providers": ["CPUExecutionProvider"], "threads": config.runtime.threads or os.cpu_count() or 1,
             "shape": list(config.input.shape), "dtype": config.input.dtype, "frames": 1, "random": True,
             "models": [config.scenario(name).model_path for name in order]}
    sides = {"units": probe_command("run", str(units_app), "1"), "one": probe_command("run", str(one_app), "1"),
             "plain ORT, all N": probe_command("ort", json.dumps(plain))}
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    for command in sides.values():  # bytecode written, files in the page cache
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    samples: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(repeats):
        for side, command in sides.items():
            start = time.perf_counter()
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                       env=env)
            assert process.stdout is not None
            process.stdout.readline()
            samples[side].append(time.perf_counter() - start)
            process.stdout.read()
            if process.wait() != 0:
                raise SystemExit(f"{side}: {command[:4]}... failed")
    return {side: statistics.median(values) for side, values in samples.items()}


def against_plain(units_app: Path, one_app: Path, frames: int, repeats: int) -> dict[str, Any]:
    """Throughput per scenario and switch Δ against plain ONNX Runtime, each build in its own run, and time to
    first output (module docstring, 4)."""
    from sbrs.bench.bench import measure_throughput
    from sbrs.bench.switching import measure_switching

    row: dict[str, Any] = {"first_output_s": first_outputs(units_app, one_app, repeats)}
    for side, path in (("units", units_app), ("one", one_app)):
        measured = measure_throughput(str(path), frames=frames, repeats=repeats, granularity=None)
        row.setdefault("throughput_ratio", {})[side] = {s: f["ratio"] for s, f in measured["scenarios"].items()}
        switching = measure_switching(str(path), repeats=repeats, methods=("sbrs-tp", "ort-all"))["overall"]
        row.setdefault("switch", {})[side] = {"mean_ms": switching["sbrs-tp"]["mean_s"] * 1e3,
                                              "ort_all_mean_ms": switching["ort-all"]["mean_s"] * 1e3,
                                              "ratio": switching["ratios"]["sbrs-tp"]}
    return row


def build_cost(apps: list[str], folder: Path, repeats: int) -> dict[str, Any]:
    """Seconds per ``sbrs build`` of each app with the default session and with ``auto``, the build's timings
    removed (cold) and kept (warm), and what auto chose (module docstring, 5)."""
    from sbrs.artifact.read import MANIFEST, build_dir
    from sbrs.cache import cache_dir

    timings = cache_dir("timings")
    report: dict[str, Any] = {}
    for app in apps:
        copies = {"default": one_session_copy(Path(app).resolve(), folder, None),
                  "auto": one_session_copy(Path(app).resolve(), folder, "auto")}
        build(copies["default"])  # models exported, derived and cached as a user's second build finds them
        samples: dict[str, list[float]] = {f"{side} {state}": [] for side in copies for state in ("cold", "warm")}
        for _ in range(repeats):
            for side, path in copies.items():
                for state in ("cold", "warm"):
                    if state == "cold":
                        for entry in timings.glob("*.json"):
                            entry.unlink()
                    start = time.perf_counter()
                    build(path)
                    samples[f"{side} {state}"].append(time.perf_counter() - start)
        chosen = json.loads((build_dir(copies["auto"]) / MANIFEST).read_text())["session"]
        report[Path(app).stem] = {"build_s": {key: statistics.median(values) for key, values in samples.items()},
                                  "auto_chose": chosen["session"], "reason": chosen["reason"],
                                  "load": chosen["load"]}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("apps", nargs="*", default=[str(ROOT / "apps" / f"{n}.yaml") for n in ("drone", "cifar10")])
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--switching", action="store_true")
    parser.add_argument("--no-memory", action="store_true", help="time frames (and switches) only")
    parser.add_argument("--folder", default=str(Path(tempfile.gettempdir()) / "sbrs-bench-one"),
                        help="where the one-graph app copies and their builds go")
    parser.add_argument("--table", action="store_true", help="throughput, switch delay and first output against "
                        "plain ONNX Runtime as sbrs bench measures them (module docstring, 4)")
    parser.add_argument("--no-frame-times", action="store_true", help="skip the interleaved frame times (2)")
    parser.add_argument("--build-cost", action="store_true", help="only the extra build time of session: auto (5)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {}
    if args.build_cost:
        report = build_cost(args.apps, Path(args.folder), args.repeats)
        print(json.dumps(report, indent=1))
        return 0
    pairs = []
    for app in args.apps:
        units_app = Path(app).resolve()
        one_app = one_session_copy(units_app, Path(args.folder))
        build(units_app)
        build(one_app)
        pairs.append((units_app, one_app))
    for units_app, one_app in pairs:  # every memory probe before this process imports numpy or onnxruntime
        report[units_app.stem] = {} if args.no_memory else {"pss_mb": memory(units_app, one_app, args.frames)}
    for units_app, one_app in pairs:
        pss = report[units_app.stem].get("pss_mb")
        if pss is not None:
            pss["floor"] = pss["plain ORT, largest alone"] + unique_beside_largest(units_app) / 1e6 + 3.0
        if not args.no_frame_times:
            report[units_app.stem]["ms_per_frame"] = frame_times(units_app, one_app, args.frames, args.repeats)
        if args.table:
            report[units_app.stem]["against_plain"] = against_plain(units_app, one_app, args.frames, args.repeats)
        if args.switching:
            report[units_app.stem]["switching"] = switching(one_app, args.repeats)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    for app, row in report.items():
        pss = row.get("pss_mb", {})
        print(f"{app}: PSS above a bare interpreter, MB: " + ", ".join(f"{k} {v:.1f}" for k, v in pss.items()))
        print(f"  {'scenario':<12} {'units ms':>9} {'one ms':>8} {'plain ms':>9} {'one/plain':>9} {'units/plain':>11}")
        for scenario, t in row.get("ms_per_frame", {}).items():
            print(f"  {scenario:<12} {t['units']:>9.3f} {t['one']:>8.3f} {t['plain']:>9.3f} "
                  f"{t['one'] / t['plain']:>9.2f} {t['units'] / t['plain']:>11.2f}")
        plain = row.get("against_plain")
        if plain is not None:
            print("  first output s: " + ", ".join(f"{k} {v:.3f}" for k, v in plain["first_output_s"].items()))
            for side in ("units", "one"):
                ratios = plain["throughput_ratio"][side]
                switch = plain["switch"][side]
                print(f"  {side}: throughput / plain ORT's best " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items())
                      + f"; switch Δ {switch['mean_ms']:.2f} ms, {switch['ratio']:.2f} of plain ORT's "
                        f"{switch['ort_all_mean_ms']:.2f}")
        for pair, figures in row.get("switching", {}).items():
            print(f"  {pair:<24} " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
