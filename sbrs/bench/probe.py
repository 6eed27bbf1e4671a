"""The processes whose start-up and memory ``benchmarks/startup.py`` (so the guard), ``one_session.py`` and
``scale.py`` measure, each in a fresh interpreter (``sbrs bench`` has its own, ``sbrs.bench.probes``).

Run as a script, never imported by what it measures: ``python -P path/to/probe.py MODE [ARGUMENTS]`` (the
``probe_command`` helper builds the command line), so that a process holds only what its mode imports. This
module imports the standard library alone at its top; each mode imports what the process it stands for would:

- ``bare``: numpy and onnxruntime, nothing else (the baseline every figure is taken above);
- ``ort JSON``: a plain ONNX Runtime user: sessions of the given models on the global thread pool (the setting
  sbrs uses too), ``warmup`` frames on each, then ``frames`` frames on the first with one JSON line each (a
  zero frame, or with ``random`` a seeded random one), and, with ``trim``, freed memory handed back
  (``malloc_trim``, as sbrs does);
- ``run APP FRAMES``: ``sbrs run APP --frames FRAMES --no-socket`` itself, its memory read after the frames while
  the runtime is still open (as the ORT side reads it with its sessions alive).

Every mode ends with its memory on stdout, read from /proc: ``RSS``, ``PEAK`` (``VmHWM``) and ``PSS`` lines in
bytes (PSS counts a page several mappings share once, weights mapped by several sessions from one file; RSS
once per mapping).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def probe_command(mode: str, *arguments: str) -> list[str]:
    """The command line running ``mode`` of this file in a fresh interpreter (``-P``: the script's folder is not
    put on the import path, so nothing here shadows a module of the process it stands for)."""
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe_path, str(Path(__file__).resolve()), mode, *arguments]


def _fields(path: str) -> dict[str, str]:
    with open(path, encoding="ascii") as lines:
        return dict(line.split(":", 1) for line in lines if ":" in line)


def memory() -> dict[str, int]:
    """This process's RSS, peak RSS and PSS in bytes (PSS = RSS where smaps_rollup cannot be read)."""
    status = _fields("/proc/self/status")
    rss = int(status["VmRSS"].split()[0]) * 1024
    try:
        pss = int(_fields("/proc/self/smaps_rollup")["Pss"].split()[0]) * 1024
    except (OSError, KeyError):
        pss = rss
    return {"rss": rss, "peak": int(status["VmHWM"].split()[0]) * 1024, "pss": pss}


def print_memory() -> None:
    figures = memory()
    print(f"RSS {figures['rss']}\nPEAK {figures['peak']}\nPSS {figures['pss']}", flush=True)


def read_memory(lines: Sequence[str]) -> dict[str, int]:
    """The figures a probe printed (its ``RSS``, ``PEAK`` and ``PSS`` lines; the last of each)."""
    figures: dict[str, int] = {}
    for line in lines:
        name, _, value = line.partition(" ")
        if name in ("RSS", "PEAK", "PSS") and value.strip().isdigit():
            figures[name.lower()] = int(value)
    return figures


def _trim() -> None:
    import ctypes
    import ctypes.util

    library = ctypes.util.find_library("c")
    if library and sys.platform.startswith("linux"):
        ctypes.CDLL(library).malloc_trim(0)


def _ort(args: dict[str, Any]) -> None:
    import numpy as np
    import onnxruntime as ort

    sessions = []
    if args["models"]:
        ort.set_global_thread_pool_sizes(args["threads"], 1)
        options = ort.SessionOptions()
        options.use_per_session_threads = False
        options.log_severity_level = 3
        sessions = [ort.InferenceSession(path, options, providers=args["providers"]) for path in args["models"]]
        frame = (np.random.default_rng(0).standard_normal(args["shape"]).astype(args["dtype"]) if args.get("random")
                 else np.zeros(args["shape"], args["dtype"]))
        for session in sessions:
            for _ in range(args.get("warmup", 0)):
                session.run(None, {session.get_inputs()[0].name: frame})
        active = sessions[0]
        name = active.get_inputs()[0].name
        for index in range(args.get("frames", 0)):
            out = active.run(None, {name: frame})
            print(json.dumps({"frame": index, "top": int(np.argmax(out[0]))}), flush=True)
    if args.get("trim"):
        _trim()
    print_memory()


def _run(app: str, frames: str) -> int:
    import sbrs.run.loop as loop
    from sbrs.cli import main as sbrs

    run_frames = loop.run_frames

    def frames_then_memory(*args: Any, **kwargs: Any) -> Any:
        summary = run_frames(*args, **kwargs)
        print_memory()
        return summary

    loop.run_frames = frames_then_memory  # type: ignore[assignment]
    return sbrs(["run", app, "--frames", frames, "--no-socket"])


def main(argv: Sequence[str]) -> int:
    mode, *arguments = argv
    if mode == "bare":
        import numpy  # noqa: F401
        import onnxruntime  # noqa: F401

        print_memory()
    elif mode == "ort":
        _ort(json.loads(arguments[0]))
    elif mode == "run":
        return _run(*arguments)
    else:
        raise SystemExit(f"unknown probe mode {mode!r} (bare, ort, run)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
