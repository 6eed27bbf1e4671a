"""The folder reader of ``sbrs run --source DIR`` and of calibration images (``sbrs.app.frames``): pictures as
the app's pre-processing gets them, whatever mode or depth the image file has."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from sbrs.app.config import InputSpec
from sbrs.app.frames import folder_frames, image_pictures
from sbrs.errors import InputError

Image = pytest.importorskip("PIL.Image")


@pytest.mark.parametrize("channels", [3, 1])
def test_a_16_bit_grey_png_is_its_picture_not_white(tmp_path: Path, channels: int) -> None:
    """Pillow opens a 16-bit grey PNG as ``I;16`` and its ``convert`` clipped every value above 255, so such a
    picture came out white; it is the 8-bit picture of its high bytes, as OpenCV's ``imread`` reads it."""
    grey = np.random.default_rng(3).integers(0, 256, (24, 40), dtype=np.uint8)
    Image.fromarray(grey.astype(np.uint16) * 256 + 100).save(tmp_path / "a-16.png")  # high byte g, low 100
    Image.fromarray(grey).save(tmp_path / "b-8.png")
    pictures = [pixels for _, pixels in image_pictures(sorted(tmp_path.iterdir()), channels, field="--source")]
    expected = grey if channels == 1 else np.repeat(grey[:, :, None], 3, axis=2)
    for pixels in pictures:
        assert pixels.dtype == np.uint8
        np.testing.assert_array_equal(pixels, expected)


@pytest.mark.parametrize("suffix", [".jpg", ".bmp"])
def test_a_cut_image_is_refused_before_the_first_frame(tmp_path: Path, suffix: str) -> None:
    """A JPEG or BMP cut short passed the check (Pillow's ``verify`` reads neither's pixel data) and failed only when
    its turn came, after the frames before it had run; every image is checked before the first frame."""
    picture = np.random.default_rng(4).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    Image.fromarray(picture).save(tmp_path / "a.png")
    Image.fromarray(picture).save(tmp_path / f"b{suffix}")
    whole = (tmp_path / f"b{suffix}").read_bytes()
    (tmp_path / f"b{suffix}").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(InputError, match=rf"b\{suffix}: not a readable image"):
        image_pictures(sorted(tmp_path.iterdir()), 3, field="--source")


def test_a_float64_frame_beyond_float32_is_one_line_naming_the_range(tmp_path: Path) -> None:
    """1e300 is finite in the file and infinite as the float32 input: numpy's overflow warning went to stderr
    (two lines, a source line of sbrs' among them) and the error said the frame held infinite values."""
    np.save(tmp_path / "0.npy", np.full((1, 3, 4, 4), 1e300))
    spec = InputSpec("input", (1, 3, 4, 4), "float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match=r"0\.npy: the frame holds values beyond the range of the app's input "
                                             r"dtype float32"):
            list(folder_frames(tmp_path, spec, field="--source"))


def test_an_integer_frame_beyond_a_uint8_input_is_one_line_not_wrapped(tmp_path: Path) -> None:
    """uint16 frames cast to a uint8 input (numpy's "same kind"): 300 became 44 without a word."""
    spec = InputSpec("input", (1, 3, 4, 4), "uint8")
    np.save(tmp_path / "0.npy", np.full((1, 3, 4, 4), 255, np.uint16))  # fits: taken as it is
    assert [int(frame.max()) for frame in folder_frames(tmp_path, spec, field="--source")] == [255]
    np.save(tmp_path / "1.npy", np.full((1, 3, 4, 4), 300, np.uint16))
    with pytest.raises(InputError, match=r"1\.npy: the frame holds values beyond the range of the app's input dtype "
                                         r"uint8 \(0\.\.255\)"):
        list(folder_frames(tmp_path, spec, field="--source"))
