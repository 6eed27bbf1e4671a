"""The pre-processing the app's model expects (app.yaml ``input.preprocess``): one path for image files, video
frames, camera and stream frames, and the calibration frames of a derived int8 scenario.

A picture (``H x W x 3`` uint8 in BGR or RGB order, or ``H x W`` gray) becomes one input tensor:

1. colour: the input's channels, in ``colors`` order (``RGB`` or ``BGR``); gray for a 1-channel input;
2. size, to the input's height and width (``resize``):

   - ``stretch``: to exactly ``H x W``, the aspect ratio not kept (sbrs' behaviour before ``preprocess``);
   - ``letterbox``: what ultralytics' ``LetterBox(auto=False, scaleup=True, center=True)`` does: scale
     ``r = min(H / h, W / w)``, resized to ``round(w r) x round(h r)``, the rest padded with ``pad_value``,
     split around the picture as ``round(d / 2 - 0.1)`` before and ``round(d / 2 + 0.1)`` after (``d`` the
     pixels missing across or down);
   - ``center-crop``: scale ``r = max(H / h, W / w)`` so the picture covers the input, resized to
     ``round(w r) x round(h r)``, and its centre kept (``round(d / 2)`` pixels cut before);

   bilinear: OpenCV's ``INTER_LINEAR`` where OpenCV is installed (``sbrs[video]``; the resampling ultralytics
   uses), else Pillow's bilinear filter (``sbrs[images]``), which averages over more source pixels when it
   shrinks a picture, so the values differ by a few levels between the two;
3. values: a float input gets ``(pixel * scale - mean) / std`` per channel; an integer input (``uint8``) gets
   the pixels as they are (``scale``, ``mean`` and ``std`` are refused for it when the app file gives them);
4. layout ``NCHW`` or ``NHWC`` as the input's shape says, with its batch dimension of 1, in the input's dtype.

The default (no ``preprocess``) is what sbrs did before it existed: stretch, RGB, ``scale`` 1/255 and
ImageNet's mean and standard deviation for 3 channels, plain ``[0, 1]`` for one.

Each tensor comes with its ``Geometry``: where the picture's pixels landed in the input, so that boxes found in
the input map back to the picture (``Geometry.boxes_to_source``: minus the padding, divided by the scale, as
ultralytics' ``scale_boxes`` does).

The settings themselves (``Preprocess``, what ``input.preprocess`` says) are data of the app's configuration
(``sbrs.app.settings``); this module applies them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from sbrs.app.settings import DEFAULT_PREPROCESS
from sbrs.errors import InputError

if TYPE_CHECKING:
    from sbrs.app.settings import InputSpec, Preprocess

#: ITU-R BT.601 luma weights of R, G, B: a colour picture as gray where OpenCV is missing (OpenCV's own
#: ``COLOR_*2GRAY`` uses the same weights, in fixed point).
LUMA = (0.299, 0.587, 0.114)


@dataclass(frozen=True)
class Geometry:
    """Where a picture of ``source`` (height, width) pixels landed in the model's input: an input pixel is
    ``source pixel * scale + offset`` per axis (``scale`` and ``offset`` as (x, y))."""

    source: tuple[int, int]
    scale: tuple[float, float]
    offset: tuple[float, float]

    def boxes_to_source(self, boxes: np.ndarray) -> np.ndarray:
        """``[n, 4]`` boxes ``x1, y1, x2, y2`` in the input's pixels → the picture's, clipped to it (float32)."""
        values = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        offset = np.array([*self.offset, *self.offset], np.float64)
        scale = np.array([*self.scale, *self.scale], np.float64)
        height, width = self.source
        mapped = np.clip((values - offset) / scale, 0.0, np.array([width, height, width, height], np.float64))
        return mapped.astype(np.float32)


def image_layout(spec: InputSpec, *, field: str) -> tuple[str, int, int, int]:
    """(``"NCHW"`` or ``"NHWC"``, channels, height, width) of an image input, or an ``InputError``."""
    shape = tuple(spec.shape)
    if len(shape) == 4 and shape[0] == 1 and shape[1] in (1, 3):
        return "NCHW", shape[1], shape[2], shape[3]
    if len(shape) == 4 and shape[0] == 1 and shape[3] in (1, 3):
        return "NHWC", shape[3], shape[1], shape[2]
    raise InputError(f"pictures need an input of shape [1, C, H, W] or [1, H, W, C] with C 1 or 3, "
                     f"the app's is {list(shape)}", field=field)


def optional_cv2() -> ModuleType | None:
    """OpenCV's module where it is installed (``sbrs[video]``), else None."""
    try:
        import cv2
    except ImportError:
        return None
    return cv2


def resampler() -> str:
    """Which library resizes pictures here: ``opencv X.Y.Z`` or ``pillow X.Y.Z`` (a derived scenario's cache key
    records it: it makes the calibration frames); ``none`` without either."""
    cv2 = optional_cv2()
    if cv2 is not None:
        return f"opencv {cv2.__version__}"
    try:
        import PIL
    except ImportError:
        return "none"
    return f"pillow {PIL.__version__}"


class Preprocessor:
    """Pictures → input tensors for ``spec`` (module docstring); ``field`` is what its errors name."""

    def __init__(self, spec: InputSpec, *, field: str = "input.preprocess") -> None:
        self.spec = spec
        self.settings: Preprocess = getattr(spec, "preprocess", DEFAULT_PREPROCESS)
        self.layout, self.channels, self.height, self.width = image_layout(spec, field=field)
        self.dtype = np.dtype(spec.dtype)
        self.floating = bool(np.issubdtype(self.dtype, np.floating))
        channels = self.channels
        # (pixel * scale - mean) / std, in float32 as written, channel by channel (broadcast over H x W x C)
        self._scale = np.float32(self.settings.scale)
        self._mean = np.array(self.settings.means(channels), np.float32)
        self._std = np.array(self.settings.stds(channels), np.float32)

    def __call__(self, picture: np.ndarray, order: str = "BGR") -> tuple[np.ndarray, Geometry]:
        """The input tensor of ``picture`` (``H x W x 3`` uint8 in ``order``, or ``H x W`` gray) and its
        ``Geometry``."""
        image = np.asarray(picture)
        if self.channels == 3 and image.ndim == 3 and image.shape[2] == 3:
            # resized first, then the channels reordered: a reversed view of a whole camera frame would make
            # OpenCV copy it before resizing (27 ms against 0.8 ms for 1280x720, measured); the padding is grey
            resized, geometry = self.fit(self.colour(image, self.settings.colors))
            return self.tensor(self.colour(resized, order)), geometry
        resized, geometry = self.fit(self.colour(image, order))
        return self.tensor(resized), geometry

    def colour(self, picture: np.ndarray, order: str) -> np.ndarray:
        """``picture`` as ``H x W x C`` uint8 with the input's channels, in the app's colour order."""
        image = np.asarray(picture)
        if image.dtype != np.uint8:
            raise InputError(f"a picture of {image.dtype} values; pictures are 8-bit (uint8)", field="input")
        if image.ndim == 3 and image.shape[2] == 1:
            image = image[:, :, 0]
        if image.ndim == 2:
            return image[:, :, None] if self.channels == 1 else np.repeat(image[:, :, None], 3, axis=2)
        if image.ndim != 3 or image.shape[2] != 3:
            raise InputError(f"a picture of shape {list(image.shape)}; expected H x W x 3 or H x W", field="input")
        if self.channels == 1:
            return _gray(image, order)[:, :, None]
        return image if order == self.settings.colors else image[:, :, ::-1]

    def fit(self, pixels: np.ndarray) -> tuple[np.ndarray, Geometry]:
        """``pixels`` (``h x w x C``) resized to the input's ``H x W`` as ``resize`` says, and the geometry."""
        height, width = self.height, self.width
        h, w = int(pixels.shape[0]), int(pixels.shape[1])
        mode = self.settings.resize
        if mode == "stretch":
            return _resize(pixels, width, height), Geometry((h, w), (width / w, height / h), (0.0, 0.0))
        if mode == "letterbox":  # ultralytics' LetterBox, auto=False, scaleup=True, center=True
            ratio = min(height / h, width / w)
            new_w, new_h = round(w * ratio), round(h * ratio)
            across, down = (width - new_w) / 2, (height - new_h) / 2
            top, bottom = round(down - 0.1), round(down + 0.1)
            left, right = round(across - 0.1), round(across + 0.1)
            resized = _resize(pixels, new_w, new_h) if (new_w, new_h) != (w, h) else pixels
            padded = np.full((height, width, pixels.shape[2]), self.settings.pad_value, np.uint8)
            padded[top:height - bottom, left:width - right] = resized
            return padded, Geometry((h, w), (ratio, ratio), (float(left), float(top)))
        ratio = max(height / h, width / w)  # center-crop
        new_w, new_h = max(width, round(w * ratio)), max(height, round(h * ratio))
        left, top = round((new_w - width) / 2), round((new_h - height) / 2)
        resized = _resize(pixels, new_w, new_h) if (new_w, new_h) != (w, h) else pixels
        cropped = np.ascontiguousarray(resized[top:top + height, left:left + width])
        return cropped, Geometry((h, w), (new_w / w, new_h / h), (-float(left), -float(top)))

    def tensor(self, pixels: np.ndarray) -> np.ndarray:
        """``H x W x C`` uint8 → the input tensor: values (float inputs), layout, batch dimension, dtype."""
        laid = pixels.transpose(2, 0, 1) if self.layout == "NCHW" else pixels  # laid out while still 8-bit
        tensor = np.empty((1, *laid.shape), np.float32 if self.floating else self.dtype)
        tensor[0] = laid
        if self.floating:  # in float32, as written, whatever float the input is
            per_channel = (slice(None), None, None) if self.layout == "NCHW" else (None, None, slice(None))
            tensor *= self._scale
            tensor -= self._mean[per_channel]
            tensor /= self._std[per_channel]
        return tensor if tensor.dtype == self.dtype else tensor.astype(self.dtype)


def _resize(pixels: np.ndarray, width: int, height: int) -> np.ndarray:
    """Bilinear resize of ``h x w x C`` uint8 to ``height x width x C`` (module docstring: OpenCV, else Pillow)."""
    cv2 = optional_cv2()
    if cv2 is not None:
        resized = cv2.resize(pixels, (width, height), interpolation=cv2.INTER_LINEAR)
        return resized.reshape(height, width, pixels.shape[2])
    try:
        from PIL import Image
    except ImportError:
        raise InputError("resizing pictures needs OpenCV (pip install \"sbrs[video]\") or Pillow (pip install "
                         "\"sbrs[images]\"), and neither is installed", field="input") from None
    channels = pixels.shape[2]
    image = Image.fromarray(pixels[:, :, 0] if channels == 1 else pixels)
    resized = np.asarray(image.resize((width, height), Image.Resampling.BILINEAR))
    return resized.reshape(height, width, channels)


def _gray(image: np.ndarray, order: str) -> np.ndarray:
    """An ``H x W x 3`` uint8 picture in ``order`` as ``H x W`` gray (OpenCV's conversion where installed)."""
    cv2 = optional_cv2()
    if cv2 is not None:
        return cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_BGR2GRAY if order == "BGR" else cv2.COLOR_RGB2GRAY)
    weights = np.array(LUMA if order == "RGB" else LUMA[::-1], np.float64)
    return np.clip(np.rint(image.astype(np.float64) @ weights), 0, 255).astype(np.uint8)
