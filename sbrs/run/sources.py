"""Where ``sbrs run`` takes its frames: ``--source SRC`` (``--input`` is the same), else ``source:`` of the app
file, else seeded random frames. From Python, ``sbrs.run.frames.open_source`` (``sbrs.open_source``) gives an
iterable that ``Runtime.process`` takes: a ``FrameSource``.

SRC is one of (``parse_source`` decides, from the text alone):

- a folder of ``.npy`` frames or of images (``sbrs.app.frames``);
- a video file (``VIDEO_SUFFIXES``; ``file://PATH`` too);
- a camera: ``/dev/videoN``, ``v4l2:///dev/videoN``, or an index ``0``;
- a network stream: ``rtsp://``, ``rtp://@:PORT`` / ``udp://@:PORT`` (``@HOST:PORT`` listens on HOST only),
  ``http(s)://`` (MJPEG or HLS), ``rtmp://``, ``srt://``, ``tcp://``;
- a GStreamer pipeline (the text holds `` ! ``), or ``csi://N`` (a Jetson CSI camera through
  ``nvarguscamerasrc``), where OpenCV was built with GStreamer (JetPack's is; the PyPI wheels are not).

Video files, cameras, streams and pipelines are read by OpenCV (``pip install "sbrs[video]"``,
``sbrs.run.capture``); without it, a one-line ``InputError`` names the extra. Every picture is pre-processed
as the app's ``input.preprocess`` says (``sbrs.app.preprocess``), and the source remembers, for the frames in
flight, where each came from (``FrameSource.taken``): its number in the source, its geometry (to map boxes
back to its pixels) and, where asked, the picture itself (``--save-video``, ``--show``).

A source that cannot be opened, or a text that names no source, is a one-line ``InputError`` (exit 2).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from sbrs.app.frames import frame_files, image_pictures
from sbrs.app.preprocess import Geometry, Preprocessor
from sbrs.app.settings import InputSpec
from sbrs.errors import InputError

#: Files read as videos (any case).
VIDEO_SUFFIXES: tuple[str, ...] = (".mp4", ".mkv", ".avi", ".mov", ".webm", ".m4v", ".ts", ".mpg", ".mpeg")
#: URI schemes of network streams (FFmpeg opens them).
NETWORK_SCHEMES: tuple[str, ...] = ("rtsp", "rtsps", "rtp", "udp", "http", "https", "rtmp", "srt", "tcp")
#: Schemes whose URI needs a port (they listen on it or send to it).
PORT_SCHEMES: tuple[str, ...] = ("rtp", "udp", "srt", "tcp")
#: How many frames' ``SourceFrame`` a source keeps for ``taken`` (frames in flight are at most a few).
REMEMBERED = 16
#: ``csi://N``: the Jetson CSI camera N through nvarguscamerasrc, as jetson-inference and NVIDIA's samples open it.
CSI_PIPELINE = ("nvarguscamerasrc sensor-id={sensor} ! video/x-raw(memory:NVMM), width=1280, height=720, "
                "framerate=30/1 ! nvvidconv ! video/x-raw, format=BGRx ! videoconvert ! video/x-raw, format=BGR ! "
                "appsink drop=true max-buffers=1")
KINDS: tuple[str, ...] = ("synthetic", "folder", "file", "camera", "stream", "gstreamer")


@dataclass(frozen=True)
class SourceSpec:
    """What a source text means: ``kind`` (one of ``KINDS``), ``target`` (what is opened: a path, a camera
    index or device, a URI as FFmpeg reads it, a pipeline) and the ``text`` as given."""

    kind: str
    target: str | int
    text: str

    @property
    def network(self) -> bool:
        return self.kind == "stream"

    @property
    def live(self) -> bool:
        """Frames come at the source's pace whether or not they are taken (a camera, a stream, a pipeline)."""
        return self.kind in ("camera", "stream", "gstreamer")


def parse_source(text: str | None, *, field: str = "--source") -> SourceSpec:
    """The source ``text`` names (module docstring), or a one-line ``InputError`` saying why it names none."""
    if text is None:
        return SourceSpec("synthetic", "", "")
    given = text.strip()
    if not given:
        raise InputError("an empty source (give a folder, a video file, a camera, a stream URI or a GStreamer "
                         "pipeline)", field=field)
    if " ! " in given:
        return SourceSpec("gstreamer", given, text)
    if given.isdigit():
        return SourceSpec("camera", int(given), text)
    scheme_match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", given)
    if scheme_match is None:
        return _path_source(given, text, field)
    scheme = scheme_match.group(1).lower()
    rest = given[scheme_match.end():]
    if scheme == "file":
        return _path_source(rest, text, field)
    if scheme == "v4l2":
        return _camera_device(rest, text, field)
    if scheme == "csi":
        if not rest.isdigit():
            raise InputError(f"{text}: expected csi://N with N the camera's sensor number", field=field)
        return SourceSpec("gstreamer", CSI_PIPELINE.format(sensor=int(rest)), text)
    if scheme in NETWORK_SCHEMES:
        return SourceSpec("stream", _stream_uri(given, scheme, text, field), text)
    raise InputError(f"{text}: unknown kind of source '{scheme}://' (a folder, a video file "
                     f"({', '.join(VIDEO_SUFFIXES)}), a camera (0, /dev/videoN, v4l2:///dev/videoN), a stream "
                     f"({', '.join(s + '://' for s in NETWORK_SCHEMES)}), csi://N, or a GStreamer pipeline)",
                     field=field)


def _path_source(path_text: str, text: str, field: str) -> SourceSpec:
    if path_text.startswith("/dev/video"):
        return _camera_device(path_text, text, field)
    path = Path(path_text)
    if path.is_dir():
        return SourceSpec("folder", str(path), text)
    if path.is_file():
        if path.suffix.lower() in VIDEO_SUFFIXES:
            return SourceSpec("file", str(path), text)
        raise InputError(f"{text}: not a video file ({', '.join(VIDEO_SUFFIXES)}) or a folder of frames",
                         field=field)
    if path.suffix.lower() in VIDEO_SUFFIXES:
        raise InputError(f"{text}: no such video file", field=field)
    raise InputError(f"{text}: no such folder or video file", field=field)


def _camera_device(device: str, text: str, field: str) -> SourceSpec:
    if not re.fullmatch(r"/dev/video\d+", device):
        raise InputError(f"{text}: expected a camera device /dev/videoN", field=field)
    if not Path(device).exists():
        raise InputError(f"{text}: no such camera device ({device} does not exist)", field=field)
    return SourceSpec("camera", device, text)


def _stream_uri(uri: str, scheme: str, text: str, field: str) -> str:
    """``uri`` as FFmpeg reads it: ``rtp://@HOST:PORT`` and ``udp://@HOST:PORT`` listen on HOST only
    (``localaddr``, for RTP's RTCP port too); a URI with no host where it needs one, or a bad port, is refused."""
    from urllib.parse import urlsplit  # only for a stream: a run of random frames or a folder does without

    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError as error:
        raise InputError(f"{text}: not a valid URI ({error})", field=field) from None
    host = parts.hostname or ""
    if scheme in PORT_SCHEMES and port is None:
        raise InputError(f"{text}: a {scheme}:// source needs a port ({scheme}://@:PORT to listen on PORT)",
                         field=field)
    if scheme not in PORT_SCHEMES and not host:
        raise InputError(f"{text}: a {scheme}:// source needs a host", field=field)
    if scheme in ("rtp", "udp") and "@" in parts.netloc and host and "localaddr=" not in parts.query:
        return uri + ("&" if parts.query else "?") + f"localaddr={host}"
    return uri


@dataclass(frozen=True)
class SourceFrame:
    """Where one frame given to the runtime came from: its ``number`` in the source (counted from 0 over every
    frame read, the dropped ones too), its ``geometry`` in the input (None for ``.npy`` and random frames), the
    ``picture`` where the source keeps them (``keep_pictures``; in ``order``), when it was read and when it was
    handed to the runtime (``time.monotonic()``)."""

    number: int
    geometry: Geometry | None = None
    picture: np.ndarray | None = None
    order: str = "BGR"
    read_at: float = 0.0
    taken_at: float = 0.0

    @property
    def age_s(self) -> float:
        """How old the frame was when the runtime took it."""
        return self.taken_at - self.read_at


@dataclass
class SourceCounts:
    """What a source has done so far: frames read, frames dropped (a live source replaced them with newer ones
    before the runtime took them), reconnections of a network stream, frames of a file skipped because they
    could not be decoded (a damaged file)."""

    read: int = 0
    dropped: int = 0
    reconnects: int = 0
    skipped: int = 0


class FrameSource:
    """Frames for ``Runtime.process``: iterate it for the input tensors, one per frame (``taken`` for where each
    came from). ``fps``: the source's frame rate (None: unknown, e.g. a folder); ``live``: frames come at the
    source's pace and the newest is taken (``sbrs.run.capture``). Close it when done (a context manager)."""

    kind: str = "synthetic"
    live: bool = False
    fps: float | None = None
    #: whether its frames come from pictures (which ``--save-video`` draws on), not tensors
    pictures: bool = True

    def __init__(self, description: str) -> None:
        self.description = description
        self.counts = SourceCounts()
        self._remembered: dict[int, SourceFrame] = {}
        self._lock = threading.Lock()
        self._given = 0

    def __iter__(self) -> Iterator[np.ndarray]:
        for tensor, frame in self.frames():
            if frame is not None:
                self._remember(replace(frame, taken_at=time.monotonic()))
            self._given += 1
            yield tensor

    def frames(self) -> Iterator[tuple[np.ndarray, SourceFrame | None]]:
        """Each input tensor with where it came from (subclasses)."""
        raise NotImplementedError

    def _remember(self, frame: SourceFrame) -> None:
        with self._lock:
            self._remembered[self._given] = frame
            self._remembered.pop(self._given - REMEMBERED, None)

    def taken(self, index: int) -> SourceFrame | None:
        """Where the ``index``-th frame given out (counted from 0, as ``Runtime.process`` numbers its results)
        came from, forgotten once asked for; None for frames without a picture, or long gone."""
        with self._lock:
            return self._remembered.pop(index, None)

    def stats(self) -> dict[str, Any]:
        """The summary's ``source``: what it is, its frame rate, frames read, dropped and skipped, reconnections."""
        return {"source": self.description, "kind": self.kind, "live": self.live,
                "fps": None if self.fps is None else round(self.fps, 3), "read": self.counts.read,
                "dropped": self.counts.dropped, "reconnects": self.counts.reconnects, "skipped": self.counts.skipped}

    def close(self) -> None:
        """Stop reading and let go of the source (a thread, a device); idempotent."""

    def __enter__(self) -> FrameSource:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


class TensorSource(FrameSource):
    """Frames that are tensors already: seeded random frames, or a folder of ``.npy`` files."""

    pictures = False

    def __init__(self, description: str, kind: str, tensors: Iterator[np.ndarray]) -> None:
        super().__init__(description)
        self.kind = kind
        self._tensors = tensors

    def frames(self) -> Iterator[tuple[np.ndarray, SourceFrame | None]]:
        for tensor in self._tensors:
            self.counts.read += 1
            yield tensor, None


class ImageFolderSource(FrameSource):
    """A folder of images, each pre-processed with its geometry (its picture kept where asked)."""

    kind = "folder"

    def __init__(self, folder: str, spec: InputSpec, *, keep_pictures: bool, field: str) -> None:
        super().__init__(folder)
        self._preprocessor = Preprocessor(spec, field=field)
        self._pictures = image_pictures(frame_files(Path(folder)), self._preprocessor.channels, field=field)
        self._keep = keep_pictures

    def frames(self) -> Iterator[tuple[np.ndarray, SourceFrame | None]]:
        for number, (_, picture) in enumerate(self._pictures):
            read_at = time.monotonic()
            self.counts.read += 1
            tensor, geometry = self._preprocessor(picture, "RGB")
            yield tensor, SourceFrame(number, geometry, picture if self._keep else None, "RGB", read_at)
