"""Frame sources for ``sbrs run --input``: synthetic seeded frames, a folder of ``.npy`` files, a folder of images.

- No ``--input``: an endless stream of seeded pseudo-random frames of the app's input shape and dtype
  (uniform with mean 0 and variance 1 for floats, 0..255 for integers); the same seed gives the same frames.
- A folder with ``.npy`` files: each file is one frame, in file-name order, of the app's input shape (or that
  shape without its leading batch dimension of 1) and a dtype that casts to the input's within its kind.
  Every file's header is checked before the first frame runs, so a bad file is a one-line ``InputError``.
- A folder of images (``.png``, ``.jpg``, ``.jpeg``, ``.bmp``): each resized (bilinear) to the input's height
  and width, as RGB (3 channels) or grayscale (1), laid out NCHW or NHWC as the input shape says; float inputs
  get values in [0, 1] normalised with the ImageNet mean and standard deviation (3 channels) or plain [0, 1]
  (1 channel). Needs Pillow (``pip install "sbrs[images]"``); without it, a one-line ``InputError``. Every
  image is checked (header, at most ``MAX_IMAGE_PIXELS`` pixels, integrity) before the first frame runs.

Non-finite values (NaN, infinity) in a ``.npy`` frame are refused with a one-line ``InputError`` naming the
file: they would only come back as non-finite outputs.

A folder is read once, in order; ``--frames`` can stop earlier.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from sbrs.app.config import InputSpec
from sbrs.errors import InputError

IMAGE_SUFFIXES: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".bmp")
IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)
MAX_IMAGE_PIXELS = 50_000_000  # an input image is decoded whole before it is resized: bound what that costs


def open_frames(source: str | None, spec: InputSpec, seed: int = 0) -> Iterator[np.ndarray]:
    """The frames ``sbrs run`` feeds the runtime, checked up front where they come from files."""
    if source is None:
        return synthetic_frames(spec, seed)
    folder = Path(source)
    if not folder.is_dir():
        raise InputError(f"{source}: no such folder", field="--input")
    npy_files = sorted(folder.glob("*.npy"))
    if npy_files:
        return npy_frames(npy_files, spec)
    images = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if images:
        return image_frames(images, spec)
    raise InputError(f"{source}: the folder holds no .npy or image files "
                     f"({', '.join(IMAGE_SUFFIXES)})", field="--input")


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


def npy_frames(files: list[Path], spec: InputSpec) -> Iterator[np.ndarray]:
    """One frame per ``.npy`` file; every header is checked before the first frame is returned."""
    dtype = np.dtype(spec.dtype)
    for path in files:
        try:
            header = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:  # EOFError: an empty file
            raise InputError(f"{path}: not a readable .npy array ({' '.join(str(exc).split())})",
                             field="--input") from None
        if tuple(header.shape) not in (tuple(spec.shape), tuple(spec.shape[1:])) or (
                tuple(header.shape) == tuple(spec.shape[1:]) and spec.shape[:1] != (1,)):
            raise InputError(f"{path}: shape {list(header.shape)} does not fit the app's input {list(spec.shape)}",
                             field="--input")
        if not np.can_cast(header.dtype, dtype, casting="same_kind"):
            raise InputError(f"{path}: dtype {header.dtype} does not fit the app's input dtype {dtype}",
                             field="--input")
        del header
    return _load_npy(files, spec)


def _load_npy(files: list[Path], spec: InputSpec) -> Iterator[np.ndarray]:
    for path in files:
        try:
            frame = np.ascontiguousarray(np.load(path, allow_pickle=False).reshape(spec.shape).astype(spec.dtype))
        except (OSError, ValueError, EOFError) as exc:  # changed or truncated since it was checked
            raise InputError(f"{path}: not a readable .npy array ({' '.join(str(exc).split())})",
                             field="--input") from None
        if frame.dtype.kind == "f" and not np.isfinite(frame).all():
            raise InputError(f"{path}: the frame holds NaN or infinite values", field="--input")
        yield frame


def image_layout(spec: InputSpec) -> tuple[str, int, int, int]:
    """(``"NCHW"`` or ``"NHWC"``, channels, height, width) of an image input, or an ``InputError``."""
    shape = tuple(spec.shape)
    if len(shape) == 4 and shape[0] == 1 and shape[1] in (1, 3):
        return "NCHW", shape[1], shape[2], shape[3]
    if len(shape) == 4 and shape[0] == 1 and shape[3] in (1, 3):
        return "NHWC", shape[3], shape[1], shape[2]
    raise InputError(f"images need an input of shape [1, C, H, W] or [1, H, W, C] with C 1 or 3, "
                     f"the app's is {list(shape)}", field="--input")


def image_frames(files: list[Path], spec: InputSpec) -> Iterator[np.ndarray]:
    """One frame per image file, resized and normalised for ``spec`` (module docstring)."""
    try:
        from PIL import Image
    except ImportError:
        raise InputError("reading images needs Pillow (pip install \"sbrs[images]\"), which is not "
                         "installed", field="--input") from None
    layout, channels, height, width = image_layout(spec)
    dtype = np.dtype(spec.dtype)
    for path in files:  # every file is checked (header, size, integrity) before the first frame
        try:
            with Image.open(path) as image:
                if image.width * image.height > MAX_IMAGE_PIXELS:
                    raise InputError(f"{path}: {image.width}x{image.height} pixels, more than an input image may "
                                     f"have ({MAX_IMAGE_PIXELS})", field="--input")
                image.verify()
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
            raise InputError(f"{path}: not a readable image ({' '.join(str(exc).split())})",
                             field="--input") from None

    def frames() -> Iterator[np.ndarray]:
        for path in files:
            try:
                with Image.open(path) as image:
                    pixels = image.convert("RGB" if channels == 3 else "L").resize((width, height),
                                                                                    Image.Resampling.BILINEAR)
                    array = np.asarray(pixels, dtype=np.float32).reshape(height, width, channels)
            except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
                raise InputError(f"{path}: not a readable image ({' '.join(str(exc).split())})",
                                 field="--input") from None
            if np.issubdtype(dtype, np.floating):
                array = array / 255.0
                if channels == 3:
                    array = (array - np.array(IMAGENET_MEAN, np.float32)) / np.array(IMAGENET_STD, np.float32)
            frame = array.transpose(2, 0, 1) if layout == "NCHW" else array
            yield np.ascontiguousarray(frame[None].astype(dtype))

    return frames()
