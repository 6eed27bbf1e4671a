"""Frame sources for ``sbrs run --source``: ``open_source`` opens any of them (``sbrs.run.sources`` says which
texts name what; video files, cameras and streams are ``sbrs.run.capture``'s). The two kinds that need no video
library:

- No source: an endless stream of seeded pseudo-random frames of the app's input shape and dtype
  (uniform with mean 0 and variance 1 for floats, 0..255 for integers); the same seed gives the same frames.
- A folder: its ``.npy`` files or its images, read by the app stage's reader (``sbrs.app.frames``, which the
  calibration frames of a derived scenario share), checked up front; its errors name the field ``--input``.

A folder is read once, in order; ``--frames`` can stop earlier.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sbrs.app.frames import folder_frames, frame_files
from sbrs.app.preprocess import Preprocessor
from sbrs.app.settings import InputSpec
from sbrs.errors import InputError
from sbrs.run.sources import FrameSource, ImageFolderSource, TensorSource, parse_source

if TYPE_CHECKING:
    from sbrs.runtime.events import RunObserver


def open_source(text: str | None, spec: InputSpec, *, seed: int = 0, realtime: bool = False,
                reconnect: bool | None = None, keep_pictures: bool = False, stop: threading.Event | None = None,
                observers: RunObserver | Iterable[RunObserver] | None = None,
                field: str = "--source") -> FrameSource:
    """The frames of source ``text`` for the input ``spec`` (module docstring), opened and checked: a source that
    cannot be opened is an ``InputError`` here. ``realtime``: a video file paced at its frame rate, the newest
    frame taken, as a camera would give it. ``reconnect``: reopen a source that stops, with backoff (default:
    for network streams). ``keep_pictures``: remember the pictures of frames in flight (``SourceFrame.picture``).
    ``stop``: ends the frames when set (a live source waiting for its next frame too). ``observers`` (a list of
    them, as ``runtime_for`` takes them, or one) get ``frames_dropped`` and ``source_reconnected``
    (``sbrs.runtime.events``)."""
    source = parse_source(text, field=field)
    if realtime and source.kind != "file":
        raise InputError("--realtime paces a video file at its frame rate; "
                         + (f"{source.text} is a {source.kind} source" if source.kind != "synthetic"
                            else "give one with --source"), field="--realtime")
    if source.kind == "synthetic":
        return TensorSource("random frames", "synthetic", synthetic_frames(spec, seed))
    if source.kind == "folder":
        assert isinstance(source.target, str)
        files = frame_files(Path(source.target))
        if not files or files[0].suffix == ".npy":  # folder_frames says what is wrong with a folder without frames
            return TensorSource(source.target, "folder", folder_frames(source.target, spec, field=field))
        return ImageFolderSource(source.target, spec, keep_pictures=keep_pictures, field=field)
    from sbrs.run.capture import CaptureSource
    from sbrs.runtime.events import Observers

    # One fan-out whatever was given: a list has no frames_dropped (it failed the read thread at the first dropped
    # frame), and an observer that raises must not end the frames.
    if observers is not None and not isinstance(observers, Observers):
        observers = Observers(observers if isinstance(observers, Iterable) else (observers,))
    return CaptureSource(source, Preprocessor(spec, field="input.preprocess"), realtime=realtime,
                         reconnect=source.network if reconnect is None else reconnect, keep_pictures=keep_pictures,
                         stop=stop, observers=observers, field=field)


#: Values of the synthetic frames' table (``synthetic_frames``): 256 kB of float32.
SYNTHETIC_TABLE = 1 << 16


def synthetic_frames(spec: InputSpec, seed: int) -> Iterator[np.ndarray]:
    """Endless seeded pseudo-random frames of ``spec``: floats uniform with mean 0 and variance 1, integers
    uniform in 0..255; the same seed gives the same frames.

    The values come from a table of hashed values (``_mix32``, seeded; ``SYNTHETIC_TABLE`` of them, or as many as
    the smallest power of two from 256 that holds a frame when that is fewer), each frame a copy
    of the table read from its own offset (a hash of the seed and the frame's number), wrapping around its end,
    so consecutive frames differ everywhere while a frame allocates only itself. Not ``numpy.random``:
    importing it costs a serving process about 6.7 MB of resident memory (PSS above a bare interpreter,
    measured), which the device memory of ``sbrs run`` would carry for frames a camera replaces anyway; and no
    temporaries of a frame's size, which left the allocator holding a few MB more with MobileNetV2's 224x224
    frames (measured). The table is held once, in the frame's dtype (256 kB of float32), and computed
    ``_TABLE_CHUNK`` values at a time: the float64 temporaries of the whole table (about 2.5 MB, freed at once)
    stayed in the C heap of ``sbrs run`` (measured on apps/adaptive.yaml, 160x160 frames: 0.6 MB more anonymous
    memory with the table computed whole and held twice).
    """
    dtype = np.dtype(spec.dtype)
    count = int(np.prod(spec.shape, dtype=np.int64))
    size = min(SYNTHETIC_TABLE, max(256, 1 << max(count - 1, 1).bit_length()))
    table = _synthetic_table(size, dtype, seed)
    frame_number = 0
    while True:
        key = np.array([(seed * 0x85EBCA6B + frame_number * 0x9E3779B9) % 2**32], dtype=np.uint32)
        _mix32(key)
        offset = int(key[0]) % size
        frame = np.empty(spec.shape, dtype=dtype)
        flat = frame.reshape(-1)
        for start in range(0, count, size):  # table[offset:], then table[:...] where the frame wraps around
            length = min(size, count - start)
            head = min(length, size - offset)
            flat[start:start + head] = table[offset:offset + head]
            if head < length:
                flat[start + head:start + length] = table[:length - head]
        yield frame
        frame_number += 1


#: Values of the synthetic table computed at once (``_synthetic_table``): temporaries of 32 kB at most.
_TABLE_CHUNK = 4096


def _synthetic_table(size: int, dtype: np.dtype[Any], seed: int) -> np.ndarray:
    """The ``size`` seeded values of ``synthetic_frames`` in ``dtype``: hashed indices (``_mix32``) as uniform
    values in [0, 1), scaled to mean 0 and variance 1 for floats or to 0..255 for integers (computed in float64,
    then cast), ``_TABLE_CHUNK`` at a time."""
    table = np.empty(size, dtype=dtype)
    salt = np.uint32((seed * 0x9E3779B9) % 2**32)
    floating = np.issubdtype(dtype, np.floating)
    for start in range(0, size, _TABLE_CHUNK):
        hashed = np.arange(start, min(start + _TABLE_CHUNK, size), dtype=np.uint32) ^ salt
        _mix32(hashed)
        unit = (hashed >> np.uint32(8)).astype(np.float64) / 2**24  # uniform in [0, 1)
        values = ((unit - 0.5) * np.sqrt(12.0)) if floating else np.floor(unit * 256)
        table[start:start + len(values)] = values.astype(dtype)
    return table


def _mix32(values: np.ndarray) -> None:
    """A 32-bit integer hash (the "lowbias32" finaliser), in place on uint32 ``values``; wraps on purpose."""
    values ^= values >> np.uint32(16)
    values *= np.uint32(0x7FEB352D)
    values ^= values >> np.uint32(15)
    values *= np.uint32(0x846CA68B)
    values ^= values >> np.uint32(16)
