"""Small seeded images for the tests of image folders as calibration frames (``quantize.calibration``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import write_derived_app


def write_images(folder: Path, count: int, seed: int = 0, size: tuple[int, int] = (80, 60)) -> list[Path]:
    """``count`` PNG images of ``size`` (width, height) in ``folder``, ``000.png`` on: smooth colours, like
    photographs more than noise, seeded; their paths."""
    pytest.importorskip("PIL")
    from PIL import Image

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8))
        paths.append(folder / f"{index:03d}.png")
        coarse.resize(size, Image.Resampling.BILINEAR).save(paths[-1])
    return paths


def write_image_app(folder: Path, images: int = 3, seed: int = 0) -> Path:
    """``write_derived_app`` with ``images`` PNG images (``write_images``) as its calibration folder ``frames``;
    the app file's path."""
    path = write_derived_app(folder, frames=0)
    write_images(folder / "frames", images, seed)
    return path
