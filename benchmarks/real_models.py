"""Models nobody here wrote, end to end: import, outputs against ONNX Runtime, throughput against it.

For every ``.onnx`` file in a folder (e.g. made by ``tools/export_torchvision.py``): a one-scenario app is
written to a temporary folder, loaded (import with the canonical form), its runtime's output on a random
frame compared with ONNX Runtime running the file itself (max abs diff against 1e-5 · max(1, |ref|)), and its
throughput measured against that plain ONNX Runtime session, interleaved in this process (``sbrs bench``'s
method, no memory probes). Prints a table (or ``--json``).

    python benchmarks/real_models.py FOLDER [--frames 20] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from sbrs.runtime import runtime_for


def check_model(path: Path, frames: int, repeats: int) -> dict[str, Any]:
    from sbrs.bench.bench import bench_app
    from sbrs.errors import SbrsError
    from sbrs.ort_env import create_session

    source = onnx.load(str(path), load_external_data=False)
    parameters = {t.name for t in source.graph.initializer}
    data_input = next(value for value in source.graph.input if value.name not in parameters)
    shape = [d.dim_value if d.dim_value > 0 else 1 for d in data_input.type.tensor_type.shape.dim]
    row: dict[str, Any] = {"model": path.name, "shape": shape}
    with tempfile.TemporaryDirectory(prefix="sbrs-real-") as folder:
        app = Path(folder) / "app.yaml"
        app.write_text(f"name: {path.stem.replace('.', '_')}\ninput: {{name: {data_input.name}, shape: {shape}, "
                       f"dtype: float32}}\nscenarios:\n  - {{name: only, model: {path.resolve()}, "
                       "requirements: {accuracy: 1.0}}\n")
        try:
            from sbrs.app import load_app

            loaded = load_app(app)
            frame = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            with runtime_for(loaded) as runtime:
                got = runtime.infer(frame)
            session = create_session(str(path), ("CPUExecutionProvider",))
            want = dict(zip((o.name for o in session.get_outputs()),
                            session.run(None, {data_input.name: frame}), strict=True))
            row["max_abs_diff"] = max(float(np.abs(got[name] - value).max()) for name, value in want.items())
            row["equal"] = all(float(np.abs(got[name] - value).max()) <= 1e-5 * max(1.0, float(np.abs(value).max()))
                               for name, value in want.items())
            row["layers"] = len(loaded.models["only"].compute_layers)
            del loaded, session
            report = bench_app(str(app), frames=frames, repeats=repeats, memory=False)
            row.update(report["scenarios"]["only"])
        except SbrsError as exc:
            row["error"] = str(exc)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [check_model(path, args.frames, args.repeats) for path in sorted(args.folder.glob("*.onnx"))]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'model':<42} {'layers':>6} {'equal':>6} {'max diff':>9} {'units':>5} {'sbrs fps':>9} {'ORT fps':>9} "
              f"{'ratio':>6}")
        for row in rows:
            if "error" in row:
                print(f"{row['model']:<42} {row['error']}")
                continue
            print(f"{row['model']:<42} {row['layers']:>6} {row['equal']!s:>6} {row['max_abs_diff']:>9.1e} "
                  f"{row['units_per_frame']:>5} {row['fps']:>9.1f} {row['ort_fps']:>9.1f} {row['ratio']:>6.3f}")
    return 0 if all(row.get("equal") for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
