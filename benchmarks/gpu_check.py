"""The GPU path, checked on a machine that has one: example apps run on ONNX Runtime's CUDA provider, each
scenario's output against ONNX Runtime running the scenario's own model on the same provider (and on the CPU),
switches between every pair of scenarios (at a frame boundary, and by a request as the old frame's first step
starts), frame time against plain ONNX Runtime, the GPU memory each holds, and every output again under the
other ways to run an app (``VARIANTS``: the shared transition arena, ``on_switch`` cancel and resume, two
streams).

CI has no GPU: this script is run by hand where ``onnxruntime-gpu`` sees one (the project's tests never need
it). For each app a copy of its YAML with ``runtime.providers: [PROVIDER]`` is written beside it, built with
``sbrs build`` (a child process) and opened with ``sbrs.runtime_for``; the copy and its build are removed at the
end. Under a GPU provider's default ``runtime.session: auto`` the build times the units against the one graph
and keeps one: each row names it (``execution``) and why (``session_reason``). Times are medians of
interleaved blocks, in this process: a frame from numpy in to numpy out, for sbrs
(``infer``) and for plain ONNX Runtime (one session per scenario, ``run``, default options). GPU memory: what
``nvidia-smi`` reports for a child process that has run every scenario (sbrs, or all plain sessions loaded).

    python benchmarks/gpu_check.py [--apps tiny,drone] [--provider CUDAExecutionProvider] [--frames 30]

Prints one JSON line per app and a last line naming the apps that failed (exit status 1 then).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
BUILD = "import sys; from sbrs.cli import main; sys.exit(main())"


def gpu_copy(app: Path, provider: str, suffix: str = "gpu-check", runtime: dict[str, Any] | None = None) -> Path:
    """A copy of ``app`` beside it whose sessions run on ``provider`` (and ``runtime`` settings set)."""
    data = yaml.safe_load(app.read_text())
    data.setdefault("runtime", {})["providers"] = [provider]
    data["runtime"].update(runtime or {})
    copy = app.with_name(f"{app.stem}-{suffix}.yaml")
    copy.write_text(yaml.safe_dump(data, sort_keys=False))
    return copy


def remove_copy(copy: Path) -> None:
    copy.unlink(missing_ok=True)
    shutil.rmtree(copy.with_suffix(".build"), ignore_errors=True)
    copy.with_suffix(".plan.json").unlink(missing_ok=True)


def relative_gap(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max(1, max |want|): the tests' 1e-5 relative criterion as a number."""
    return float(np.abs(got.astype(np.float64) - want).max() / max(1.0, float(np.abs(want).max())))


def reference_sessions(app: Any, providers: list[str]) -> dict[str, Any]:
    import onnxruntime as ort

    from sbrs.model import to_onnx

    return {name: ort.InferenceSession(to_onnx(app.model(name)).SerializeToString(), providers=providers)
            for name in app.config.scenario_names}


#: Other ways to run an app whose every output is checked too: ``runtime_for`` options, or app.yaml ``runtime``
#: settings (a copy of its own).
VARIANTS: dict[str, dict[str, Any]] = {
    "transition_arena: shared": {"options": {"transition_arena": "shared"}},
    "on_switch: cancel": {"options": {"on_switch": "cancel"}},
    "on_switch: resume": {"options": {"on_switch": "resume"}},
    "streams: 2": {"runtime": {"streams": 2}},
}


def outputs_gap(outputs: dict[str, np.ndarray], session: Any, input_name: str, frame: np.ndarray) -> float:
    """The largest relative gap of ``outputs`` to ``session`` (plain ORT on the scenario's model) on ``frame``."""
    want = session.run(None, {input_name: frame})
    return max(relative_gap(outputs[o.name], w) for o, w in zip(session.get_outputs(), want, strict=True))


def gaps_of(result: Any, references: dict[str, Any], input_name: str, frame: np.ndarray) -> float:
    """The largest relative gap of a ``FrameResult`` to ORT running the scenario it ran on."""
    return outputs_gap(result.outputs, references[result.scenario], input_name, frame)


def mid_frame_switches(runtime: Any, references: dict[str, Any], input_name: str, frame: np.ndarray) -> list[float]:
    """Every ordered pair switched by a request that arrives as the old frame's first step starts (the bench's
    ``inject`` hook), two frames streamed: each result against ORT on the scenario it says it ran on."""
    gaps = []
    for old in runtime.scenarios:
        for new in runtime.scenarios:
            if old != new:
                runtime.switch(old)
                runtime.infer(frame)
                gaps.extend(gaps_of(result, references, input_name, frame)
                            for result in runtime.process_with_hooks(iter([frame, frame]), inject=(1, new)))
    return gaps


def check_variants(copy: Path, provider: str, references: dict[str, Any], input_name: str,
                   frame: np.ndarray) -> dict[str, Any]:
    """Each of ``VARIANTS``: its largest gap over every scenario (streamed frames) and every mid-frame switch."""
    from sbrs import runtime_for

    result: dict[str, Any] = {}
    for label, variant in VARIANTS.items():
        path = copy
        if "runtime" in variant:
            path = gpu_copy(copy, provider, "variant", variant["runtime"])
        try:
            with runtime_for(path, **variant.get("options", {})) as runtime:
                gaps = []
                for name in runtime.scenarios:
                    runtime.switch(name)
                    gaps.extend(gaps_of(r, references, input_name, frame) for r in runtime.process([frame] * 4))
                if "runtime" not in variant:  # streams: a switch waits for a free stream, checked above
                    gaps.extend(mid_frame_switches(runtime, references, input_name, frame))
                streams = runtime.memory_report()["streams"]
                result[label] = {"frames": len(gaps), "max_gap": max(gaps, default=0.0), "streams": streams}
                asked = variant.get("runtime", {}).get("streams")
                if asked is not None and streams != asked:  # a variant that silently ran as another is a failure
                    result[label]["error"] = f"asked for {asked} streams, ran {streams}"
        except Exception as exc:  # one variant's failure is reported beside the others
            result[label] = {"error": f"{type(exc).__name__}: {exc}"[-400:]}
        finally:
            if path != copy:
                remove_copy(path)
    return result


def check_app(app_path: Path, provider: str, frames: int, repeats: int) -> dict[str, Any]:
    from sbrs import runtime_for
    from sbrs.app import load_app
    from sbrs.artifact.read import build_dir, read_manifest

    copy = gpu_copy(app_path, provider)
    row: dict[str, Any] = {"app": app_path.stem, "provider": provider}
    try:
        started = time.perf_counter()
        built = subprocess.run([sys.executable, "-c", BUILD, "build", str(copy)], capture_output=True, text=True)
        row["build_s"] = round(time.perf_counter() - started, 1)
        if built.returncode != 0:
            row["error"] = built.stderr.strip()[-500:]
            return row
        app = load_app(copy)
        shape = tuple(app.config.input.shape)
        frame = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        on_gpu = reference_sessions(app, [provider, "CPUExecutionProvider"])
        on_cpu = reference_sessions(app, ["CPUExecutionProvider"])
        input_name = app.config.input.name
        with runtime_for(copy) as runtime:
            row["session_providers"] = sorted({p for s in on_gpu.values() for p in s.get_providers()})
            row["scenarios"] = {}
            for name in runtime.scenarios:
                runtime.switch(name)
                got = runtime.infer(frame)
                row["scenarios"][name] = {"gap_to_ort_same_provider": outputs_gap(got, on_gpu[name], input_name, frame),
                                          "gap_to_ort_cpu": outputs_gap(got, on_cpu[name], input_name, frame)}
            switch_gaps = []
            for old in runtime.scenarios:
                for new in runtime.scenarios:
                    if old == new:
                        continue
                    runtime.switch(old)
                    runtime.infer(frame)
                    runtime.switch(new)
                    switch_gaps.append(outputs_gap(runtime.infer(frame), on_gpu[new], input_name, frame))
            switch_gaps.extend(mid_frame_switches(runtime, on_gpu, input_name, frame))
            row["switch_pairs"] = len(switch_gaps)
            row["switch_max_gap"] = max(switch_gaps, default=0.0)
            for name in runtime.scenarios:
                runtime.switch(name)
                sbrs_ms, ort_ms = [], []
                for _ in range(repeats):
                    start = time.perf_counter()
                    for _ in range(frames):
                        runtime.infer(frame)
                    sbrs_ms.append((time.perf_counter() - start) * 1e3 / frames)
                    start = time.perf_counter()
                    for _ in range(frames):
                        on_gpu[name].run(None, {input_name: frame})
                    ort_ms.append((time.perf_counter() - start) * 1e3 / frames)
                entry = row["scenarios"][name]
                entry["sbrs_ms"] = round(statistics.median(sbrs_ms), 3)
                entry["ort_ms"] = round(statistics.median(ort_ms), 3)
                entry["fps_ratio"] = round(entry["ort_ms"] / entry["sbrs_ms"], 3)
            row["granularity"] = runtime.facts().get("granularity")
            row["execution"] = runtime.execution  # units or one graph: runtime.session defaults to auto on a GPU
            row["session_reason"] = read_manifest(build_dir(copy), copy)["session"]["reason"]
            row["arena_bytes"] = runtime.arena_bytes
        row["gpu_memory_mib"] = {who: gpu_memory_of_child(copy, who) for who in ("sbrs", "ort")}
        row["variants"] = check_variants(copy, provider, on_gpu, input_name, frame)
    except Exception as exc:  # a check reports what broke and goes on with the next app
        row["error"] = f"{type(exc).__name__}: {exc}"[-800:]
    finally:
        remove_copy(copy)
    return row


def gpu_memory_of_child(copy: Path, who: str) -> float | None:
    """MiB of GPU memory ``nvidia-smi`` reports for a child that ran every scenario once (``who``: sbrs or
    plain ORT with every scenario's session loaded)."""
    result = subprocess.run([sys.executable, __file__, "--child", who, str(copy)], capture_output=True, text=True)
    try:
        return float(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def child(who: str, copy: Path) -> None:
    from sbrs.app import load_app

    app = load_app(copy)
    frame = np.random.default_rng(0).standard_normal(tuple(app.config.input.shape)).astype(np.float32)
    if who == "sbrs":  # what runs stays alive until the query below
        from sbrs import runtime_for

        runtime = runtime_for(copy)
        for name in runtime.scenarios:
            runtime.switch(name)
            runtime.infer(frame)
    else:
        sessions = reference_sessions(app, [app.config.runtime.providers[0], "CPUExecutionProvider"])
        for session in sessions.values():
            session.run(None, {app.config.input.name: frame})
    query = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True).stdout
    for line in query.splitlines():
        pid, used = (part.strip() for part in line.split(","))
        if int(pid) == os.getpid():
            print(float(used))
            return
    print("none")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", default="tiny,drone,detect,adaptive,cifar10")
    parser.add_argument("--provider", default="CUDAExecutionProvider")
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tolerance", type=float, default=1e-3,
                        help="largest relative gap to ORT on the same provider that passes (default 1e-3: ORT's CUDA "
                             "provider runs convolutions in TF32 by default, and two sessions may pick different "
                             "cuDNN algorithms, so sbrs' units and the whole model differ by ~1e-4)")
    parser.add_argument("--child", nargs=2, metavar=("WHO", "APP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return 0
    import onnxruntime as ort

    header = {"onnxruntime": ort.__version__, "available": ort.get_available_providers()}
    print(json.dumps(header), flush=True)
    rows = []
    for name in args.apps.split(","):
        path = Path(name) if name.endswith(".yaml") else ROOT / "apps" / f"{name}.yaml"
        row = check_app(path, args.provider, args.frames, args.repeats)
        rows.append(row)
        print(json.dumps(row), flush=True)
    failed = [r["app"] for r in rows if "error" in r or r.get("switch_max_gap", 1.0) > args.tolerance
              or any(s["gap_to_ort_same_provider"] > args.tolerance for s in r.get("scenarios", {}).values())
              or any("error" in v or v.get("max_gap", 1.0) > args.tolerance for v in r.get("variants", {}).values())]
    print(json.dumps({"failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
