"""``input.preprocess``: pictures → input tensors, checked against references written here from the conventions
they follow (ultralytics' LetterBox and scale_boxes, ImageNet normalisation), on frames of odd sizes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from sbrs.app.config import InputSpec, load_app_config
from sbrs.app.preprocess import Geometry, Preprocessor
from sbrs.app.settings import DEFAULT_PREPROCESS, Preprocess, preprocess_from_dict
from sbrs.errors import InputError
from tests.conftest import assert_one_line_error

cv2 = pytest.importorskip("cv2")

ODD_SIZES = [(720, 1280), (517, 333), (333, 517), (640, 640), (100, 1000), (479, 641)]


def picture(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A BGR uint8 picture with smooth colours and sharp edges (a bilinear resize changes it everywhere)."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (7, 9, 3), dtype=np.uint8)
    smooth = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_LINEAR)
    smooth[height // 3: height // 2, width // 4: width // 2] = (255, 0, 40)
    return smooth


def ultralytics_letterbox(image: np.ndarray, new_shape: tuple[int, int], pad: int = 114) -> np.ndarray:
    """The reference: ultralytics' LetterBox(new_shape, auto=False, scaleup=True, center=True), written from its
    formula (not from sbrs): r = min(H/h, W/w), unpadded size round(w r) x round(h r) by cv2.INTER_LINEAR,
    padding round(d/2 -/+ 0.1) with the value 114; then BGR -> RGB, HWC -> CHW, / 255."""
    shape = image.shape[:2]
    r = min(new_shape[0] / shape[0], new_shape[1] / shape[1])
    new_unpad = round(shape[1] * r), round(shape[0] * r)
    dw, dh = (new_shape[1] - new_unpad[0]) / 2, (new_shape[0] - new_unpad[1]) / 2
    if shape[::-1] != new_unpad:
        image = cv2.resize(image, new_unpad, interpolation=cv2.INTER_LINEAR)
    top, bottom = round(dh - 0.1), round(dh + 0.1)
    left, right = round(dw - 0.1), round(dw + 0.1)
    image = cv2.copyMakeBorder(image, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(pad, pad, pad))
    return image


def ultralytics_tensor(letterboxed: np.ndarray) -> np.ndarray:
    return (letterboxed[..., ::-1].transpose(2, 0, 1)[None].astype(np.float32) / 255.0)


def ultralytics_scale_boxes(model_shape: tuple[int, int], boxes: np.ndarray, source_shape: tuple[int, int]) -> np.ndarray:
    """ultralytics' ``scale_boxes`` (padding=True): minus the pad, divided by the gain, clipped to the source."""
    gain = min(model_shape[0] / source_shape[0], model_shape[1] / source_shape[1])
    pad_x = round((model_shape[1] - source_shape[1] * gain) / 2 - 0.1)
    pad_y = round((model_shape[0] - source_shape[0] * gain) / 2 - 0.1)
    out = boxes.astype(np.float64).copy()
    out[:, [0, 2]] -= pad_x
    out[:, [1, 3]] -= pad_y
    out /= gain
    out[:, [0, 2]] = out[:, [0, 2]].clip(0, source_shape[1])
    out[:, [1, 3]] = out[:, [1, 3]].clip(0, source_shape[0])
    return out


YOLO = Preprocess(resize="letterbox", pad_value=114, colors="RGB", scale=1 / 255, mean=(0.0, 0.0, 0.0),
                  std=(1.0, 1.0, 1.0))


@pytest.mark.parametrize("size", ODD_SIZES, ids=[f"{w}x{h}" for h, w in ODD_SIZES])
@pytest.mark.parametrize("model", [(640, 640), (320, 320), (384, 640)], ids=["640", "320", "384x640"])
def test_letterbox_equals_ultralytics(size: tuple[int, int], model: tuple[int, int]) -> None:
    image = picture(*size, seed=size[0])
    tensor, geometry = Preprocessor(InputSpec("images", (1, 3, *model), "float32", YOLO))(image, "BGR")
    reference = ultralytics_letterbox(image, model)
    assert tensor.shape == (1, 3, *model) and tensor.dtype == np.float32
    # the pixels themselves are equal (uint8, exactly), and the values within float32 rounding of x / 255
    np.testing.assert_array_equal(np.rint(tensor * 255).astype(np.uint8), reference[..., ::-1].transpose(2, 0, 1)[None])
    np.testing.assert_allclose(tensor, ultralytics_tensor(reference), rtol=0, atol=1e-7)
    # boxes found in the letterboxed input map back as ultralytics maps them
    rng = np.random.default_rng(1)
    corners = np.sort(rng.uniform(-20, max(model) + 20, (50, 2, 2)), axis=1).reshape(50, 4)[:, [0, 2, 1, 3]]
    np.testing.assert_allclose(geometry.boxes_to_source(corners), ultralytics_scale_boxes(model, corners, size),
                               rtol=1e-6, atol=1e-3)


def test_a_box_around_a_drawn_square_maps_back_onto_it() -> None:
    """End to end on one picture: the square drawn at known source pixels is found in the letterboxed input
    (its extent there) and maps back onto the source pixels it was drawn at."""
    image = np.zeros((720, 1280, 3), np.uint8)
    image[200:400, 300:700] = 255
    tensor, geometry = Preprocessor(InputSpec("images", (1, 3, 640, 640), "float32", YOLO))(image, "BGR")
    white = np.argwhere(tensor[0, 0] > 0.99)
    (y1, x1), (y2, x2) = white.min(axis=0), white.max(axis=0) + 1
    back = geometry.boxes_to_source(np.array([[x1, y1, x2, y2]], np.float64))[0]
    np.testing.assert_allclose(back, [300, 200, 700, 400], atol=2.0)


def imagenet_reference(image_rgb: np.ndarray, height: int, width: int) -> np.ndarray:
    resized = cv2.resize(image_rgb, (width, height), interpolation=cv2.INTER_LINEAR).astype(np.float32) / 255.0
    normalised = (resized - np.array([0.485, 0.456, 0.406], np.float32)) / np.array([0.229, 0.224, 0.225], np.float32)
    return normalised.transpose(2, 0, 1)[None]


@pytest.mark.parametrize("size", [(720, 1280), (333, 517)])
def test_the_default_stretches_and_normalises_with_imagenet(size: tuple[int, int]) -> None:
    image = picture(*size)
    tensor, geometry = Preprocessor(InputSpec("input", (1, 3, 224, 224), "float32"))(image, "BGR")
    np.testing.assert_allclose(tensor, imagenet_reference(image[..., ::-1], 224, 224), rtol=0, atol=2e-6)
    assert geometry == Geometry(size, (224 / size[1], 224 / size[0]), (0.0, 0.0))
    # an RGB picture (Pillow's) gives the same tensor as the BGR one (OpenCV's)
    np.testing.assert_array_equal(Preprocessor(InputSpec("input", (1, 3, 224, 224), "float32"))(
        np.ascontiguousarray(image[..., ::-1]), "RGB")[0], tensor)


def test_center_crop_keeps_the_middle() -> None:
    image = picture(517, 333)  # portrait: the width covers the input, the height is cut
    spec = InputSpec("input", (1, 3, 224, 224), "float32", Preprocess(resize="center-crop", mean=(0.0,), std=(1.0,)))
    tensor, geometry = Preprocessor(spec)(image, "BGR")
    ratio = 224 / 333
    new_h = round(517 * ratio)
    top = round((new_h - 224) / 2)
    reference = cv2.resize(image, (224, new_h), interpolation=cv2.INTER_LINEAR)[top:top + 224, :, ::-1]
    np.testing.assert_array_equal(np.rint(tensor[0].transpose(1, 2, 0) * 255).astype(np.uint8), reference)
    assert geometry.offset == (0.0, -top)
    corner = geometry.boxes_to_source(np.array([[0, 0, 224, 224]]))[0]
    np.testing.assert_allclose(corner, [0, top * 517 / new_h, 333, (top + 224) * 517 / new_h], atol=1e-3)


def test_bgr_nhwc_uint8_and_gray_inputs() -> None:
    image = picture(333, 517)
    bgr = Preprocess(resize="letterbox", colors="BGR", pad_value=0)
    tensor, _ = Preprocessor(InputSpec("x", (1, 320, 320, 3), "uint8", bgr))(image, "BGR")
    assert tensor.shape == (1, 320, 320, 3) and tensor.dtype == np.uint8
    np.testing.assert_array_equal(tensor[0], ultralytics_letterbox(image, (320, 320), pad=0))  # BGR, as read
    gray, _ = Preprocessor(InputSpec("x", (1, 1, 64, 64), "float32"))(image, "BGR")
    reference = cv2.resize(cv2.cvtColor(image, cv2.COLOR_BGR2GRAY), (64, 64), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_allclose(gray[0, 0], reference.astype(np.float32) / 255.0, rtol=0, atol=1e-7)


def test_mean_and_std_apply_per_channel() -> None:
    image = np.full((10, 10, 3), (10, 20, 30), np.uint8)  # BGR
    spec = InputSpec("x", (1, 3, 10, 10), "float32", Preprocess(scale=1.0, mean=(1.0, 2.0, 3.0), std=(2.0, 4.0, 8.0)))
    tensor, _ = Preprocessor(spec)(image, "BGR")
    np.testing.assert_allclose(tensor[0, :, 0, 0], [(30 - 1) / 2, (20 - 2) / 4, (10 - 3) / 8])


def test_without_opencv_pillow_resizes(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("PIL")
    image = picture(333, 517)
    with_cv2, _ = Preprocessor(InputSpec("x", (1, 3, 320, 320), "float32", YOLO))(image, "BGR")
    monkeypatch.setitem(sys.modules, "cv2", None)
    without, geometry = Preprocessor(InputSpec("x", (1, 3, 320, 320), "float32", YOLO))(image, "BGR")
    assert without.shape == with_cv2.shape and geometry.scale[0] == pytest.approx(320 / 517)
    assert np.abs(without - with_cv2).max() < 0.25  # another filter, the same picture


def test_a_build_manifest_round_trip() -> None:
    from dataclasses import asdict

    assert preprocess_from_dict(None) == DEFAULT_PREPROCESS
    assert preprocess_from_dict(asdict(YOLO)) == YOLO


def write_app(folder: Path, preprocess: str, shape: str = "[1, 3, 32, 32]", dtype: str = "float32") -> Path:
    app = folder / "app.yaml"
    app.write_text(f"""name: pre
input: {{name: input, shape: {shape}, dtype: {dtype}, preprocess: {preprocess}}}
scenarios:
  - name: a
    layers: [{{op: conv, out: 4, kernel: 3, pad: 1}}]
""")
    return app


def test_the_app_file_keys(tmp_path: Path) -> None:
    config = load_app_config(write_app(tmp_path, "{resize: letterbox, pad_value: 114, colors: RGB, "
                                                  "scale: 0.00392156862745098, mean: [0, 0, 0], std: [1, 1, 1]}"))
    assert config.input.preprocess == YOLO
    assert load_app_config(write_app(tmp_path, "{resize: center-crop}")).input.preprocess == Preprocess(
        resize="center-crop")
    one_value = load_app_config(write_app(tmp_path, "{mean: 0.5, std: 0.25}")).input.preprocess  # for every channel
    assert one_value is not None and (one_value.mean, one_value.std) == ((0.5,), (0.25,))


@pytest.mark.parametrize(("preprocess", "shape", "dtype", "message"), [
    ("{resize: squash}", "[1, 3, 32, 32]", "float32", "input.preprocess.resize: Input should be 'stretch', "
                                                       "'letterbox' or 'center-crop'"),
    ("{mean: [0, 0]}", "[1, 3, 32, 32]", "float32", "input.preprocess.mean: 2 values for an input of 3 channels"),
    ("{std: [0]}", "[1, 3, 32, 32]", "float32", "input.preprocess.std[0]: Input should be greater than 0"),
    ("{std: 0}", "[1, 3, 32, 32]", "float32", "input.preprocess.std: Input should be greater than 0 (got 0)"),
    ("{mean: true}", "[1, 3, 32, 32]", "float32", "input.preprocess.mean"),
    ("{scale: 1}", "[1, 3, 32, 32]", "uint8", "input.preprocess.scale: an input of uint8 takes the pixels as they are"),
    ("{resize: letterbox}", "[1, 32]", "float32", "input.preprocess: pictures need an input of shape"),
    ("{colours: RGB}", "[1, 3, 32, 32]", "float32", "input.preprocess.colours: unknown key"),
])
def test_bad_preprocess_is_one_line(tmp_path: Path, preprocess: str, shape: str, dtype: str, message: str) -> None:
    with pytest.raises(InputError) as error:
        load_app_config(write_app(tmp_path, preprocess, shape, dtype))
    assert message in str(error.value), str(error.value)
    assert_one_line_error(f"sbrs: error: {error.value}\n", message, None)
