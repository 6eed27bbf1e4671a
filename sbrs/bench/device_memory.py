"""What the device pays: the memory of fresh processes running an app, read from outside, above a bare interpreter.

Every figure comes from ``/proc/PID/smaps`` of a process this module starts, read while the process waits at a
known point (``sbrs.bench.probes``), beside an interpreter that imported only numpy and onnxruntime (the
*bare* baseline), started with it and alive at the same time, so that the pages of shared libraries both map
are shared, and age, the same way in both. PSS counts a page once however many mappings hold it (the weights
several sessions map from one file), RSS once per mapping; both are given above the baseline. Other processes
that map the same libraries at the same moment (another ONNX Runtime program) lower PSS: measure on a quiet
machine. A kernel that drops file pages nobody touched for a while (DAMON's pageout on the development VM: a
minute) lowers the PSS of code and weights as a process ages; the figures are read seconds after start.

The processes, each fresh, one after another:

- ``sbrs run``: the command as a user starts it on the app's current build, with its control socket; every
  scenario is switched to through that socket and runs for at least ``frames`` frames; read while it runs.
- ``python_api``: ``sbrs.runtime_for(app_path)`` in a script, every scenario run ``frames`` frames, read at
  stages: after ``import sbrs``, after the runtime is opened, after every scenario ran.
- ``plain_ort``: every scenario's own ONNX model as a session with ONNX Runtime's default options, all
  loaded, each run ``frames`` frames (what a user runs without sbrs), read as it is and after glibc's
  ``malloc_trim``; ``plain_ort_active``: the largest scenario's model alone (a user loading the active
  scenario on each switch holds at most that), also after ``malloc_trim``. The bounds below judge that one too:
  where plain ONNX Runtime holding one model of the app is over a bound, no runtime built of ONNX Runtime
  sessions of the app's models is within it.

Where it goes (``split``): file-backed mappings are split into the weights mapped from the build's or the
models' files, ONNX Runtime's library, and other code (the interpreter, numpy, other libraries); anonymous
memory (heap and anonymous mappings) is split by the stage at which it appeared in ``python_api``: importing
sbrs (its Python), opening the runtime (sessions, ONNX Runtime's copies of the weights such as pre-packed
ones, the arena's untouched pages are not resident yet), running every scenario (the tensors inside ONNX
Runtime calls in its allocator, sbrs' arena as it is touched, what the first frames allocate).

- ``onnxruntime_code``: plain ONNX Runtime running one small convolution (``CODE_MODEL_SHAPE``, 1.7 kB of weights):
  what the first session of a process costs above the bare interpreter, ONNX Runtime's code pages and its own
  heap, in this very run.

Beside the measured figures: the plan (``sbrs.bench.device_memory.plan_figures``) and the bound the device
memory issue sets, ``1.1 × plan + 13 MB`` (ONNX Runtime's code, measured at about 10 MB by that issue, and
a few MB of sbrs' Python), and the same bound with the code measured in this run, ``1.1 × plan +
onnxruntime_code + 3 MB`` (``bound_same_run_bytes``). The code's share moves between runs on the development
VM by about 4.5 MB (ONNX Runtime's library counted 4.5 MB above the bare interpreter in one run, 9.0 in the
next: what the kernel's reclaim left resident of the bare interpreter's pages), and with it every process's
figure; measured in the same run, it cancels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbrs.errors import InputError, SbrsRuntimeError

PROBES = Path(__file__).resolve().parent / "probes"
#: Each scenario runs at least this many frames before a process is read.
FRAMES = 20
#: How long a probe may take to reach its next stage (loading multi-cnn takes a few seconds on 2 cores).
STAGE_TIMEOUT_S = 300.0
#: The fixed part of the bound: ONNX Runtime's code (about 10 MB for the first session of a process) and a few
#: MB of sbrs' own Python.
BOUND_FIXED_BYTES = 13_000_000
BOUND_FACTOR = 1.1
#: The bound's allowance for sbrs' own Python beside ONNX Runtime's code measured in the same run.
SBRS_PYTHON_BYTES = 3_000_000
#: The model of the ``onnxruntime_code`` probe: one 3x3 convolution, 3 -> 16 channels, on a 1x3x32x32 frame.
CODE_MODEL_SHAPE = (1, 3, 32, 32)
#: The categories of ``split``.
CATEGORIES: tuple[str, ...] = ("weights_files", "onnxruntime_library", "other_code", "anonymous", "other")


@dataclass(frozen=True)
class Reading:
    """One process's memory at one moment: PSS and RSS in bytes per category (``CATEGORIES``) and its peak RSS."""

    pss: Mapping[str, int]
    rss: Mapping[str, int]
    peak_rss: int

    @property
    def pss_total(self) -> int:
        return sum(self.pss.values())

    @property
    def rss_total(self) -> int:
        return sum(self.rss.values())

    def above(self, bare: Reading) -> dict[str, Any]:
        """This reading above ``bare``: totals and the split, in bytes."""
        return {"pss_bytes": self.pss_total - bare.pss_total, "rss_bytes": self.rss_total - bare.rss_total,
                "peak_rss_bytes": self.peak_rss - bare.peak_rss,
                "split_pss_bytes": {c: self.pss.get(c, 0) - bare.pss.get(c, 0) for c in CATEGORIES}}


def _category(path: str, weights: tuple[str, ...]) -> str:
    if not path:
        return "anonymous"
    if path == "[heap]":
        return "anonymous"
    if path.startswith("["):
        return "other"  # stack, vdso, vvar
    if path.startswith(weights):
        return "weights_files"
    if "onnxruntime" in os.path.basename(path):
        return "onnxruntime_library"
    return "other_code"


def read_process(pid: int, weights: tuple[str, ...] = ()) -> Reading:
    """PSS and RSS of process ``pid`` per category (``weights``: path prefixes of weight and model files)."""
    pss: Counter[str] = Counter()
    rss: Counter[str] = Counter()
    category = "other"
    try:
        with open(f"/proc/{pid}/smaps", encoding="utf-8", errors="replace") as smaps:
            for line in smaps:
                head, _, rest = line.partition(" ")
                if head.endswith(":"):
                    if head == "Pss:":
                        pss[category] += int(rest.split()[0]) * 1024
                    elif head == "Rss:":
                        rss[category] += int(rest.split()[0]) * 1024
                elif "-" in head:  # a mapping's header: address range, perms, offset, dev, inode, [path]
                    fields = line.split(maxsplit=5)
                    category = _category(fields[5].strip() if len(fields) > 5 else "", weights)
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration) as exc:
        raise SbrsRuntimeError(f"cannot read the memory of process {pid}: {exc}") from None
    return Reading(dict(pss), dict(rss), peak)


class Probe:
    """A probe process (``sbrs.bench.probes``) driven stage by stage; ``readings`` maps stage → ``Reading``."""

    def __init__(self, label: str, command: list[str], weights: tuple[str, ...] = ()) -> None:
        self.label = label
        self.weights = weights
        self.facts: dict[str, Any] = {}
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, cwd=PROBES)

    def next_stage(self) -> str | None:
        """Wait for the probe's next stage; None when it ended without one."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + STAGE_TIMEOUT_S
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                return None
            if line.startswith("STAGE "):
                _, name, facts = line.rstrip("\n").split(" ", 2)
                self.facts[name] = json.loads(facts)
                return name
        raise SbrsRuntimeError(f"bench: the {self.label} probe reached no stage in {STAGE_TIMEOUT_S:g} s")

    def go_on(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()

    def readings(self, bare: Bare) -> Iterator[tuple[str, dict[str, Any]]]:
        """Each stage's reading above ``bare`` (read at the same moment), as the probe reaches it."""
        while (name := self.next_stage()) is not None:
            yield name, bare.above(read_process(self.process.pid, self.weights))
            self.go_on()

    def close(self) -> None:
        if self.process.poll() is None:
            with suppress(OSError, ValueError):
                assert self.process.stdin is not None
                self.process.stdin.close()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.returncode not in (0, None, -9):
            error = (self.process.stderr.read() if self.process.stderr else "").strip().splitlines()
            raise SbrsRuntimeError(f"bench: the {self.label} probe failed: {error[-1] if error else 'no output'}")


def _probe(label: str, script: str, *args: str, weights: tuple[str, ...] = ()) -> Probe:
    return Probe(label, [sys.executable, str(PROBES / script), *args], weights)


class Bare:
    """The baseline process. Read at the same moment as the process measured against it: a page of a shared
    library both map counts half in each while both live, and in full in one living alone."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def above(self, reading: Reading) -> dict[str, Any]:
        return reading.above(read_process(self.pid))


@contextmanager
def bare_interpreter() -> Iterator[Bare]:
    """The baseline process, alive for the ``with`` block."""
    probe = _probe("bare", "bare.py")
    try:
        if probe.next_stage() != "bare":
            probe.close()
            raise SbrsRuntimeError("bench: the bare interpreter did not start")
        yield Bare(probe.process.pid)
    finally:
        probe.close()


def staged(probe: Probe, bare: Bare) -> dict[str, Any]:
    """Every stage of ``probe`` above ``bare``, and the facts the probe reported."""
    try:
        stages = dict(probe.readings(bare))
    finally:
        probe.close()
    return {"stages": stages, "facts": probe.facts}


def measure_sbrs_run(app_path: Path, bare: Bare, weights: tuple[str, ...], frames: int) -> dict[str, Any]:
    """``sbrs run APP`` with its control socket, every scenario switched to and run; read while it runs."""
    from sbrs.server.client import send_request

    with tempfile.TemporaryDirectory(prefix="sbrs-bench-") as folder:
        socket_path = str(Path(folder) / "run.sock")
        process = subprocess.Popen([sys.executable, "-m", "sbrs.cli", "run", str(app_path), "--socket", socket_path],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   text=True, cwd=PROBES)
        try:
            status = _wait_for_status(process, socket_path)
            for scenario in status["scenarios"]:
                send_request(socket_path, {"op": "switch", "scenario": scenario})
                _wait_for_frames(process, socket_path, scenario, frames)
            above = bare.above(read_process(process.pid, weights))
        finally:
            process.terminate()
            try:
                _, error = process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                _, error = process.communicate()
        if process.returncode not in (0, -15):
            last = (error or "").strip().splitlines()
            raise SbrsRuntimeError(f"bench: sbrs run failed: {last[-1] if last else process.returncode}")
    return {"stages": {"ran": above}, "facts": {}}


def _wait_for_status(process: subprocess.Popen[str], socket_path: str) -> dict[str, Any]:
    from sbrs.server.client import send_request

    deadline = time.monotonic() + STAGE_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            error = (process.stderr.read() if process.stderr else "").strip().splitlines()
            raise SbrsRuntimeError(f"bench: sbrs run ended: {error[-1] if error else process.returncode}")
        if os.path.exists(socket_path):  # bound, perhaps not listening yet: a refused connection is a retry
            with suppress(OSError, ValueError, SbrsRuntimeError):
                return send_request(socket_path, {"op": "status"})
        time.sleep(0.05)
    raise SbrsRuntimeError(f"bench: sbrs run did not answer on its socket in {STAGE_TIMEOUT_S:g} s")


def _wait_for_frames(process: subprocess.Popen[str], socket_path: str, scenario: str, frames: int) -> None:
    """Until ``scenario`` has run at least ``frames`` frames (from the fps ``status`` reports, with a margin)."""
    from sbrs.server.client import send_request

    switched = time.monotonic()
    while time.monotonic() - switched < STAGE_TIMEOUT_S:
        time.sleep(0.05)
        status = send_request(socket_path, {"op": "status"})
        fps = status.get("measured", {}).get(scenario, {}).get("fps")
        if status.get("scenario") == scenario and fps and (time.monotonic() - switched) * fps >= 2 * frames:
            return
        if process.poll() is not None:
            raise SbrsRuntimeError("bench: sbrs run ended while switching")
    raise SbrsRuntimeError(f"bench: scenario {scenario} did not run {frames} frames in {STAGE_TIMEOUT_S:g} s")


def build_facts(app_path: str | Path) -> dict[str, Any]:
    """What the probes need from the app's current build, read from its manifest as JSON (nothing imported
    that maps a library the probes map): the app's name, input, each scenario's model file and the plan
    (``sbrs.compile.footprint``: parameters as executed, every tensor, transition room, in bytes)."""
    from sbrs.artifact.read import MANIFEST, build_dir

    folder = build_dir(app_path)
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        config, footprint = manifest["config"], manifest["footprint"]
        facts = {"app": str(config["name"]), "input": dict(config["input"]), "plan": dict(footprint),
                 "models": [str(Path(s["model_path"]).resolve()) for s in config["scenarios"]],
                 "input_sizes": [s.get("input_size") for s in config["scenarios"]]}
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(f"no readable build; run `sbrs build {app_path}` first", file=str(folder)) from None
    missing = [model for model in facts["models"] if not Path(model).is_file()]
    if missing:  # an app's inline layers are compiled into the model cache, which may have been cleared since
        raise InputError(f"the build's scenario model {missing[0]} is gone; run `sbrs build {app_path}`",
                         file=str(folder))
    return facts


#: Modules whose libraries the probes map: a measuring process holding them shares their pages with every probe
#: and lowers each one's PSS by a different amount (``measure_device_memory`` measures from a clean process).
SHARED_LIBRARY_MODULES: tuple[str, ...] = ("numpy", "onnxruntime", "onnx")


def measure_device_memory(app_path: str | Path, *, frames: int = FRAMES) -> dict[str, Any]:
    """Device memory of ``sbrs run``, the Python API and plain ONNX Runtime for the app's current build (module
    docstring), with the plan and the bound beside them; JSON-ready, bytes.

    A process that has numpy or ONNX Runtime loaded (``sbrs bench`` measuring throughput first) would share
    their pages with every probe: PSS divides a page among the processes mapping it, so each probe would count
    less of ONNX Runtime's library than on a device where it runs alone. Such a caller measures from a fresh
    child (``python -m sbrs.bench.device_memory``) that imports neither."""
    if frames < 1:
        raise InputError(f"frames {frames} must be >= 1", field="frames")
    app_path = Path(app_path).resolve()
    if any(name in sys.modules for name in SHARED_LIBRARY_MODULES):
        return _measure_in_child(app_path, frames)
    facts = build_facts(app_path)
    from sbrs.artifact.read import build_dir

    weights = (str(build_dir(app_path)) + os.sep,
               *sorted({str(Path(m).parent) + os.sep for m in facts["models"]}))
    scratch = tempfile.TemporaryDirectory(prefix="sbrs-bench-")  # removed when this function returns
    plan, models = facts["plan"], _plain_models(facts, scratch.name)
    ort_args = {"shape": list(facts["input"]["shape"]), "dtype": facts["input"]["dtype"], "frames": frames}
    largest = max(models, key=lambda path: Path(path).stat().st_size)
    report: dict[str, Any] = {"app": facts["app"], "frames_per_scenario": frames, "plan": plan,
                              "bound_bytes": int(BOUND_FACTOR * plan["plan_bytes"] + BOUND_FIXED_BYTES)}
    # Each process is read beside a bare interpreter started with it: both import the same libraries at the same
    # moment, so a page of them that the machine drops while nobody touches it (a kernel's reclaim of cold file
    # pages, e.g. DAMON's pageout) is dropped from both alike; one baseline kept alive across every process
    # aged differently (measured: 42.5 against 34.6 MB of its own PSS an hour apart, every figure above it moving).
    with bare_interpreter() as bare:
        alone = read_process(bare.pid)
        report["bare_pss_bytes"], report["bare_rss_bytes"] = alone.pss_total, alone.rss_total
        report["sbrs_run"] = measure_sbrs_run(app_path, bare, weights, frames)
    with bare_interpreter() as bare:
        report["python_api"] = staged(_probe("python_api", "python_api.py", str(app_path), str(frames),
                                             weights=weights), bare)
    with bare_interpreter() as bare:
        report["plain_ort"] = staged(_probe("plain_ort", "plain_ort.py", json.dumps({"models": models, **ort_args}),
                                            weights=weights), bare)
    with bare_interpreter() as bare:
        report["plain_ort_active"] = staged(_probe("plain_ort_active", "plain_ort.py",
                                                   json.dumps({"models": [largest], **ort_args}), weights=weights),
                                            bare)
    code_args = {"models": [_code_model(scratch.name)], "shape": list(CODE_MODEL_SHAPE), "dtype": "float32",
                 "frames": frames}
    with bare_interpreter() as bare:
        report["onnxruntime_code"] = staged(_probe("onnxruntime_code", "plain_ort.py", json.dumps(code_args)), bare)
    code = report["onnxruntime_code"]["stages"]["ran"]["pss_bytes"]
    report["bound_same_run_bytes"] = int(BOUND_FACTOR * plan["plan_bytes"] + code + SBRS_PYTHON_BYTES)
    report["summary"] = summarize(report)
    return report


def _code_model(folder: str) -> str:
    """The ``onnxruntime_code`` probe's model (``CODE_MODEL_SHAPE``, seeded weights), written by a short-lived
    child so that this process never imports onnx (``_in_child``)."""
    path = os.path.join(folder, "code.onnx")
    code = ("import sys\nimport numpy as np\nimport onnx\nfrom onnx import helper, numpy_helper\n"
            "n, c, h, w = (int(v) for v in sys.argv[2:6])\n"
            "weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, c, 3, 3))"
            ".astype(np.float32), 'w')\n"
            "graph = helper.make_graph([helper.make_node('Conv', ['x', 'w'], ['y'], pads=[1, 1, 1, 1])], 'code', "
            "[helper.make_tensor_value_info('x', onnx.TensorProto.FLOAT, [n, c, h, w])], "
            "[helper.make_tensor_value_info('y', onnx.TensorProto.FLOAT, [n, 16, h, w])], [weight])\n"
            "onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)], ir_version=8), "
            "sys.argv[1])\n")
    _in_child(code, [path, *map(str, CODE_MODEL_SHAPE)], "write the code probe's model")
    return path


def _in_child(code: str, args: list[str], what: str) -> str:
    """``python -c code args`` from the probes' folder, its stdout; a failure is one line saying ``what`` failed.
    The files the probes need are made so: this process imports neither onnx nor, with it, numpy, whose pages
    it would then share with the probes (``measure_device_memory``)."""
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=PROBES,
                            check=False, timeout=STAGE_TIMEOUT_S)
    if result.returncode != 0:
        last = result.stderr.strip().splitlines()
        raise SbrsRuntimeError(f"bench: could not {what}: {last[-1] if last else result.returncode}")
    return result.stdout


def _plain_models(facts: dict[str, Any], folder: str) -> list[str]:
    """The files plain ONNX Runtime runs: each scenario's model, behind its Resize where it has its own input size
    (``sbrs.model.input_size.plain_model_file``), written by a short-lived child (``_in_child``)."""
    sizes = facts.get("input_sizes") or [None] * len(facts["models"])
    if all(size is None for size in sizes):
        return list(facts["models"])
    code = ("import json, sys\nfrom sbrs.model.input_size import plain_model_file\nargs = json.loads(sys.argv[1])\n"
            "print(json.dumps([plain_model_file(m, args['shape'], s, args['folder']) "
            "for m, s in zip(args['models'], args['sizes'])]))")
    arguments = json.dumps({"models": facts["models"], "sizes": sizes, "shape": facts["input"]["shape"],
                            "folder": folder})
    return list(json.loads(_in_child(code, [arguments], "write the plain models")))


def _measure_in_child(app_path: Path, frames: int) -> dict[str, Any]:
    """``measure_device_memory`` in a fresh interpreter (run from the probes' folder, so that a folder named
    ``sbrs`` where the user stands is never imported); its one-line error becomes this process's."""
    result = subprocess.run([sys.executable, "-m", "sbrs.bench.device_memory", str(app_path), str(frames)],
                            cwd=PROBES, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        last = (result.stderr or "").strip().splitlines()
        raise SbrsRuntimeError(f"bench: measuring device memory failed: {last[-1] if last else result.returncode}")
    return json.loads(result.stdout)


def summarize(report: Mapping[str, Any]) -> dict[str, Any]:
    """The steady figures side by side, the ratios against plain ONNX Runtime and whether the bound holds."""
    steady = {"sbrs_run": report["sbrs_run"]["stages"]["ran"], "python_api": report["python_api"]["stages"]["ran"],
              "plain_ort": report["plain_ort"]["stages"]["ran"],
              "plain_ort_trimmed": report["plain_ort"]["stages"]["trimmed"],
              "plain_ort_active": report["plain_ort_active"]["stages"]["ran"],
              "plain_ort_active_trimmed": report["plain_ort_active"]["stages"]["trimmed"]}
    bound = report["bound_bytes"]
    same_run = report.get("bound_same_run_bytes")
    if "onnxruntime_code" in report:
        steady["onnxruntime_code"] = report["onnxruntime_code"]["stages"]["ran"]
    summary: dict[str, Any] = {name: {"pss_bytes": row["pss_bytes"], "rss_bytes": row["rss_bytes"],
                                      "peak_rss_bytes": row["peak_rss_bytes"]} for name, row in steady.items()}
    # plain ONNX Runtime holding only the largest scenario's model, its freed heap handed back, is judged by the
    # same bounds: where even it is over, no runtime made of ONNX Runtime sessions of these models is within them
    for name in ("sbrs_run", "python_api", "plain_ort_active_trimmed"):
        summary[name]["within_bound"] = steady[name]["pss_bytes"] <= bound
        if same_run is not None:
            summary[name]["within_same_run_bound"] = steady[name]["pss_bytes"] <= same_run
    for name in ("sbrs_run", "python_api"):
        ort = steady["plain_ort"]["pss_bytes"]
        summary[name]["pss_ratio_vs_plain_ort"] = round(steady[name]["pss_bytes"] / ort, 4) if ort > 0 else None
    stages = report["python_api"]["stages"]
    anonymous = {name: stages[name]["split_pss_bytes"]["anonymous"] for name in ("imported", "loaded", "ran")}
    # sbrs' modules compiled from source in the API's process (no cached bytecode): 0.2-0.6 MB of PSS more than
    # from cached bytecode, as an installed package runs (docs/MEASUREMENTS.md)
    summary["sbrs_modules_compiled_from_source"] = len(report["python_api"]["facts"]["loaded"]["compiled_from_source"])
    summary["where_it_goes_pss_bytes"] = {
        "weights_files": stages["ran"]["split_pss_bytes"]["weights_files"],
        "onnxruntime_library": stages["ran"]["split_pss_bytes"]["onnxruntime_library"],
        "other_code": stages["ran"]["split_pss_bytes"]["other_code"],
        "anonymous_importing_sbrs": anonymous["imported"],
        "anonymous_opening_runtime": anonymous["loaded"] - anonymous["imported"],
        "anonymous_running_scenarios": anonymous["ran"] - anonymous["loaded"],
        "other": stages["ran"]["split_pss_bytes"]["other"],
    }
    return summary


def format_device_memory(report: Mapping[str, Any]) -> str:
    """A table for people."""
    mb = 1e6
    plan, summary = report["plan"], report["summary"]
    lines = [f"device memory of {report['app']}, measured from outside (fresh processes, every scenario run "
             f"{report['frames_per_scenario']}+ frames), above a bare interpreter with numpy and onnxruntime "
             f"imported (PSS {report['bare_pss_bytes'] / mb:.1f} MB)",
             f"plan: parameters {plan['params_bytes'] / mb:.2f} MB + tensors {plan['tensors_bytes'] / mb:.2f} MB"
             f" + transition room {plan['transition_bytes'] / mb:.2f} MB = {plan['plan_bytes'] / mb:.2f} MB; "
             f"bound 1.1 x plan + 13 MB = {report['bound_bytes'] / mb:.2f} MB"
             + ("" if "bound_same_run_bytes" not in report else
                f"; with ONNX Runtime's code measured in this run, 1.1 x plan + "
                f"{summary['onnxruntime_code']['pss_bytes'] / mb:.1f} + 3 MB = "
                f"{report['bound_same_run_bytes'] / mb:.2f} MB"),
             f"{'':<38} {'PSS MB':>8} {'RSS MB':>8} {'peak RSS MB':>12} {'PSS / plain ORT':>16}"]
    labels = {"sbrs_run": "sbrs run (control socket)", "python_api": "sbrs.runtime_for(app.yaml)",
              "plain_ort": "plain ORT, every scenario loaded", "plain_ort_trimmed": "  the same after malloc_trim",
              "plain_ort_active": "plain ORT, largest scenario alone",
              "plain_ort_active_trimmed": "  the same after malloc_trim",
              "onnxruntime_code": "plain ORT, one small convolution"}
    for name, label in labels.items():
        if name not in summary:
            continue
        row = summary[name]
        ratio = row.get("pss_ratio_vs_plain_ort")
        verdict = "" if "within_bound" not in row else ("  within bound" if row["within_bound"] else "  OVER BOUND")
        if "within_same_run_bound" in row:
            verdict += ", within the same-run bound" if row["within_same_run_bound"] else ", over the same-run bound"
        lines.append(f"{label:<38} {row['pss_bytes'] / mb:>8.1f} {row['rss_bytes'] / mb:>8.1f} "
                     f"{row['peak_rss_bytes'] / mb:>12.1f} {'' if ratio is None else f'{ratio:.3f}':>16}{verdict}")
    if summary.get("sbrs_modules_compiled_from_source"):
        lines.append(f"note: {summary['sbrs_modules_compiled_from_source']} of sbrs' modules were compiled from "
                     "source (no cached bytecode: PYTHONDONTWRITEBYTECODE, or a read-only install), 0.2-0.6 MB more "
                     "than from cached bytecode")
    lines.append("where sbrs.runtime_for's PSS goes (MB): " + ", ".join(
        f"{name.replace('_', ' ')} {value / mb:.1f}" for name, value in summary["where_it_goes_pss_bytes"].items()))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``python -m sbrs.bench.device_memory APP.yaml FRAMES``: the report as one JSON object on stdout."""
    from sbrs.errors import SbrsError

    try:
        report = measure_device_memory(argv[0], frames=int(argv[1]))
    except SbrsError as error:
        print(f"sbrs bench: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
