"""Video files, cameras, network streams and GStreamer pipelines, read by OpenCV's ``VideoCapture`` on a thread
of their own (``CaptureSource``), so that reading and pre-processing overlap inference.

- A **file** gives every frame, in order: the thread reads and pre-processes up to ``FILE_AHEAD`` frames ahead
  of the runtime and waits while they are not taken. Its end ends the frames; a frame its decoder refuses (a
  damaged file) is skipped, logged and counted (``SourceCounts.skipped``), and the frames after it come.
- A **live** source (a camera, a stream, a pipeline; a file with ``realtime``, paced at its frame rate as a
  camera would give it) is read at its own pace whatever the runtime does. The thread keeps only the newest
  pre-processed frame; a frame replaced before the runtime took it is dropped and counted
  (``SourceCounts.dropped``, the observers' ``frames_dropped``). The runtime so never gets a frame older than
  about one frame time plus its pre-processing.
- A read that fails ends a live source too, unless ``reconnect`` (default for network streams): the source is
  then reopened with backoff (``RECONNECT_BACKOFF_S``, doubling up to ``RECONNECT_BACKOFF_MAX_S``), each
  reopening counted and logged, and the frames go on. Meanwhile the runtime waits: no black frame stands in
  for a missing one (a zero frame gives confident garbage downstream).
- Network streams are opened with ``OPEN_TIMEOUT_S`` and read with ``READ_TIMEOUT_S``: OpenCV's FFmpeg
  backend otherwise blocks 30 s in a read after a stream has ended.

The source is opened, and its first frame read, when the object is made: a source that cannot be opened, or
gives no frame, is a one-line ``InputError`` naming it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.run.sources import FrameSource, SourceFrame, SourceSpec

if TYPE_CHECKING:
    from sbrs.app.preprocess import Preprocessor
    from sbrs.runtime.events import RunObserver

logger = logging.getLogger(__name__)

#: Frames a file source reads and pre-processes ahead of the runtime.
FILE_AHEAD = 2
#: How long opening a network stream may take, and one read of it, before it counts as gone.
OPEN_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 2.0
#: Wait before the second attempt to reopen a stream; it doubles with each failed attempt up to the maximum.
RECONNECT_BACKOFF_S = 0.5
RECONNECT_BACKOFF_MAX_S = 8.0
#: How often a waiting reader or taker looks at the stop events.
POLL_S = 0.05
#: Reads of a file that may fail in a row before its end counts as reached: OpenCV's FFmpeg reader fails one
#: read for each frame its decoder refuses (a damaged stretch of the file) and decodes the frames after it.
FILE_FAILED_READS = 64
#: Frame rates outside (0, MAX_FPS] are a container's placeholder, not a rate.
MAX_FPS = 1000.0

Item = tuple[np.ndarray, SourceFrame]


def require_cv2(field: str = "--source") -> ModuleType:
    """OpenCV's module, or a one-line ``InputError`` naming the extra that installs it."""
    try:
        import cv2
    except ImportError:
        raise InputError("video files, cameras and streams need OpenCV (pip install \"sbrs[video]\"), which is "
                         "not installed", field=field) from None
    return cv2


def has_gstreamer(cv2: ModuleType) -> bool:
    """Whether this OpenCV was built with GStreamer (its build information says ``GStreamer: YES``)."""
    for line in cv2.getBuildInformation().splitlines():
        name, _, value = line.strip().partition(":")
        if name.strip() == "GStreamer":
            return value.strip().upper().startswith("YES")
    return False


class CaptureSource(FrameSource):
    """A source OpenCV reads (module docstring). ``stop``: the runtime's stop event (a wait for the next frame
    ends when it is set); ``observers``: told of dropped frames and reconnections."""

    def __init__(self, source: SourceSpec, preprocessor: Preprocessor, *, realtime: bool = False,
                 reconnect: bool = False, keep_pictures: bool = False, stop: threading.Event | None = None,
                 observers: RunObserver | None = None, field: str = "--source",
                 open_timeout_s: float = OPEN_TIMEOUT_S, read_timeout_s: float = READ_TIMEOUT_S) -> None:
        super().__init__(source.text)
        self.kind = source.kind
        self.live = source.live or realtime
        self._source = source
        self._preprocessor = preprocessor
        self._realtime = realtime
        self._reconnect = reconnect
        self._keep = keep_pictures
        self._stop = stop or threading.Event()
        self._observers = observers
        self._timeouts = (open_timeout_s, read_timeout_s)
        self._opening = False  # the reading thread is in an attempt to reopen the source (``close``)
        self._cv2 = require_cv2(field)
        if source.kind == "gstreamer" and not has_gstreamer(self._cv2):
            raise InputError(f"{source.text}: this OpenCV ({self._cv2.__version__}) was built without GStreamer, "
                             "which pipelines and csi:// cameras need (on a Jetson, use JetPack's OpenCV)",
                             field=field)
        capture = self._open()
        if not capture.isOpened():
            capture.release()
            raise InputError(f"{source.text}: cannot open the {self._what()}", field=field)
        fps = float(capture.get(self._cv2.CAP_PROP_FPS) or 0.0)
        self.fps: float | None = fps if 0 < fps <= MAX_FPS else None
        ok, picture = capture.read()
        if not ok or picture is None:
            capture.release()
            raise InputError(f"{source.text}: the {self._what()} opened but gave no frame", field=field)
        if realtime and self.fps is None:
            capture.release()
            raise InputError(f"{source.text}: --realtime paces a file at its frame rate, and this file declares "
                             "none", field="--realtime")
        self.height, self.width = int(picture.shape[0]), int(picture.shape[1])
        self._capture = capture
        self._cond = threading.Condition()
        self._ready: deque[Item] = deque()
        self._ended = False
        self._error: BaseException | None = None
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(picture, time.monotonic()),
                                        name=f"sbrs-source-{self.kind}", daemon=True)
        self._thread.start()

    def _what(self) -> str:
        return {"file": "video file", "camera": "camera", "stream": "stream",
                "gstreamer": "GStreamer pipeline"}[self.kind]

    def _open(self) -> Any:
        """A new ``VideoCapture`` of the source (not checked)."""
        cv2, target = self._cv2, self._source.target
        if self.kind == "gstreamer":
            return cv2.VideoCapture(str(target), cv2.CAP_GSTREAMER)
        if self.kind == "camera":
            return cv2.VideoCapture(target)
        if self.kind == "stream":
            open_ms, read_ms = (int(seconds * 1000) for seconds in self._timeouts)
            return cv2.VideoCapture(str(target), cv2.CAP_FFMPEG,
                                    [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, open_ms, cv2.CAP_PROP_READ_TIMEOUT_MSEC, read_ms])
        return cv2.VideoCapture(str(target), cv2.CAP_FFMPEG)

    # -- the reading thread ------------------------------------------------------------------------------------

    def _read(self, picture: np.ndarray | None, read_at: float) -> None:
        """Read, pre-process and hand over frames until the source ends or the source is closed."""
        try:
            number, started = 0, read_at
            while not self._closing.is_set():
                if picture is None:
                    ok, picture = self._capture.read()
                    if not ok or picture is None:
                        picture, skipped = self._past_damage(number) if self.kind == "file" else (None, 0)
                        if picture is None:
                            if self._reconnect and self._reopen():
                                continue
                            if self.kind != "file" and not self._closing.is_set():  # else the run just ended
                                logger.warning("sbrs run: %s: the %s stopped giving frames; its frames end "
                                               "(--reconnect reopens it instead)", self.description, self._what())
                            return
                        number += skipped  # the frame's number in the file, the undecodable ones counted
                    read_at = time.monotonic()
                if self._realtime:  # as a camera: frame n exists n / fps seconds after the first
                    if self._closing.wait(max(0.0, started + number / (self.fps or 1.0) - time.monotonic())):
                        return
                    read_at = time.monotonic()
                self.counts.read += 1
                tensor, geometry = self._preprocessor(picture, "BGR")
                frame = SourceFrame(number, geometry, picture if self._keep else None, "BGR", read_at)
                picture = None
                number += 1
                self._hand_over((tensor, frame))
        except BaseException as error:  # handed to the taker, who raises it on its thread
            self._error = error
        finally:
            self._capture.release()
            with self._cond:
                self._ended = True
                self._cond.notify_all()

    def _past_damage(self, number: int) -> tuple[np.ndarray | None, int]:
        """After a failed read of a file: the next frame that decodes and how many reads failed before it (frames
        skipped, logged and counted), or (None, 0) at the file's end (``FILE_FAILED_READS`` failures in a row)."""
        for failed in range(1, FILE_FAILED_READS):
            if self._closing.is_set():
                break
            ok, picture = self._capture.read()
            if ok and picture is not None:
                self.counts.skipped += failed
                logger.warning("sbrs run: %s: %d frame(s) after frame %d could not be decoded (a damaged file); "
                               "skipped", self.description, failed, number - 1)
                return picture, failed
        return None, 0

    def _hand_over(self, item: Item) -> None:
        """A live source replaces what was not taken (dropped, counted); a file waits for room."""
        dropped = 0
        with self._cond:
            if self.live:
                dropped = len(self._ready)
                self._ready.clear()
            else:
                while len(self._ready) >= FILE_AHEAD and not self._closing.is_set():
                    self._cond.wait(POLL_S)
            self._ready.append(item)
            self.counts.dropped += dropped
            self._cond.notify_all()
        if dropped and self._observers is not None:
            self._observers.frames_dropped(dropped)

    def _reopen(self) -> bool:
        """Reopen a source that stopped, with backoff, until it opens (True) or the source closes (False)."""
        stopped = time.monotonic()
        logger.warning("sbrs run: %s: the %s stopped giving frames; reopening it", self.description, self._what())
        delay = RECONNECT_BACKOFF_S
        attempt = 0
        while not self._closing.is_set():
            attempt += 1
            self._capture.release()
            self._opening = True
            try:
                self._capture = self._open()
            finally:
                self._opening = False
            if self._capture.isOpened():
                self.counts.reconnects += 1
                logger.warning("sbrs run: %s: reopened after %.1f s (%d attempts; reconnection %d)", self.description,
                               time.monotonic() - stopped, attempt, self.counts.reconnects)
                if self._observers is not None:
                    self._observers.source_reconnected(self.description)
                return True
            logger.info("sbrs run: %s: cannot reopen it yet (attempt %d); next try in %.1f s", self.description,
                        attempt, delay)
            if self._closing.wait(delay):
                break
            delay = min(2 * delay, RECONNECT_BACKOFF_MAX_S)
        return False

    # -- the taker's side --------------------------------------------------------------------------------------

    def frames(self) -> Iterator[tuple[np.ndarray, SourceFrame | None]]:
        while True:
            item = self._take()
            if item is None:
                return
            yield item

    def _take(self) -> Item | None:
        """The next frame (a file's next, a live source's newest), waiting for it; None at the end or once the
        stop event is set; the reading thread's error raised here."""
        with self._cond:
            while not self._ready and not self._ended:
                if self._stop.is_set() or self._closing.is_set():
                    return None
                self._cond.wait(POLL_S)
            if self._ready:
                item = self._ready.popleft()
                self._cond.notify_all()
                return item
        if self._error is not None:
            error = self._error
            raise SbrsRuntimeError(f"{self.description}: reading the {self._what()} failed: {type(error).__name__}: "
                                   f"{' '.join(str(error).split())}") from error
        return None

    def close(self) -> None:
        """Stop the reading thread and let the source go. A read in progress ends within its timeout, which is
        waited for; an attempt to reopen a stream may take up to its open timeout, which is not: the thread (a
        daemon) then lets the source go when that attempt ends."""
        self._closing.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            # an attempt to reopen is not waited for (Ctrl-C during the backoff took 3 s to stop the run)
            self._thread.join(POLL_S if self._opening else self._timeouts[1] + 1.0)
