"""Frames from a folder, read for the app's input: a folder of ``.npy`` files or a folder of images.

Two readers of one folder: ``sbrs run --input DIR`` (``sbrs.run.frames``) and the calibration frames of a
derived int8 scenario (``quantize.calibration``, ``sbrs.app.derive``); ``field`` is what their errors name.

- A folder with ``.npy`` files: each file is one frame, in file-name order, of the app's input shape (or that
  shape without its leading batch dimension of 1) and a dtype that casts to the input's within its kind.
  Every file's header is checked before the first frame is read, so a bad file is a one-line ``InputError``.
- A folder of images (``.png``, ``.jpg``, ``.jpeg``, ``.bmp``, any case) and no ``.npy`` file: each resized
  (bilinear) to the input's height and width, as RGB (3 channels) or grayscale (1), laid out NCHW or NHWC as
  the input shape says; float inputs get values in [0, 1] normalised with the ImageNet mean and standard
  deviation (3 channels) or plain [0, 1] (1 channel). Needs Pillow (``pip install "sbrs[images]"``); without
  it, a one-line ``InputError``. Every image is checked (header, at most ``MAX_IMAGE_PIXELS`` pixels,
  integrity) before the first frame is read.

Non-finite values (NaN, infinity) in a ``.npy`` frame are refused with a one-line ``InputError`` naming the
file: they would only come back as non-finite outputs.

A folder is read once, in order (``frame_files``); its files are checked when it is opened, their frames read
one at a time as they are asked for.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sbrs.app.config import InputSpec
from sbrs.errors import InputError

IMAGE_SUFFIXES: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".bmp")
IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)
MAX_IMAGE_PIXELS = 50_000_000  # an input image is decoded whole before it is resized: bound what that costs
#: The frame files of a folder as glob patterns (``Path.glob``): the ``.npy`` files, then the images by suffix in
#: any case (``*.[pP][nN][gG]``), as ``frame_files`` finds them.
FRAME_GLOBS: tuple[str, ...] = ("*.npy", *("*." + "".join(f"[{c.lower()}{c.upper()}]" for c in suffix[1:])
                                           for suffix in IMAGE_SUFFIXES))


def frame_files(folder: Path) -> list[Path]:
    """The frames of ``folder``, in name order: its ``.npy`` files, or where it has none its images (empty: none
    of either, or no such folder)."""
    if not folder.is_dir():
        return []
    npy_files = sorted(path for path in folder.glob("*.npy") if path.is_file())
    if npy_files:
        return npy_files
    return sorted(path for path in folder.iterdir() if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file())


def folder_frames(folder: str | Path, spec: InputSpec, *, field: str) -> Iterator[np.ndarray]:
    """The frames of ``folder`` (``frame_files``) for ``spec``, every file checked before this returns."""
    if not Path(folder).is_dir():
        raise InputError(f"{folder}: no such folder", field=field)
    files = frame_files(Path(folder))
    if not files:
        raise InputError(f"{folder}: the folder holds no .npy or image files ({', '.join(IMAGE_SUFFIXES)})",
                         field=field)
    if files[0].suffix == ".npy":
        return npy_frames(files, spec, field=field)
    return image_frames(files, spec, field=field)


def npy_frames(files: list[Path], spec: InputSpec, *, field: str) -> Iterator[np.ndarray]:
    """One frame per ``.npy`` file; every header is checked before the first frame is returned."""
    dtype = np.dtype(spec.dtype)
    for path in files:
        try:
            header = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:  # EOFError: an empty file
            raise InputError(f"{path}: not a readable .npy array ({' '.join(str(exc).split())})",
                             field=field) from None
        if tuple(header.shape) not in (tuple(spec.shape), tuple(spec.shape[1:])) or (
                tuple(header.shape) == tuple(spec.shape[1:]) and spec.shape[:1] != (1,)):
            raise InputError(f"{path}: shape {list(header.shape)} does not fit the app's input {list(spec.shape)}",
                             field=field)
        if not np.can_cast(header.dtype, dtype, casting="same_kind"):
            raise InputError(f"{path}: dtype {header.dtype} does not fit the app's input dtype {dtype}",
                             field=field)
        del header
    return _load_npy(files, spec, field)


def _load_npy(files: list[Path], spec: InputSpec, field: str) -> Iterator[np.ndarray]:
    for path in files:
        try:
            frame = np.ascontiguousarray(np.load(path, allow_pickle=False).reshape(spec.shape).astype(spec.dtype))
        except (OSError, ValueError, EOFError) as exc:  # changed or truncated since it was checked
            raise InputError(f"{path}: not a readable .npy array ({' '.join(str(exc).split())})",
                             field=field) from None
        if frame.dtype.kind == "f" and not np.isfinite(frame).all():
            raise InputError(f"{path}: the frame holds NaN or infinite values", field=field)
        yield frame


def image_layout(spec: InputSpec, *, field: str) -> tuple[str, int, int, int]:
    """(``"NCHW"`` or ``"NHWC"``, channels, height, width) of an image input, or an ``InputError``."""
    shape = tuple(spec.shape)
    if len(shape) == 4 and shape[0] == 1 and shape[1] in (1, 3):
        return "NCHW", shape[1], shape[2], shape[3]
    if len(shape) == 4 and shape[0] == 1 and shape[3] in (1, 3):
        return "NHWC", shape[3], shape[1], shape[2]
    raise InputError(f"images need an input of shape [1, C, H, W] or [1, H, W, C] with C 1 or 3, "
                     f"the app's is {list(shape)}", field=field)


def image_frames(files: list[Path], spec: InputSpec, *, field: str) -> Iterator[np.ndarray]:
    """One frame per image file, resized and normalised for ``spec`` (module docstring)."""
    try:
        from PIL import Image
    except ImportError:
        raise InputError("reading images needs Pillow (pip install \"sbrs[images]\"), which is not "
                         "installed", field=field) from None
    layout, channels, height, width = image_layout(spec, field=field)
    dtype = np.dtype(spec.dtype)
    for path in files:  # every file is checked (header, size, integrity) before the first frame
        try:
            with Image.open(path) as image:
                if image.width * image.height > MAX_IMAGE_PIXELS:
                    raise InputError(f"{path}: {image.width}x{image.height} pixels, more than an input image may "
                                     f"have ({MAX_IMAGE_PIXELS})", field=field)
                image.verify()
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
            raise InputError(f"{path}: not a readable image ({' '.join(str(exc).split())})",
                             field=field) from None

    def frames() -> Iterator[np.ndarray]:
        for path in files:
            try:
                with Image.open(path) as image:
                    pixels = image.convert("RGB" if channels == 3 else "L").resize((width, height),
                                                                                    Image.Resampling.BILINEAR)
                    array = np.asarray(pixels, dtype=np.float32).reshape(height, width, channels)
            except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
                raise InputError(f"{path}: not a readable image ({' '.join(str(exc).split())})",
                                 field=field) from None
            if np.issubdtype(dtype, np.floating):
                array = array / 255.0
                if channels == 3:
                    array = (array - np.array(IMAGENET_MEAN, np.float32)) / np.array(IMAGENET_STD, np.float32)
            frame = array.transpose(2, 0, 1) if layout == "NCHW" else array
            yield np.ascontiguousarray(frame[None].astype(dtype))

    return frames()
