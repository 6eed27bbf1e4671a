"""``sbrs run --save-outputs DIR``: every frame's raw outputs in one ``.npz`` file, to compare or replay.

``DIR/frame-0000000042.npz`` holds each output array under its output name, ``frame`` (the frame's index in
the stream, int64) and ``scenario`` (the scenario that computed it, a string); names sort in frame order. A
detector's frame also holds its detections as ``sbrs run`` prints them, boxes in the pixels of the picture the
frame came from: ``detection_boxes`` (``[n, 4]`` float32 ``x1, y1, x2, y2``), ``detection_scores`` and
``detection_classes``.
``np.load(path)["scenario"].item()`` gives the scenario back. Files are written uncompressed, one per frame,
as the frame's result arrives (in completion order, like the JSON lines).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from sbrs.errors import InputError
from sbrs.outputs.detections import Detections

#: Keys of a frame file that are not outputs.
METADATA_KEYS: tuple[str, ...] = ("frame", "scenario")
#: Keys of a detector's frame file holding its detections (``Detections``).
DETECTION_KEYS: tuple[str, ...] = ("detection_boxes", "detection_scores", "detection_classes")
FILE_PATTERN = "frame-*.npz"


def frame_file_name(index: int) -> str:
    """The file of frame ``index`` (ten digits: names sort in frame order up to 10^10 frames)."""
    return f"frame-{index:010d}.npz"


class OutputSaver:
    """Writes frames' outputs into ``folder`` (made if missing). A path that is not a writable folder, or a
    folder already holding frame files (of an earlier run, which this run's would mix with), is a one-line
    ``InputError`` naming ``--save-outputs``."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise self._error("exists and is not a folder") from None
        except OSError as error:
            raise self._error(f"cannot make the folder ({error.strerror})") from None
        if not os.access(self.folder, os.W_OK | os.X_OK):
            raise self._error("cannot write into the folder (permission denied)")
        earlier = next(self.folder.glob(FILE_PATTERN), None)
        if earlier is not None:
            raise self._error(f"already holds frame files ({earlier.name}, ...): choose an empty folder or remove them")
        self.saved = 0

    def _error(self, why: str) -> InputError:
        return InputError(f"{self.folder}: {why}", field="--save-outputs")

    def save(self, index: int, scenario: str, outputs: Mapping[str, np.ndarray],
             detections: Detections | None = None) -> Path:
        """Write one frame's file (with its ``detections`` where given); returns its path."""
        reserved = METADATA_KEYS + (DETECTION_KEYS if detections is not None else ())
        clash = [name for name in outputs if name in reserved]
        if clash:
            raise self._error(f"the model's output '{clash[0]}' has the name of a key each file uses for the "
                              f"frame's metadata ({', '.join(reserved)})")
        extra = {} if detections is None else dict(zip(DETECTION_KEYS, (detections.boxes, detections.scores,
                                                                         detections.classes), strict=True))
        path = self.folder / frame_file_name(index)
        try:
            with path.open("wb") as stream:
                np.savez(stream, frame=np.int64(index), scenario=np.str_(scenario), **outputs, **extra)
        except OSError as error:
            path.unlink(missing_ok=True)
            raise InputError(f"{path}: cannot write ({error.strerror})", field="--save-outputs") from None
        self.saved += 1
        return path
