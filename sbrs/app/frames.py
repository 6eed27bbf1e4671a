"""Frames from a folder, read for the app's input: a folder of ``.npy`` files or a folder of images.

Two readers of one folder: ``sbrs run --input DIR`` (``sbrs.run.frames``) and the calibration frames of a
derived int8 scenario (``quantize.calibration``, ``sbrs.app.derive``); ``field`` is what their errors name.

- A folder with ``.npy`` files: each file is one frame, in file-name order, of the app's input shape (or that
  shape without its leading batch dimension of 1) and a dtype that casts to the input's within its kind.
  Every file's header is checked before the first frame is read, so a bad file is a one-line ``InputError``.
- A folder of images (``.png``, ``.jpg``, ``.jpeg``, ``.bmp``, any case) and no ``.npy`` file: each decoded
  by Pillow (``pip install "sbrs[images]"``; without it, a one-line ``InputError``) as RGB (3 channels) or
  grayscale (1), a 16-bit grey PNG by its high bytes, and pre-processed as the app's ``input.preprocess`` says
  (``sbrs.app.preprocess``: the one path video frames take too; by default stretched to the input's size and
  normalised with the ImageNet mean and standard deviation, or plain [0, 1] for one channel). Every image is
  checked (header, at most ``MAX_IMAGE_PIXELS`` pixels, integrity) before the first frame is read.

Non-finite values (NaN, infinity) in a ``.npy`` frame are refused with a one-line ``InputError`` naming the
file: they would only come back as non-finite outputs.

A folder is read once, in order (``frame_files``); its files are checked when it is opened, their frames read
one at a time as they are asked for.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sbrs.app.preprocess import Preprocessor
from sbrs.app.settings import InputSpec
from sbrs.errors import InputError

if TYPE_CHECKING:
    from PIL.Image import Image as PillowImage

IMAGE_SUFFIXES: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".bmp")
MAX_IMAGE_PIXELS = 50_000_000  # an input image is decoded whole before it is resized: bound what that costs
#: Formats whose pixel data Pillow's ``verify`` does not read (it checks a PNG's chunks): a cut JPEG or BMP passed
#: it and failed when its frame came, after the frames before it had run. These are decoded to be checked.
DECODED_TO_CHECK: tuple[str, ...] = ("JPEG", "BMP")
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
            stored = np.load(path, allow_pickle=False)
            with np.errstate(over="ignore", invalid="ignore"):  # beyond the input's range: refused below, one line
                frame = np.ascontiguousarray(stored.reshape(spec.shape).astype(spec.dtype))
        except (OSError, ValueError, EOFError) as exc:  # changed or truncated since it was checked
            raise InputError(f"{path}: not a readable .npy array ({' '.join(str(exc).split())})",
                             field=field) from None
        if frame.dtype.kind in "iu" and stored.dtype != frame.dtype and stored.size:  # a cast would wrap around
            limits = np.iinfo(frame.dtype)
            if stored.min() < limits.min or stored.max() > limits.max:
                raise InputError(f"{path}: the frame holds values beyond the range of the app's input dtype "
                                 f"{frame.dtype} ({limits.min}..{limits.max})", field=field)
        if frame.dtype.kind == "f" and not np.isfinite(frame).all():
            if stored.dtype.kind == "f" and np.isfinite(stored).all():
                raise InputError(f"{path}: the frame holds values beyond the range of the app's input dtype "
                                 f"{frame.dtype}", field=field)
            raise InputError(f"{path}: the frame holds NaN or infinite values", field=field)
        yield frame


def image_frames(files: list[Path], spec: InputSpec, *, field: str) -> Iterator[np.ndarray]:
    """One frame per image file, pre-processed for ``spec`` (module docstring); every file is checked first."""
    preprocessor = Preprocessor(spec, field=field)
    pictures = image_pictures(files, preprocessor.channels, field=field)
    return (preprocessor(picture, "RGB")[0] for _, picture in pictures)


def _eight_bit(image: PillowImage) -> PillowImage:
    """``image`` (a Pillow image) with 8-bit samples. Pillow opens a 16-bit grey PNG as ``I;16`` (or ``I``) and
    its ``convert`` clips those values to 255, which made such a picture white: they are scaled to 0..255 here,
    the high byte kept as OpenCV's ``imread`` keeps it. Other modes are Pillow's to convert."""
    if not (image.mode.startswith("I;16") or image.mode == "I"):
        return image
    from PIL import Image

    wide = np.asarray(image).astype(np.int64)
    return Image.fromarray((np.clip(wide, 0, 65535) >> 8).astype(np.uint8))  # 2-D uint8: mode L


def image_pictures(files: list[Path], channels: int, *, field: str) -> Iterator[tuple[Path, np.ndarray]]:
    """Each image file and its pixels, ``H x W x 3`` RGB (``channels`` 3) or ``H x W`` gray (1), uint8, as
    Pillow decodes them; every file is checked (header, size, integrity) before this returns."""
    try:
        from PIL import Image
    except ImportError:
        raise InputError("reading images needs Pillow (pip install \"sbrs[images]\"), which is not "
                         "installed", field=field) from None
    for path in files:
        try:
            with Image.open(path) as image:
                if image.width * image.height > MAX_IMAGE_PIXELS:
                    raise InputError(f"{path}: {image.width}x{image.height} pixels, more than an input image may "
                                     f"have ({MAX_IMAGE_PIXELS})", field=field)
                kind = image.format
                image.verify()
            if kind in DECODED_TO_CHECK:
                with Image.open(path) as image:
                    if kind == "JPEG":  # decoded at 1/8 of its size: every byte read, a fraction of the work
                        image.draft(image.mode, (max(1, image.width // 8), max(1, image.height // 8)))
                    image.load()
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
            raise InputError(f"{path}: not a readable image ({' '.join(str(exc).split())})",
                             field=field) from None

    def pictures() -> Iterator[tuple[Path, np.ndarray]]:
        for path in files:
            try:
                with Image.open(path) as image:
                    pixels = np.asarray(_eight_bit(image).convert("RGB" if channels == 3 else "L"), dtype=np.uint8)
            except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
                raise InputError(f"{path}: not a readable image ({' '.join(str(exc).split())})",
                                 field=field) from None
            yield path, pixels

    return pictures()
