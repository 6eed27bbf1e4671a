"""Frames from a video against frames from pre-made ``.npy`` files, and ``--realtime`` pacing (issue 36, "Speed").

In one process, one runtime of the app (default apps/drone.yaml), blocks interleaved, median of ``--repeats``:

- ``video``: the frames of a 1280x720 clip made here by ffmpeg (``testsrc``, 30 fps), read,
  decoded and pre-processed by ``sbrs.run.capture`` on its own thread while the runtime infers;
- ``npy``: the very same frames, pre-processed once beforehand and saved as ``.npy`` files, read by
  ``sbrs.run.sources`` as ``sbrs run --source DIR`` reads them;
- ``realtime``: the clip with ``--realtime`` (paced at 30 fps, the newest frame taken).

Each block runs the frames through ``run_frames`` (the loop of ``sbrs run``) with every frame's JSON line made
(not printed). Figures: frames per second of each, ``video / npy`` (target >= 0.95), and ``realtime`` against
min(npy fps, 30) (target within 5 %). Usage:

    python benchmarks/video_source.py [APP.yaml] [--frames 150] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def make_clip(path: Path, frames: int, fps: int = 30) -> None:
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise SystemExit("ffmpeg is needed (apt-get install ffmpeg)")
    subprocess.run([ffmpeg, "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc=size=1280x720:rate={fps}",
                    "-frames:v", str(frames), "-pix_fmt", "yuv420p", "-q:v", "3", str(path)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("app", nargs="?", default=str(ROOT / "apps" / "drone.yaml"))
    parser.add_argument("--frames", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from sbrs.run.frames import open_source
    from sbrs.run.loop import run_frames
    from sbrs.runtime import runtime_for

    with tempfile.TemporaryDirectory() as scratch, runtime_for(args.app) as runtime:
        folder = Path(scratch)
        clip = folder / "clip.mp4"
        make_clip(clip, args.frames)
        from sbrs.app.config import load_app_config

        spec = load_app_config(args.app).input
        npy = folder / "npy"
        npy.mkdir()
        with open_source(str(clip), spec) as source:
            for index, tensor in enumerate(source):
                np.save(npy / f"{index:06d}.npy", tensor)

        def block(text: str, realtime: bool = False) -> float:
            with open_source(text, spec, realtime=realtime) as source:
                summary = run_frames(runtime, source, on_frame=lambda record: record.to_dict())
            return summary.fps

        block(str(npy))  # warm the sessions and the page cache
        figures: dict[str, list[float]] = {"video": [], "npy": [], "realtime": []}
        for _ in range(args.repeats):
            figures["npy"].append(block(str(npy)))
            figures["video"].append(block(str(clip)))
            figures["realtime"].append(block(str(clip), realtime=True))
            time.sleep(0.2)
    medians = {name: statistics.median(values) for name, values in figures.items()}
    paced_target = min(medians["npy"], 30.0)
    report = {"app": args.app, "frames": args.frames, "repeats": args.repeats, "fps": medians, "runs": figures,
              "video_vs_npy": medians["video"] / medians["npy"],
              "realtime_vs_target": medians["realtime"] / paced_target,
              "ratios_per_block": [v / n for v, n in zip(figures["video"], figures["npy"], strict=True)]}
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    print(f"{Path(args.app).name}: {args.frames} frames of 1280x720, median of {args.repeats} interleaved blocks")
    for name in ("npy", "video", "realtime"):
        print(f"  {name:<9} {medians[name]:7.1f} fps   ({', '.join(f'{v:.1f}' for v in figures[name])})")
    print(f"  video / npy: {report['video_vs_npy']:.3f} (target >= 0.95); per block: "
          f"{', '.join(f'{r:.2f}' for r in report['ratios_per_block'])}")
    print(f"  realtime / min(npy fps, 30) = {medians['realtime']:.1f} / {paced_target:.1f} = "
          f"{report['realtime_vs_target']:.3f} (target 1 +- 0.05)")


if __name__ == "__main__":
    main()
