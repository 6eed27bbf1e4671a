"""``sbrs run``: feed frames to a runtime, report each one, stop cleanly on Ctrl-C or SIGTERM.

``run_frames`` is the loop; it knows nothing about where frames come from or where reports go. Later
interfaces hook in without changing it: ``on_frame`` is called after every frame with a ``FrameRecord`` (the
JSON-lines writer of ``sbrs run``, metrics later), a switch may come at any time from another thread through
``Runtime.switch`` (it takes effect at the next frame), and ``stop`` is an event anyone may set. SIGINT and
SIGTERM set it (``stop_on_signals``): the frame in flight finishes, then the loop returns its summary.

One JSON line per frame: ``{"frame": i, "scenario": name, "latency_s": x, "outputs": {name: summary}}``
where a 2-D class output ``[1, C]`` is summarised by its ``top5`` ``[[index, value], ...]`` and any other
output by ``mean``/``min``/``max``; both carry the ``shape``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import IO, Any

import numpy as np

from sbrs.runtime.executor import Runtime

TOP_K = 5


@dataclass(frozen=True)
class FrameRecord:
    """What one frame did: its index, the scenario it ran on, its latency and its outputs."""

    index: int
    scenario: str
    latency_s: float
    outputs: dict[str, np.ndarray]

    def to_dict(self) -> dict[str, Any]:
        return {"frame": self.index, "scenario": self.scenario, "latency_s": round(self.latency_s, 6),
                "outputs": {name: summarize_output(value) for name, value in self.outputs.items()}}


def summarize_output(value: np.ndarray) -> dict[str, Any]:
    """Top-5 (index, value) pairs of a ``[1, C]`` output, else its mean, min and max; with the shape."""
    summary: dict[str, Any] = {"shape": list(value.shape)}
    if value.ndim == 2 and value.shape[0] == 1 and np.issubdtype(value.dtype, np.number):
        row = value[0]
        best = np.argsort(-row, kind="stable")[:TOP_K]
        summary["top5"] = [[int(i), float(row[i])] for i in best]
    elif value.size and np.issubdtype(value.dtype, np.number):
        summary.update(mean=float(value.mean()), min=float(value.min()), max=float(value.max()))
    return summary


@dataclass
class RunSummary:
    """Frames per scenario, wall time and the arena size of one run (mutable while the run goes on)."""

    arena_bytes: int
    frames: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    interrupted: bool = False

    @property
    def total_frames(self) -> int:
        return sum(self.frames.values())

    @property
    def fps(self) -> float:
        return self.total_frames / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"frames": self.total_frames, "frames_per_scenario": dict(self.frames),
                "seconds": round(self.seconds, 6), "fps": round(self.fps, 3), "arena_bytes": self.arena_bytes,
                "interrupted": self.interrupted}

    def to_text(self) -> str:
        per_scenario = ", ".join(f"{name} {count}" for name, count in self.frames.items()) or "none"
        stopped = " (stopped by a signal)" if self.interrupted else ""
        return (f"sbrs run: {self.total_frames} frames in {self.seconds:.3f} s, {self.fps:.1f} fps{stopped}; "
                f"frames per scenario: {per_scenario}; arena {self.arena_bytes} bytes (tensors between "
                f"execution units; tensors inside units are ONNX Runtime's own memory)")


def run_frames(runtime: Runtime, frames: Iterable[np.ndarray], *, limit: int | None = None,
               on_frame: Callable[[FrameRecord], None] | None = None,
               stop: threading.Event | None = None) -> RunSummary:
    """Run ``frames`` (at most ``limit``) through ``runtime`` until they end or ``stop`` is set."""
    summary = RunSummary(arena_bytes=runtime.arena_bytes)
    stop = stop or threading.Event()
    started = time.perf_counter()
    for index, frame in enumerate(frames):
        if (limit is not None and index >= limit) or stop.is_set():
            break
        scenario = runtime.scenario
        begin = time.perf_counter()
        outputs = runtime.infer(frame)
        latency = time.perf_counter() - begin
        summary.frames[scenario] = summary.frames.get(scenario, 0) + 1
        if on_frame is not None:
            on_frame(FrameRecord(index, scenario, latency, outputs))
    summary.seconds = time.perf_counter() - started
    summary.interrupted = stop.is_set()
    return summary


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM set ``stop`` instead of killing the process (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def json_lines_writer(stream: IO[str]) -> Callable[[FrameRecord], None]:
    """An ``on_frame`` callback writing one JSON line per frame to ``stream`` (flushed per line)."""

    def write(record: FrameRecord) -> None:
        stream.write(json.dumps(record.to_dict()) + "\n")
        stream.flush()

    return write


def run_app(app_path: str, *, frames: int | None, source: str | None, output: str | None, seed: int,
            granularity: str | None = None) -> int:
    """``sbrs run``: load the app, run frames, JSON lines to stdout or ``output``, the summary to stderr."""
    from sbrs.app import load_app
    from sbrs.errors import InputError
    from sbrs.runtime.device import release_free_memory
    from sbrs.runtime.frames import open_frames

    if frames is not None and frames < 0:
        raise InputError(f"{frames}: expected a number >= 0", field="--frames")
    app = load_app(app_path)
    frame_source = open_frames(source, app.config.input, seed)
    runtime = app.runtime(granularity=granularity)
    del app  # the runtime keeps what it needs; the models' weights can go
    release_free_memory()
    try:
        stream = open(output, "w", encoding="utf-8") if output else sys.stdout  # noqa: SIM115
    except OSError as exc:
        raise InputError(f"{output}: cannot write ({exc.strerror})", field="--output") from None
    stop = threading.Event()
    try:
        with runtime, stop_on_signals(stop):
            summary = run_frames(runtime, frame_source, limit=frames, on_frame=json_lines_writer(stream), stop=stop)
    finally:
        if stream is not sys.stdout:
            stream.close()
    sys.stderr.write(summary.to_text() + "\n")
    return 0
