"""Joint reduction with quantization, in the manner of the thesis' Figure 6.3 (issue 23, part 4).

For each zoo CNN (seeded weights, no download) at fp32, fp16 and int8 (``tools/quantize_models.py``: fp16 with
onnxconverter-common, float I/O; int8 static QDQ per channel, calibrated on 8 seeded random frames), as a
one-scenario app:

- memory cost, planned: parameters + one buffer per edge (no reuse), the plan of sbrs' build (parameters as
  executed + every tensor + transition room: joint reuse), and the plan under ``memory_limit_mb`` set to
  ``--limit-factor`` of the unreduced plan (processing by parts; a refusal is reported as it is);
- memory cost, measured: device PSS above a bare interpreter through ``sbrs.runtime_for`` after every scenario
  has run, beside plain ONNX Runtime running the same file (``sbrs.bench.device_memory``);
- throughput against plain ONNX Runtime at its best setting (``sbrs bench``'s method, same run);
- top-1 agreement with the fp32 model on ``--top1-frames`` seeded random frames (random weights: this says how
  much the precision moves the arg-max, not how accurate a trained model is).

Then one app of the first CNN holding fp32, int8 and a lower resolution (``input_size``), switching on battery:
its device memory against plain ONNX Runtime holding the three models.

    python benchmarks/joint_reduction.py [--models mobilenet_v2,resnet18] [--resolution 224] [--frames 20]
        [--repeats 3] [--top1-frames 32] [--limit-factor 0.95] [--plot FILE.png] [--json FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools.quantize_models

PRECISIONS = {"fp32": None, "fp16": "fp16-onnxconverter", "int8": "qdq-per-channel-u8"}
SEARCH = ["--generations", "6", "--population", "12", "--cost", "analytic"]


def _write_app(path: Path, name: str, scenarios: list[str], resolution: int, limit_mb: float | None = None,
               policy: str = "") -> Path:
    lines = [f"name: {name}", f"input: {{name: input, shape: [1, 3, {resolution}, {resolution}], dtype: float32}}",
             "scenarios:", *scenarios, "runtime: {providers: [CPUExecutionProvider]}"]
    if limit_mb is not None:
        lines.append(f"memory_limit_mb: {limit_mb}")
    path.write_text("\n".join(lines) + "\n" + policy, encoding="utf-8")
    return path


def _build(app: Path) -> str | None:
    """``sbrs build`` of ``app``; None, or the one-line error it printed."""
    import contextlib
    import io

    from sbrs.cli import main

    error = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(error):
        status = main(["build", str(app), "-q", *SEARCH])
    return None if status == 0 else (error.getvalue().strip().splitlines() or ["failed"])[-1].removeprefix(
        "sbrs: error: ")


def _top1(app: Path, reference: Path, frames: int, resolution: int) -> float:
    """Share of seeded random frames on which the app's one scenario and the fp32 file pick the same class."""
    import onnxruntime as ort

    from sbrs.runtime import runtime_for

    session = ort.InferenceSession(str(reference), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    same = 0
    with runtime_for(app) as runtime:
        for _ in range(frames):
            frame = rng.standard_normal((1, 3, resolution, resolution)).astype(np.float32)
            got = next(iter(runtime.infer(frame).values()))
            want = session.run(None, {"input": frame})[0]
            same += int(np.argmax(got) == np.argmax(want))
    return same / frames


def measure_model(model: str, resolution: int, folder: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    from sbrs import zoo
    from sbrs.artifact.read import load_build
    from sbrs.bench.bench import measure_throughput
    from sbrs.bench.device_memory import measure_device_memory
    from sbrs.model import import_onnx, memory_figures
    from tools.quantize_models import quantize

    fp32 = zoo.export(model, folder / f"{model}-fp32.onnx", resolution=resolution)
    rows = []
    for precision, form in PRECISIONS.items():
        path = fp32 if form is None else quantize(fp32, folder / f"{model}-{precision}.onnx", form, frames=8)
        figures = memory_figures(import_onnx(path))
        row: dict[str, Any] = {"model": model, "precision": precision,
                               "params_mb": figures.params_bytes / 1e6,
                               "no_reuse_mb": (figures.params_bytes + figures.naive_buffer_bytes) / 1e6}
        entry = [f"  - {{name: {precision}, model: {path.name}}}"]
        app = _write_app(folder / f"{model}_{precision}.yaml", f"{model}_{precision}", entry, resolution)
        error = _build(app)
        if error is not None:
            rows.append(row | {"error": error})
            continue
        plan = load_build(app).footprint
        row["joint_reuse_mb"] = plan.plan_bytes / 1e6 if plan is not None else None
        row["top1_agreement"] = _top1(app, fp32, args.top1_frames, resolution)
        throughput = measure_throughput(str(app), frames=args.frames, repeats=args.repeats, granularity=None)
        row["throughput_ratio"] = throughput["scenarios"][precision]["ratio"]
        row["fps"] = throughput["scenarios"][precision]["fps"]
        device = measure_device_memory(app)
        row["device_pss_mb"] = device["python_api"]["stages"]["ran"]["pss_bytes"] / 1e6
        row["plain_ort_pss_mb"] = device["plain_ort"]["stages"]["ran"]["pss_bytes"] / 1e6
        if row["joint_reuse_mb"] is not None:
            limit = round(args.limit_factor * row["joint_reuse_mb"], 3)
            limited = _write_app(folder / f"{model}_{precision}_limit.yaml", f"{model}_{precision}_limit", entry,
                                 resolution, limit)
            error = _build(limited)
            row["limit_mb"] = limit
            if error is not None:
                row["limit_error"] = error
            else:
                reduced = load_build(limited).footprint
                row["limit_plan_mb"] = reduced.plan_bytes / 1e6 if reduced is not None else None
                cut = measure_throughput(str(limited), frames=args.frames, repeats=args.repeats, granularity=None)
                row["limit_throughput_ratio"] = cut["scenarios"][precision]["ratio"]
                row["limit_device_pss_mb"] = (measure_device_memory(limited)["python_api"]["stages"]["ran"]
                                              ["pss_bytes"] / 1e6)
        rows.append(row)
    return rows


def measure_adaptive(model: str, resolution: int, low: int, folder: Path) -> dict[str, Any]:
    """fp32, int8 and fp32 at ``low`` pixels of one CNN in one app: its device memory against plain ORT."""
    import onnx

    from sbrs.bench.device_memory import measure_device_memory

    fp32, int8 = folder / f"{model}-fp32.onnx", folder / f"{model}-int8.onnx"
    dynamic = onnx.load(str(fp32))  # the same weights with a symbolic height and width, as a dynamic-axes export
    for dim, label in zip(dynamic.graph.input[0].type.tensor_type.shape.dim[2:], ("height", "width"), strict=True):
        dim.Clear()
        dim.dim_param = label
    del dynamic.graph.value_info[:]
    onnx.save(dynamic, str(folder / f"{model}-fp32-dynamic.onnx"))
    scenarios = [f"  - {{name: full, model: {model}-fp32-dynamic.onnx}}", f"  - {{name: int8, model: {int8.name}}}",
                 f"  - {{name: low, model: {model}-fp32-dynamic.onnx, input_size: [{low}, {low}]}}"]
    policy = "policy:\n  battery:\n    - {below: 0.5, scenario: int8}\n    - {below: 0.2, scenario: low}\n"
    app = _write_app(folder / f"{model}_adaptive.yaml", f"{model}_adaptive", scenarios, resolution, policy=policy)
    error = _build(app)
    if error is not None:
        return {"model": model, "error": error}
    device = measure_device_memory(app)
    return {"model": model, "scenarios": ["full", "int8", f"low ({low} px)"],
            "plan_mb": device["plan"]["plan_bytes"] / 1e6,
            "device_pss_mb": device["python_api"]["stages"]["ran"]["pss_bytes"] / 1e6,
            "sbrs_run_pss_mb": device["sbrs_run"]["stages"]["ran"]["pss_bytes"] / 1e6,
            "plain_ort_all_pss_mb": device["plain_ort"]["stages"]["ran"]["pss_bytes"] / 1e6}


def plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [row for row in rows if "error" not in row]
    labels = [f"{row['model']}\n{row['precision']}" for row in ok]
    x = np.arange(len(ok))
    fig, (memory, speed) = plt.subplots(2, 1, figsize=(max(6.0, 1.3 * len(ok)), 7), sharex=True)
    bars = {"no reuse (planned)": "no_reuse_mb", "joint reuse (planned)": "joint_reuse_mb",
            "under the limit (planned)": "limit_plan_mb", "device PSS, sbrs": "device_pss_mb",
            "device PSS, plain ORT": "plain_ort_pss_mb"}
    width = 0.8 / len(bars)
    for index, (label, key) in enumerate(bars.items()):
        memory.bar(x + (index - len(bars) / 2 + 0.5) * width, [row.get(key) or 0.0 for row in ok], width, label=label)
    memory.set_ylabel("MB")
    memory.set_yscale("log")
    memory.legend(fontsize=7)
    memory.set_title("Memory cost: planned, and measured as PSS above a bare interpreter", fontsize=9)
    speed.bar(x - 0.2, [row.get("throughput_ratio") or 0.0 for row in ok], 0.4, label="unreduced")
    speed.bar(x + 0.2, [row.get("limit_throughput_ratio") or 0.0 for row in ok], 0.4, label="under the limit")
    speed.axhline(1.0, color="grey", linewidth=0.8)
    speed.set_ylabel("throughput / plain ORT")
    speed.legend(fontsize=7)
    speed.set_xticks(x, labels, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2,resnet18")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--low", type=int, default=160, help="the lower resolution of the adaptive app")
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top1-frames", type=int, default=32)
    parser.add_argument("--limit-factor", type=float, default=0.95)
    parser.add_argument("--plot", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    models = args.models.split(",")
    with tempfile.TemporaryDirectory(prefix="sbrs-joint-") as name:
        folder = Path(name)
        rows = [row for model in models for row in measure_model(model, args.resolution, folder, args)]
        adaptive = measure_adaptive(models[0], args.resolution, args.low, folder)
    print("| model | precision | params MB | no reuse MB | joint reuse MB | limit MB (plan) | device PSS MB: sbrs /"
          " plain ORT (limit) | throughput / ORT (limit) | top-1 = fp32 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        if "error" in row:
            print(f"| {row['model']} | {row['precision']} | {row['params_mb']:.2f} | {row['no_reuse_mb']:.2f} | "
                  f"refused: {row['error']} | | | | |")
            continue
        limit = (f"{row['limit_mb']:.2f} ({row['limit_plan_mb']:.2f})" if "limit_plan_mb" in row
                 else f"{row.get('limit_mb', 0):.2f}: {row.get('limit_error', '-')}")
        limit_pss = f" ({row['limit_device_pss_mb']:.1f})" if "limit_device_pss_mb" in row else ""
        limit_speed = f" ({row['limit_throughput_ratio']:.2f})" if "limit_throughput_ratio" in row else ""
        print(f"| {row['model']} | {row['precision']} | {row['params_mb']:.2f} | {row['no_reuse_mb']:.2f} | "
              f"{row['joint_reuse_mb']:.2f} | {limit} | {row['device_pss_mb']:.1f} / {row['plain_ort_pss_mb']:.1f}"
              f"{limit_pss} | {row['throughput_ratio']:.2f}{limit_speed} | {row['top1_agreement']:.2f} |")
    print(json.dumps({"adaptive_app": adaptive}))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "adaptive_app": adaptive}, indent=1), encoding="utf-8")
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
