"""Quantized and fp16 scenarios against plain ONNX Runtime on the same file (issue 23, part 1).

The zoo's CNNs (seeded weights, no download) at ``--resolution`` in the forms of ``tools/quantize_models.py``
(calibrated on 8 seeded random frames): each form a one-scenario app, and one app holding an fp32 and an
int8 scenario of the same CNN (``--pair``). For every scenario: its output on a random frame against ONNX
Runtime running the file itself (max abs diff against 1e-5 · max(1, |ref|)), its weights, and its throughput
against plain ONNX Runtime, interleaved in this process (``sbrs bench``'s method: median of ``--repeats``
blocks of ``--frames`` frames, against the better of ONNX Runtime's intra-op threads and two frames at once,
and against ONNX Runtime with its default options alone: the same threading as sbrs' sessions).

    python benchmarks/quantized.py [--models mobilenet_v2,resnet18] [--resolution 224] [--forms ...]
        [--frames 20] [--repeats 5] [--pair qdq-per-channel-u8] [--streams 1,2] [--json]

``--streams 1,2`` measures each app twice: as it is, and with ``runtime.streams: 2`` (two frames at once on
one-thread sessions, the setting that makes plain ONNX Runtime's "two frames" side).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools.quantize_models

DEFAULT_FORMS = ("fp32", "qdq-per-tensor-u8", "qdq-per-channel-u8", "qdq-per-channel-s8", "qoperator", "dynamic",
                 "fp16-onnxconverter", "fp16-ort")


def _write_app(folder: Path, name: str, models: dict[str, Path], shape: list[int], streams: int | None = None) -> Path:
    lines = [f"name: {name}", f"input: {{name: input, shape: {shape}, dtype: float32}}", "adaptive: [I, O, par]",
             f"initial: {next(iter(models))}", *([f"runtime: {{streams: {streams}}}"] if streams else []),
             "scenarios:"]
    lines += [f"  - {{name: {scenario}, model: {path}}}" for scenario, path in models.items()]
    path = folder / f"{name}.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _equality(app_path: Path, files: dict[str, Path], shape: list[int]) -> dict[str, float]:
    """Max abs diff of each scenario against plain ONNX Runtime on its file, relative to max(1, |ref|)."""
    import onnxruntime as ort

    from sbrs.app import load_app
    from sbrs.runtime import runtime_for

    frame = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    result = {}
    with runtime_for(load_app(app_path)) as runtime:
        for scenario, path in files.items():
            runtime.switch(scenario)
            got = runtime.infer(frame)
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            want = dict(zip((o.name for o in session.get_outputs()), session.run(None, {"input": frame}),
                            strict=True))
            result[scenario] = max(float(np.abs(got[k].astype(np.float64) - v).max()) / max(1.0, float(np.abs(v).max()))
                                   for k, v in want.items())
    return result


def measure(model: str, resolution: int, forms: tuple[str, ...], frames: int, repeats: int,
            pair: str | None, streams: tuple[int, ...] = (1,)) -> list[dict[str, Any]]:
    from sbrs import zoo
    from sbrs.bench.bench import bench_app
    from sbrs.model import import_onnx, params_bytes
    from tools.quantize_models import quantize

    shape = [1, 3, resolution, resolution]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sbrs-quantized-bench-") as name:
        folder = Path(name)
        fp32 = zoo.export(model, folder / f"{model}-fp32.onnx", resolution=resolution)
        files = {form: fp32 if form == "fp32" else quantize(fp32, folder / f"{model}-{form}.onnx", form, frames=8)
                 for form in forms}
        apps = [(f"{model}-{form}".replace("-", "_"), {form: path}) for form, path in files.items()]
        if pair:
            apps.append((f"{model}_fp32_and_{pair}".replace("-", "_"), {"fp32": files["fp32"], pair: files[pair]}))
        for (app_name, models), count in itertools.product(apps, streams):
            path = _write_app(folder, f"{app_name}_{count}", models, shape, count if count > 1 else None)
            diffs = _equality(path, models, shape)
            report = bench_app(str(path), frames=frames, repeats=repeats, memory=False)
            for scenario, row in report["scenarios"].items():
                rows.append({"model": model, "app": app_name, "streams": count, "scenario": scenario,
                             "weights_mb": params_bytes([import_onnx(models[scenario])]) / 1e6,
                             "relative_diff": diffs[scenario], **row,
                             "ratio_to_default": round(row["fps"] / row["ort_fps_threads"], 4)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2,resnet18")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--forms", default=",".join(DEFAULT_FORMS))
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pair", default="qdq-per-channel-u8", help="int8 form run beside fp32 in one app ('' none)")
    parser.add_argument("--streams", default="1", help="runtime.streams of the apps, comma-separated (e.g. 1,2)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    forms = tuple(args.forms.split(","))
    rows = [row for model in args.models.split(",")
            for row in measure(model, args.resolution, forms, args.frames, args.repeats, args.pair or None,
                               tuple(int(count) for count in args.streams.split(",")))]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print("ratio: against the better of plain ORT's two settings; default: against plain ORT with its default "
              "options (intra-op threads on every core, as sbrs' sessions)")
        print(f"{'app':<40} {'streams':>7} {'scenario':<20} {'MB':>6} {'rel diff':>9} {'units':>5} {'sbrs fps':>9} "
              f"{'ORT fps':>9} {'ratio':>6} {'default':>8}")
        for row in rows:
            print(f"{row['app']:<40} {row['streams']:>7} {row['scenario']:<20} {row['weights_mb']:>6.2f} "
                  f"{row['relative_diff']:>9.1e} "
                  f"{row['units_per_frame']:>5} {row['fps']:>9.1f} {row['ort_fps']:>9.1f} {row['ratio']:>6.3f} "
                  f"{row['ratio_to_default']:>8.3f}")
    return 0 if all(row["relative_diff"] <= 1e-5 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
