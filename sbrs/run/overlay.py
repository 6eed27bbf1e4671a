"""What a person watches: ``sbrs run --save-video OUT.mp4`` and ``--show``.

Every processed frame's own picture (the source's, never the model's letterboxed input) with its result drawn
on it, in the picture's pixels (``draw``):

- detections: a box per detection in a colour of its class, with ``class N 0.87`` above it;
- a classifier's top-k: one ``class N 0.87`` line per class, best first;
- a bar at the top: the active scenario, the frame's number and the frames per second of the last second;
- a switch: on the frame where it took effect, a border in ``SWITCH_COLOUR`` round the picture, and
  ``switch OLD -> NEW (x ms)`` in the bar from that frame on for ``SWITCH_NOTE_S`` of video.

``FrameViewer`` takes the frames as the run gives them (``add``) and draws and writes them on a thread of its
own, in stream order (during an SBRS-TP switch a result may come before the one in flight), ``AHEAD`` frames
at most behind the run, which waits beyond that: every processed frame is in the video. The window shows the
newest drawn picture from the caller's thread (GUI toolkits want one thread, Qt the main one). The video's
frame rate is the file's where the source is a file read whole, so it plays as the clip did; else it is the
rate the first ``RATE_FRAMES`` frames were processed at, at most the rate the source declares (a stream's or a
camera's first frames come in a burst from its buffer, processed faster than the source gives frames: a UDP
stream of 15 frames a second was written at 17.5, its video then ran a sixth fast). A picture of another size
than the first (a folder of images) is resized to the first's. ``--show``: the same pictures in a window; ``q``
or Esc there stops the run. It needs an OpenCV with a GUI (``opencv-python``, not ``-headless``) and a display.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.outputs.detections import Detections

logger = logging.getLogger(__name__)

#: Files ``--save-video`` writes, and the codec of each (OpenCV's FFmpeg writer: MPEG-4 part 2, Motion JPEG).
VIDEO_CODECS: dict[str, str] = {".mp4": "mp4v", ".mov": "mp4v", ".m4v": "mp4v", ".mkv": "mp4v", ".avi": "MJPG"}
#: Frames the viewer's thread may be behind the run before the run waits.
AHEAD = 4
#: Frames whose processing rate sets a live source's video frame rate.
RATE_FRAMES = 10
#: Frame rate of the video when nothing else tells one (a single frame).
FALLBACK_FPS = 30.0
#: The largest time base denominator MPEG-4 part 2 takes (16 bits). OpenCV makes the time base from the rate to
#: 0.001, reduced (1234.5678 fps: 125/154321), and its mp4v writer then fails to open: a folder of images or a
#: fast app processed at such a rate, and the run failed after its first frames.
MPEG4_MAX_TIMEBASE = 65535
#: How long (video time) the bar says which switch took effect.
SWITCH_NOTE_S = 1.0
SWITCH_COLOUR = (0, 0, 255)  # BGR: red
BAR_COLOUR = (0, 0, 0)
TEXT_COLOUR = (255, 255, 255)
#: Box colours by class (BGR), cycled: distinct at a glance.
PALETTE: tuple[tuple[int, int, int], ...] = (
    (56, 56, 255), (151, 157, 255), (31, 112, 255), (29, 178, 255), (49, 210, 207), (10, 249, 72), (23, 204, 146),
    (134, 219, 61), (52, 147, 26), (187, 212, 0), (168, 153, 44), (255, 194, 0), (147, 69, 52), (255, 115, 100),
    (236, 24, 0), (255, 56, 132), (133, 0, 82), (255, 56, 203), (200, 149, 255), (199, 55, 255))
WINDOW = "sbrs"


@dataclass(frozen=True)
class ViewFrame:
    """One processed frame for the viewer: its index in the stream, its picture (``order`` BGR or RGB), the
    scenario, its post-processed value (``Detections`` in the picture's pixels, a top-k mapping, or anything
    else, not drawn), the switch that took effect on it (``old``, ``new``, response delay in seconds), and when
    its result came (``time.monotonic()``)."""

    index: int
    picture: np.ndarray
    order: str
    scenario: str
    value: Any
    switch: tuple[str, str, float] | None
    done_at: float


def require_gui(cv2: ModuleType) -> None:
    """A one-line ``InputError`` unless this OpenCV can open windows and a display is there to show them."""
    gui = next((line.partition(":")[2].strip() for line in cv2.getBuildInformation().splitlines()
                if line.strip().startswith("GUI:")), "")
    if not gui or gui.upper() == "NONE":
        raise InputError(f"this OpenCV ({cv2.__version__}) has no GUI to open a window with: install opencv-python "
                         "instead of opencv-python-headless, or use --save-video", field="--show")
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise InputError("no display to open a window on (DISPLAY is not set); use --save-video", field="--show")


def video_rate(fps: float) -> float:
    """``fps`` as a rate every codec of ``VIDEO_CODECS`` takes: to 0.001 where the time base OpenCV makes of it
    has a denominator within ``MPEG4_MAX_TIMEBASE``, else to fewer decimals (1234.5678: 1234.6), at most that
    bound and at least 0.001."""
    for decimals in (3, 2, 1, 0):
        rounded = round(fps, decimals)
        if rounded > 0 and Fraction(round(rounded * 10**decimals), 10**decimals).numerator <= MPEG4_MAX_TIMEBASE:
            return float(rounded)
    return float(min(max(round(fps), 1), MPEG4_MAX_TIMEBASE)) if fps >= 1 else 0.001


def check_video_path(path: str) -> Path:
    """``--save-video``'s file: a known suffix, in a folder that exists and can be written; one-line errors."""
    target = Path(path)
    if target.suffix.lower() not in VIDEO_CODECS:
        raise InputError(f"{path}: the video's file name must end in one of {', '.join(VIDEO_CODECS)}",
                         field="--save-video")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"{path}: no such folder {folder}", field="--save-video")
    if target.is_dir() or not os.access(folder, os.W_OK):
        raise InputError(f"{path}: cannot write the video there", field="--save-video")
    return target


def class_colour(label: int) -> tuple[int, int, int]:
    return PALETTE[label % len(PALETTE)]


def _text(cv2: ModuleType, image: np.ndarray, text: str, origin: tuple[int, int], colour: tuple[int, int, int],
          scale: float, background: tuple[int, int, int] | None = None) -> None:
    """``text`` with its baseline at ``origin``, on a filled box of ``background`` where given."""
    thickness = max(1, round(scale * 2))
    (width, height), baseline = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thickness)
    x, y = origin
    if background is not None:
        cv2.rectangle(image, (x, y - height - 3), (x + width + 4, y + baseline), background, cv2.FILLED)
    cv2.putText(image, text, (x + 2, y - 1), cv2.FONT_HERSHEY_SIMPLEX, scale, colour, thickness, cv2.LINE_AA)


def draw(cv2: ModuleType, frame: ViewFrame, fps: float, switch_note: str | None) -> np.ndarray:
    """A BGR copy of ``frame``'s picture with its result, the bar and the switch mark drawn (module docstring)."""
    image = np.ascontiguousarray(frame.picture[..., ::-1] if frame.order == "RGB" else frame.picture).copy()
    if image.ndim == 2:
        image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    height, width = image.shape[:2]
    scale = max(0.4, min(width, height) / 900)
    bar = round(30 * scale / 0.8)
    value = frame.value
    if isinstance(value, Detections):
        thickness = max(2, round(scale * 4))
        for box, score, label in zip(value.boxes, value.scores, value.classes, strict=True):
            x1, y1, x2, y2 = (round(float(v)) for v in box)
            colour = class_colour(int(label))
            cv2.rectangle(image, (x1, y1), (x2, y2), colour, thickness)
            _text(cv2, image, f"class {int(label)} {float(score):.2f}", (x1, max(y1, bar + round(20 * scale))),
                  TEXT_COLOUR, scale * 0.8, colour)
    elif isinstance(value, Mapping):
        line = bar + round(28 * scale)
        for classes in value.values():
            if not isinstance(classes, list):
                continue
            for label, score in classes:
                _text(cv2, image, f"class {int(label)} {float(score):.3f}", (8, line), TEXT_COLOUR, scale * 0.8,
                      BAR_COLOUR)
                line += round(26 * scale)
    cv2.rectangle(image, (0, 0), (width, bar), BAR_COLOUR, cv2.FILLED)
    status = f"{frame.scenario}   frame {frame.index}   {fps:.1f} fps"
    _text(cv2, image, status + (f"   {switch_note}" if switch_note else ""), (4, bar - round(8 * scale)),
          TEXT_COLOUR if switch_note is None else (120, 120, 255), scale * 0.8)
    if frame.switch is not None:
        border = max(4, round(8 * scale))
        cv2.rectangle(image, (border // 2, bar + border // 2), (width - 1 - border // 2, height - 1 - border // 2),
                      SWITCH_COLOUR, border)
    return image


class FrameViewer:
    """Draws, writes (``video``: a path checked by ``check_video_path``) and shows (``show``) the run's frames on
    a thread of its own (module docstring). ``fps``: the video's frame rate where it is known up front (a file
    read whole), else None (measured, at most ``source_fps``: the rate a live source declares, as
    ``sbrs.control.sensors.source_frame_rate`` reads it, None where it declares none); ``stop``: set when the
    window asks to stop the run."""

    def __init__(self, cv2: ModuleType, *, video: Path | None, show: bool, fps: float | None,
                 stop: threading.Event | None = None, source_fps: float | None = None) -> None:
        self._cv2 = cv2
        self.video = video
        self.show = show
        self.fps = fps
        self._source_fps = source_fps
        self._stop = stop
        self._queue: queue.Queue[ViewFrame | None] = queue.Queue(maxsize=AHEAD)
        self._writer: Any = None
        self._size: tuple[int, int] | None = None
        self._sample: list[tuple[np.ndarray, float]] = []  # drawn frames kept until the video's rate is known
        self._drawn: deque[np.ndarray] = deque(maxlen=1)  # the newest drawn picture, for the window
        self._error: BaseException | None = None
        self.written = 0
        self._thread = threading.Thread(target=self._run, name="sbrs-viewer", daemon=True)
        self._thread.start()

    def add(self, frame: ViewFrame) -> None:
        """Hand one processed frame over (waits while the viewer is ``AHEAD`` frames behind), and show the newest
        drawn picture (the window belongs to the caller's thread: GUI toolkits want one thread, Qt the main
        one); a failure of the viewer's thread is raised here."""
        self._raise()
        while self._thread.is_alive():
            try:
                self._queue.put(frame, timeout=0.1)
                break
            except queue.Full:
                self._show_newest()
        self._show_newest()
        self._raise()

    def close(self) -> None:
        """Write what is left, in order, and close the video and the window; raises the thread's failure."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        if self.show:
            self._show_newest()
            self._cv2.destroyAllWindows()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            if isinstance(error, InputError):
                raise error
            raise SbrsRuntimeError(f"--save-video/--show failed: {type(error).__name__}: "
                                   f"{' '.join(str(error).split())}") from error

    # -- the viewer's thread -----------------------------------------------------------------------------------

    def _run(self) -> None:
        pending: dict[int, ViewFrame] = {}
        expected = 0
        recent: deque[float] = deque()
        switch_until, switch_note = -1.0, None
        try:
            while True:
                item = self._queue.get()
                ready: list[ViewFrame] = []
                if item is not None:
                    pending[item.index] = item
                    while expected in pending:
                        ready.append(pending.pop(expected))
                        expected += 1
                else:  # the end: what is left, in order (a gap means a frame that never came)
                    ready = [pending.pop(index) for index in sorted(pending)]
                for frame in ready:
                    recent.append(frame.done_at)
                    while recent and recent[0] < frame.done_at - 1.0:
                        recent.popleft()
                    span = recent[-1] - recent[0]
                    fps = (len(recent) - 1) / span if span > 0 else 0.0
                    if frame.switch is not None:
                        old, new, delay = frame.switch
                        switch_note = f"switch {old} -> {new} ({delay * 1e3:.1f} ms)"
                        switch_until = frame.index + SWITCH_NOTE_S * (self.fps or FALLBACK_FPS)
                    image = draw(self._cv2, frame, fps, switch_note if frame.index < switch_until else None)
                    if self.show:
                        self._drawn.append(image)
                    if self.video is not None:
                        self._record(image, frame.done_at)
                if item is None:
                    self._write_sample()
                    return
        except BaseException as error:
            self._error = error
        finally:
            if self._writer is not None:
                self._writer.release()

    def _record(self, image: np.ndarray, done_at: float) -> None:
        """Write ``image``; while the video's rate is still unknown, keep it with the first ``RATE_FRAMES``."""
        if self._writer is None and self.fps is None:
            self._sample.append((image, done_at))
            if len(self._sample) >= RATE_FRAMES:
                self._write_sample()
            return
        self._write(image)

    def _write_sample(self) -> None:
        """The video's rate from the frames kept so far (their processing rate), then those frames written."""
        if not self._sample:
            return
        span = self._sample[-1][1] - self._sample[0][1]
        measured = (len(self._sample) - 1) / span if span > 0 else self._source_fps or FALLBACK_FPS
        self.fps = video_rate(measured if self._source_fps is None else min(measured, self._source_fps))
        for image, _ in self._sample:
            self._write(image)
        self._sample.clear()

    def _write(self, image: np.ndarray) -> None:
        cv2 = self._cv2
        if self._writer is None:
            assert self.video is not None
            height, width = image.shape[:2]
            self._size = (width, height)
            fourcc = cv2.VideoWriter_fourcc(*VIDEO_CODECS[self.video.suffix.lower()])
            self.fps = video_rate(self.fps or FALLBACK_FPS)
            self._writer = cv2.VideoWriter(str(self.video), fourcc, self.fps, self._size)
            if not self._writer.isOpened():
                raise InputError(f"{self.video}: OpenCV cannot write this video", field="--save-video")
            logger.info("sbrs run: writing %s (%dx%d at %.2f fps)", self.video, width, height, self.fps)
        if (image.shape[1], image.shape[0]) != self._size:
            image = cv2.resize(image, self._size, interpolation=cv2.INTER_AREA)
        self._writer.write(image)
        self.written += 1

    def _show_newest(self) -> None:
        """Show the newest picture the thread drew (on the caller's thread); ``q`` or Esc sets ``stop``."""
        if not self.show or not self._drawn:
            return
        cv2 = self._cv2
        cv2.imshow(WINDOW, self._drawn.pop())
        key = cv2.waitKey(1) & 0xFF
        if key in (ord("q"), 27) and self._stop is not None:
            self._stop.set()


def frame_for_view(index: int, picture: np.ndarray, order: str, scenario: str, value: Any,
                   switch: Any, done_at: float | None = None) -> ViewFrame:
    """A ``ViewFrame`` from a run's frame record (``switch``: its ``SwitchRecord`` or None)."""
    switched = None if switch is None else (str(switch.old), str(switch.new), float(switch.response_delay_s))
    return ViewFrame(index, picture, order, scenario, value, switched, time.monotonic() if done_at is None else done_at)
