"""``sbrs run``: feed frames to a runtime, report each one, take switch requests, stop cleanly on a signal.

``run_frames`` is the loop; it knows nothing about where frames come from or where reports go. It drives
``Runtime.process`` (pipelined: under SBRS-TP a switch overlaps the frame in flight and the next one);
``on_frame`` is called after every frame with a ``FrameRecord`` (the JSON-lines writer of ``sbrs run``), a
switch may come at any time from another thread (``Runtime.switch``, the socket), and ``stop`` is an event
anyone may set. SIGINT and SIGTERM set it (``sbrs run``, ``sbrs.cli.stop_on_signals``; the library itself never
touches signal handlers): the frames in flight finish, then the loop
returns its summary.

``run_app`` is ``sbrs run``: the runtime (its control node reports to ``observers``, the seam of the metrics
stage), a ``PolicyController`` deciding scenarios from the environment, and the socket ``Server`` around it
(``--socket``, ``--listen``, ``--no-socket``). Every ``MEASURE_EVERY_S`` the measured fps of each scenario
(median of its recent frame latencies) and its memory (its parameters plus the peak of its boundary
tensors in the arena) are given to the policy (``update_measurements``).

One JSON line per frame, in completion order by default (``--order``; ``Runtime.process``: the first frame
of a new scenario may come before the frame that was in flight when the switch came, whose line follows):
``{"frame": i, "scenario": name, "latency_s": x, "outputs": {name: summary}}``
where a 2-D class output ``[1, C]`` is summarised by its ``top5`` ``[[index, value], ...]`` (``topK`` with the
scenario's ``postprocess: {kind: top-k, k: K}``) and any other output by ``mean``/``min``/``max``; both carry
the ``shape``. The scenario's post-processor adds its value (``sbrs.outputs.postprocess``): ``detections``
(``[{"box": [x1, y1, x2, y2], "score", "class"}, ...]``, in the pixels of the picture the frame came from where
it came from one: ``FrameRecord.value``), ``raw`` or, for the user's function, ``value``; when
that function fails on the frame, ``error`` instead (one line, also logged; the run goes on). The first
frame of a new scenario also carries ``"switch": {"old", "new", "response_delay_s", ...}``. With
``--save-outputs DIR`` each frame's raw outputs also go to ``DIR`` (``sbrs.outputs.save``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from sbrs.outputs.detections import Detections
from sbrs.outputs.postprocess import TOP_K, PostprocessError, PostProcessor, TopK, top_k
from sbrs.run.sources import SourceFrame
from sbrs.runtime.control_node import SwitchRecord
from sbrs.runtime.engine import FrameResult, Runtime
from sbrs.runtime.events import Observers, RunObserver

if TYPE_CHECKING:
    from sbrs.control.controller import PolicyController

logger = logging.getLogger(__name__)

MEASURE_EVERY_S = 1.0
MEASURE_WINDOW = 32  # recent frames per scenario for the measured fps


@dataclass(frozen=True)
class FrameRecord:
    """What one frame did: its index, the scenario it ran on, its latency and its outputs; ``result`` (the
    runtime's ``FrameResult``) carries the post-processed ``value`` too; ``source``: where the frame came from
    (``sbrs.run.sources.SourceFrame``; None for random and ``.npy`` frames)."""

    index: int
    scenario: str
    latency_s: float
    outputs: dict[str, np.ndarray]
    switch: SwitchRecord | None = None
    result: FrameResult | None = None
    source: SourceFrame | None = None

    @property
    def value(self) -> Any:
        """The post-processed outputs (``FrameResult.value``; None without a result), detections in the pixels of
        the picture the frame came from (``source.geometry``: the letterbox or the stretch undone)."""
        if self.result is None:
            return None
        value = self.result.value
        geometry = None if self.source is None else self.source.geometry
        if geometry is not None and isinstance(value, Detections):
            return Detections(geometry.boxes_to_source(value.boxes), value.scores, value.classes)
        return value

    def to_dict(self) -> dict[str, Any]:
        """The JSON line: the ``outputs`` summary, the post-processed value under its post-processor's key
        (``detections``, ``raw``, ``value``), or ``error`` when the user's function failed on this frame."""
        processor = self.postprocessor
        top = TOP_K if processor is None else processor.top
        data: dict[str, Any] = {"frame": self.index, "scenario": self.scenario, "latency_s": round(self.latency_s, 6),
                                "outputs": {name: summarize_output(value, top) for name, value in self.outputs.items()}}
        if processor is not None and processor.json_key is not None and self.result is not None:
            try:
                data[processor.json_key] = processor.to_json(self.value)
            except PostprocessError as error:
                data["error"] = str(error)
        if self.switch is not None:
            data["switch"] = self.switch.to_dict()
        return data

    @property
    def postprocessor(self) -> PostProcessor | None:
        if self.result is None or self.result.postprocessors is None:
            return None
        return self.result.postprocessors.get(self.scenario)


def summarize_output(value: np.ndarray, top: int = TOP_K) -> dict[str, Any]:
    """Top-``top`` (index, value) pairs of a ``[1, C]`` output (key ``top5`` for 5), else its mean, min and max;
    with the shape. JSON has no NaN or infinity: an output holding them is summarised by ``nonfinite`` (their
    count) and ``null``s."""
    summary: dict[str, Any] = {"shape": list(value.shape)}
    if value.size and not np.issubdtype(value.dtype, np.number):
        return summary
    if np.issubdtype(value.dtype, np.floating):
        nonfinite = int(value.size - np.count_nonzero(np.isfinite(value)))
        if nonfinite:
            summary.update(nonfinite=nonfinite, mean=None, min=None, max=None)
            return summary
    if value.ndim == 2 and value.shape[0] == 1:
        summary[f"top{top}"] = [[index, score] for index, score in top_k(value[0], top)]
    elif value.size:
        summary.update(mean=float(value.mean()), min=float(value.min()), max=float(value.max()))
    return summary


RECENT_SWITCHES = 16  # switch records a summary keeps (a run may switch millions of times)


@dataclass
class RunSummary:
    """Frames per scenario, wall time and the arena size of one run (mutable while the run goes on).

    Memory stays constant however long the run: switches are counted (with the sum of their delays), and only
    the last ``RECENT_SWITCHES`` records are kept.
    """

    arena_bytes: int
    frames: dict[str, int] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)  # the runtime's ``memory_report()``
    seconds: float = 0.0
    interrupted: bool = False
    switch_count: int = 0
    switch_delay_total_s: float = 0.0
    postprocess_errors: int = 0  # frames whose post-processing failed (their lines carry ``error``)
    sensors: list[dict[str, Any]] = field(default_factory=list)  # the environment's sensors and their counts
    source: dict[str, Any] = field(default_factory=dict)  # ``FrameSource.stats()``: frame rate, dropped, ...
    recent_switches: deque[SwitchRecord] = field(default_factory=lambda: deque(maxlen=RECENT_SWITCHES))

    def add_switch(self, record: SwitchRecord) -> None:
        self.switch_count += 1
        self.switch_delay_total_s += record.response_delay_s
        self.recent_switches.append(record)

    @property
    def total_frames(self) -> int:
        return sum(self.frames.values())

    @property
    def fps(self) -> float:
        return self.total_frames / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"frames": self.total_frames, "frames_per_scenario": dict(self.frames),
                "seconds": round(self.seconds, 6), "fps": round(self.fps, 3), "arena_bytes": self.arena_bytes,
                "interrupted": self.interrupted, "switches": self.switch_count,
                "postprocess_errors": self.postprocess_errors,
                "mean_response_delay_s": round(self.switch_delay_total_s / self.switch_count, 6)
                if self.switch_count else None,
                "recent_switches": [record.to_dict() for record in self.recent_switches], "memory": dict(self.memory),
                "sensors": list(self.sensors), **({"source": dict(self.source)} if self.source else {})}

    def to_text(self) -> str:
        per_scenario = ", ".join(f"{name} {count}" for name, count in self.frames.items()) or "none"
        stopped = " (stopped by a signal)" if self.interrupted else ""
        switched = (f"; {self.switch_count} switches, response delay mean "
                    f"{self.switch_delay_total_s / self.switch_count * 1e3:.3f} ms" if self.switch_count else "")
        failed = (f"; post-processing failed on {self.postprocess_errors} frames" if self.postprocess_errors
                  else "")
        sensed = ""
        if self.sensors:
            from sbrs.control.sensors import sensors_text

            sensed = f"; sensors: {sensors_text(self.sensors)}"
        return (f"sbrs run: {self.total_frames} frames in {self.seconds:.3f} s, {self.fps:.1f} fps{stopped}; "
                f"frames per scenario: {per_scenario}{switched}{failed}{self.source_text()}{sensed}; "
                f"{self.memory_text()}")

    def source_text(self) -> str:
        """The source's part of the summary line: its frame rate, frames dropped, reconnections, frames skipped."""
        source = self.source
        if not source or source.get("kind") == "synthetic":
            return ""
        rate = f" at {source['fps']:g} fps" if source.get("fps") else ""
        live = (f", {source['dropped']} frames dropped" if source.get("live") else "") + (
            f", {source['reconnects']} reconnections" if source.get("reconnects") else "") + (
            f", {source['skipped']} undecodable frames skipped" if source.get("skipped") else "")
        return f"; source {source['source']} ({source['kind']}{rate}{live})"

    def memory_text(self) -> str:
        """The memory figures of the summary line (``Runtime.memory_report``)."""
        memory = self.memory
        if not memory:
            return f"arena {self.arena_bytes} bytes"
        limit = memory.get("limit_bytes")
        bound = "" if limit is None else (f" of a {limit / 1e6:.3f} MB limit" + ("" if memory.get("within_limit")
                                                                              else " (over the limit)"))
        room = memory.get("plan_transition_bytes") or 0
        return (f"plan: parameters {memory['params_bytes'] / 1e6:.3f} MB + tensors "
                f"{memory['plan_tensors_bytes'] / 1e6:.3f} MB" + (f" + transition room {room / 1e6:.3f} MB"
                                                                 if room >= 500 else "") +
                f" = {memory['total_bytes'] / 1e6:.3f} MB{bound} (execution by {memory.get('execution')}"
                + (f" on {memory['streams']} streams, frames in flight at once" if memory.get("streams", 1) > 1
                   else "") +
                f", transition {memory.get('transition')}; sbrs' arena {memory['arena_bytes'] / 1e6:.3f} MB holds "
                f"{memory.get('arena_holds')}; `sbrs bench` measures the process)")


class _FramesUntil:
    """``frames`` until ``limit`` of them or ``stop``: no frame is taken from the source past either (a source's
    frame read and never run showed in its ``read`` count), and ``live`` is the source's, so that the runtime
    knows a file's or synthetic frames never wait (``sbrs.runtime.runner.frames_never_wait``: a generator here
    hid it, and two streams then took every frame as a copy, on worker threads only)."""

    def __init__(self, frames: Iterable[np.ndarray], limit: int | None, stop: threading.Event) -> None:
        self.frames, self.limit, self.stop = frames, limit, stop
        self.live = getattr(frames, "live", None)

    def __iter__(self) -> Iterator[np.ndarray]:
        if (self.limit is not None and self.limit <= 0) or self.stop.is_set():
            return
        for count, frame in enumerate(self.frames, 1):
            yield frame
            if (self.limit is not None and count >= self.limit) or self.stop.is_set():
                return


def run_frames(runtime: Runtime, frames: Iterable[np.ndarray], *, limit: int | None = None,
               on_frame: Callable[[FrameRecord], None] | None = None,
               stop: threading.Event | None = None, order: str = "completion",
               frame_info: Callable[[int], SourceFrame | None] | None = None) -> RunSummary:
    """Run ``frames`` (at most ``limit``) through ``runtime.process`` until they end or ``stop`` is set;
    ``on_frame`` gets the frames in ``order`` (``Runtime.process``); ``frame_info``: where the frame of an index
    came from (``FrameSource.taken``), for its record."""
    summary = RunSummary(arena_bytes=runtime.arena_bytes, memory=runtime.memory_report())
    stop = stop or threading.Event()
    started = time.perf_counter()
    results = runtime.process(_FramesUntil(frames, limit, stop), order=order)
    try:
        for result in results:
            summary.frames[result.scenario] = summary.frames.get(result.scenario, 0) + 1
            if result.switch is not None:
                summary.add_switch(result.switch)
            if on_frame is not None:
                on_frame(FrameRecord(result.index, result.scenario, result.latency_s, result.outputs, result.switch,
                                     result, None if frame_info is None else frame_info(result.index)))
    finally:
        results.close()
    summary.seconds = time.perf_counter() - started
    summary.interrupted = stop.is_set()
    return summary


class Measurements:
    """Measured fps per scenario (median of its last ``MEASURE_WINDOW`` frame latencies), fed to the policy."""

    def __init__(self, controller: PolicyController, memory_mb: dict[str, float]) -> None:
        self._controller = controller
        self._memory_mb = memory_mb
        self._latencies: dict[str, list[float]] = {}
        self._last = time.perf_counter()
        for scenario, memory in memory_mb.items():
            controller.update_measurements(scenario, {"memory_mb": memory})

    def frame(self, record: FrameRecord) -> None:
        window = self._latencies.setdefault(record.scenario, [])
        window.append(record.latency_s)
        del window[:-MEASURE_WINDOW]
        now = time.perf_counter()
        if now - self._last >= MEASURE_EVERY_S:
            self._last = now
            self.flush()

    def flush(self) -> None:
        for scenario, window in self._latencies.items():
            median = _median(window)
            if median > 0:
                self._controller.update_measurements(scenario, {"fps": 1.0 / median})


def _median(values: list[float]) -> float:
    """The median (0.0 for none), without ``np.median``, which imports ``numpy.ma`` (and ``statistics``, which
    imports ``random`` and ``decimal``): a serving process pays for every module it imports."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if not ordered:
        return 0.0
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def json_lines_writer(stream: IO[str]) -> Callable[[FrameRecord], dict[str, Any]]:
    """An ``on_frame`` callback writing one JSON line per frame to ``stream`` (flushed per line); it returns
    the line's object."""

    def write(record: FrameRecord) -> dict[str, Any]:
        line = record.to_dict()
        stream.write(json.dumps(line, allow_nan=False) + "\n")
        stream.flush()
        return line

    return write


def run_app(app_path: str, *, frames: int | None, source: str | None, output: str | None, seed: int,
            granularity: str | None = None, transition: str | None = None, on_switch: str | None = None,
            socket_path: str | None = None,
            listen: str | None = None, no_socket: bool = False, order: str = "completion",
            observers: Iterable[RunObserver] = (), summary_path: str | None = None,
            stop: threading.Event | None = None, save_outputs: str | None = None, realtime: bool = False,
            reconnect: bool | None = None, save_video: str | None = None, show: bool = False,
            env_sources: Sequence[str] | None = None, env_poll_s: float | None = None,
            env_max_age_s: float | None = None) -> int:
    """``sbrs run``: load the app, serve the control socket, run frames (JSON lines to stdout or ``output``),
    the summary logged (INFO; and as JSON to ``summary_path``). ``observers`` (``RunObserver``) get every run
    event (metrics plug in here). ``stop``: set it to end the run after the frame in flight (``sbrs run`` sets
    it on SIGINT, SIGTERM and SIGHUP, ``sbrs.cli.stop_on_signals``; the library never touches signal handlers).
    ``source``: where the frames come from (``sbrs.run.sources``; None: the app's ``source:``, else random
    frames); ``realtime`` and ``reconnect`` as ``sbrs.run.frames.open_source`` takes them.
    ``save_outputs``: a folder for one ``.npz`` of raw outputs per frame (``sbrs.outputs.save``). A frame whose
    post-processing fails gets ``error`` in its line and a logged error; the run goes on. ``env_sources``,
    ``env_poll_s``, ``env_max_age_s``: ``--env-source`` (replacing the app file's ``environment.sources``),
    ``--env-poll``, ``--env-max-age`` (``sbrs.control.sensors.environment_for_run``); the sensors feed the policy
    from their own thread while frames run. ``save_video``: a video of every processed frame with its result
    drawn on it; ``show``: the same in a window (``sbrs.run.overlay``)."""
    from sbrs.control.controller import PolicyController
    from sbrs.errors import InputError
    from sbrs.ort_env import release_free_memory
    from sbrs.run.frames import open_source
    from sbrs.runtime.open import open_runtime

    if frames is not None and frames < 0:
        raise InputError(f"{frames}: expected a number >= 0", field="--frames")
    if output is None and sys.stdout is None:  # started with stdout closed (`>&-`): Python made it None
        raise InputError("stdout is closed: give --output FILE for the JSON lines", field="--output")
    if no_socket and listen is not None:
        raise InputError("--listen serves the control protocol on TCP, --no-socket serves none: choose one",
                         field="--listen")
    saver = None
    if save_outputs is not None:  # a bad folder fails before the models load
        from sbrs.outputs.save import OutputSaver

        saver = OutputSaver(save_outputs)
    video_path, cv2 = None, None
    if save_video is not None or show:  # no OpenCV, no GUI, or a file that cannot be written: before the models
        from sbrs.run.capture import require_cv2
        from sbrs.run.overlay import check_video_path, require_gui

        cv2 = require_cv2("--save-video" if save_video is not None else "--show")
        video_path = None if save_video is None else check_video_path(save_video)
        if show:
            require_gui(cv2)
    stop = stop or threading.Event()
    fan_out = Observers(observers)
    # from the app's verified build (sbrs.artifact.read); the models are never parsed in this process
    runtime, config, memory = open_runtime(app_path, granularity=granularity, transition=transition,
                                           on_switch=on_switch, observers=fan_out)
    try:
        frame_source = open_source(source if source is not None else config.source, config.input, seed=seed,
                                   realtime=realtime, reconnect=reconnect, keep_pictures=cv2 is not None, stop=stop,
                                   observers=fan_out, field="--source" if source is not None else "source")
    except InputError as error:
        runtime.close()
        if source is None and config.source is not None:  # the app file's source: name the file
            raise InputError(error.detail, file=config.path, field="source") from None
        raise
    except BaseException:
        runtime.close()
        raise
    # the source's frame rate (None: unknown, e.g. a folder): reported, and known to the policy
    source_fps = frame_source.fps
    if frame_source.kind != "synthetic":
        logger.info("sbrs run: frames from %s (%s%s)", frame_source.description, frame_source.kind,
                    "" if source_fps is None else f", {source_fps:g} fps")
    viewer = None
    if cv2 is not None:
        if not frame_source.pictures:
            frame_source.close()
            runtime.close()
            raise InputError("draws on the source's pictures, and random or .npy frames have none: give a video, "
                             "a camera, a stream or a folder of images with --source",
                             field="--save-video" if save_video is not None else "--show")
        from sbrs.control.sensors import source_frame_rate
        from sbrs.run.overlay import FrameViewer, frame_for_view

        viewer = FrameViewer(cv2, video=video_path, show=show, stop=stop,
                             fps=source_fps if frame_source.kind == "file" and not frame_source.live else None,
                             source_fps=source_frame_rate(frame_source))
    controller = PolicyController(config, runtime.switch, current=runtime.scenario, switch_source=True)
    measurements = Measurements(controller, memory)
    sensors = None
    environment = config.environment
    if environment.sources or environment.min_fps is not None or any(
            option is not None for option in (env_sources, env_poll_s, env_max_age_s)):
        from sbrs.control.sensors import environment_for_run, source_frame_rate

        try:  # a source that cannot be opened fails before the first frame
            sensors = environment_for_run(environment, controller, fan_out, sources=env_sources, poll_s=env_poll_s,
                                          max_age_s=env_max_age_s, source_fps=source_frame_rate(frame_source))
        except BaseException:
            runtime.close()
            frame_source.close()
            if viewer is not None:
                viewer.close()
            raise
    server = None
    if not no_socket:  # the socket server's module only when a socket is served
        from sbrs.server import Server
        from sbrs.server.protocol import ObservedRequestStats

        server = Server(controller, socket_path, listen=listen, app_name=config.name,
                        stats=ObservedRequestStats(fan_out))
    try:
        if summary_path:  # fail before the first frame, not after the last
            open(summary_path, "w", encoding="utf-8").close()
        stream = open(output, "w", encoding="utf-8") if output else sys.stdout  # noqa: SIM115
    except OSError as exc:
        runtime.close()
        if sensors is not None:
            sensors.close()
        frame_source.close()
        if viewer is not None:
            viewer.close()
        raise InputError(f"{exc.filename}: cannot write ({exc.strerror})",
                         field="--summary" if exc.filename == summary_path else "--output") from None
    writer = json_lines_writer(stream)
    postprocess_errors = 0
    reader_left = False

    def on_frame(record: FrameRecord) -> None:
        nonlocal postprocess_errors, reader_left
        value = None
        if saver is not None or viewer is not None:
            try:
                value = record.value
            except PostprocessError:  # the frame's line says so
                value = None
        if saver is not None:
            saver.save(record.index, record.scenario, record.outputs,
                       detections=value if isinstance(value, Detections) else None)
        try:
            line = writer(record)
        except BrokenPipeError:  # the reader left (`sbrs run | head`): the run ends after this frame, as on a
            reader_left = True  # signal, with its summary; the CLI then ends quietly (below)
            stop.set()
            return
        except OSError as exc:  # a full disk, a file system gone: one line, not an internal error
            raise InputError(f"{output or 'stdout'}: cannot write ({exc.strerror or exc})",
                             field="--output" if output else None) from None
        if "error" in line:
            postprocess_errors += 1
            logger.error("sbrs run: %s", line["error"])
        if viewer is not None and record.source is not None and record.source.picture is not None:
            # what it draws: boxes, or a classifier's top-k; a user function's value or raw lists are not drawn
            drawn = value if isinstance(value, Detections) or isinstance(record.postprocessor, TopK) else None
            viewer.add(frame_for_view(record.index, record.source.picture, record.source.order, record.scenario,
                                      drawn, record.switch))
        measurements.frame(record)

    try:
        with runtime:
            if server is not None:
                server.start()
                logger.info("sbrs run: control socket %s", server.socket_path)
                if server.tcp_address is not None:
                    host, port = server.tcp_address
                    logger.info("sbrs run: control protocol on tcp %s:%s", host, port)
            # after everything the run holds besides its frames exists: what loading and the imports since left
            # free in the C heap goes back to the system (``sbrs.ort_env.release_free_memory``)
            release_free_memory()
            try:
                if sensors is not None:
                    sensors.start()
                summary = run_frames(runtime, frame_source, limit=frames, on_frame=on_frame, stop=stop,
                                     order=order, frame_info=frame_source.taken)
                if viewer is not None:  # the video's last frames written, in the run's time
                    viewer.close()
            finally:
                if sensors is not None:  # before the runtime stops taking switches
                    sensors.stop()
                runtime.node.shutdown()
                if server is not None:
                    server.stop()
    finally:
        if sensors is not None:
            sensors.stop()
        frame_source.close()
        if viewer is not None:
            with contextlib.suppress(Exception):  # closed above unless the run failed, whose error goes on
                viewer.close()
        if stream is not sys.stdout:
            with contextlib.suppress(OSError):  # every line was flushed: only a line that failed is left to fail
                stream.close()
    summary.postprocess_errors = postprocess_errors
    if sensors is not None:
        summary.sensors = sensors.summary()
    summary.source = frame_source.stats()
    logger.info("%s", summary.to_text())
    if summary_path:
        write_summary(summary_path, summary)
    if reader_left:  # the CLI's exit for a reader that left (``sbrs.cli.main``); the summary is out
        raise BrokenPipeError(errno.EPIPE, "the reader of the frames' lines left")
    return 0


def write_summary(path: str, summary: RunSummary) -> None:
    """``--summary FILE``: the run's summary as one JSON object; a file that cannot be written (a full disk) is a
    one-line ``InputError`` naming it."""
    from sbrs.errors import InputError

    try:
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(json.dumps(summary.to_dict(), allow_nan=False) + "\n")
    except OSError as exc:
        raise InputError(f"{path}: cannot write ({exc.strerror or exc})", field="--summary") from None
