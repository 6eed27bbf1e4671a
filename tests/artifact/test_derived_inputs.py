"""A build of an app with derived scenarios (``from:`` + ``quantize:``) depends on what their models were made
from: a calibration frame (a ``.npy`` file or an image) changed, added or removed, or a changed source model,
makes the build stale; a frame rewritten with the same content, or a file in the folder that is not a frame,
does not."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from sbrs.artifact.read import load_build
from sbrs.cli import main
from sbrs.errors import InputError
from sbrs.runtime import runtime_for
from tests.calibration_images import write_image_app, write_images
from tests.conftest import calibration_frame, write_derived_app

# one worker runs this module: its module-scoped builds are made once, not once on each xdist worker
pytestmark = pytest.mark.xdist_group("derived-inputs")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The derived app with its source as an ONNX file of its own (``model: accurate.onnx``), built."""
    from sbrs import zoo

    folder = tmp_path_factory.mktemp("derived-build")
    path = write_derived_app(folder, frames=3, seed=2000)
    zoo.export("mobilenet_v2", folder / "accurate.onnx", width=0.35, resolution=64, classes=10)
    text = path.read_text()
    path.write_text(text.replace("zoo: {name: mobilenet_v2, width: 0.35, resolution: 64, classes: 10}",
                                 "model: accurate.onnx"))
    assert main(["build", str(path), "--cost", "analytic"]) == 0
    return folder


@pytest.fixture
def app_copy(built: Path, tmp_path: Path) -> Path:
    """A copy of the built app's folder (times kept: the copy's build is current), its app file's path."""
    shutil.copytree(built, tmp_path / "app")
    return tmp_path / "app" / "app.yaml"


def _changed_frame(folder: Path) -> None:
    np.save(folder / "frames" / "001.npy", calibration_frame(1))


def _added_frame(folder: Path) -> None:
    np.save(folder / "frames" / "100.npy", calibration_frame(1))


def _removed_frame(folder: Path) -> None:
    (folder / "frames" / "002.npy").unlink()


def _changed_source(folder: Path) -> None:
    model = onnx.load(folder / "accurate.onnx")
    weight = model.graph.initializer[0]
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 2, weight.name))
    onnx.save(model, folder / "accurate.onnx")


CHANGES = [
    (_changed_frame, r"stale: frames/001\.npy changed since the build"),
    (_added_frame, r"stale: frames has other \*\.npy files than at the build"),
    (_removed_frame, r"stale: frames/002\.npy is missing"),
    (_changed_source, r"stale: accurate\.onnx changed since the build"),
]
CHANGE_IDS = ["frame changed", "frame added", "frame removed", "source changed"]


@pytest.mark.parametrize(("change", "why"), CHANGES, ids=CHANGE_IDS)
def test_what_a_derived_model_is_made_from_makes_the_build_stale(app_copy: Path, change: Callable[[Path], None],
                                                                 why: str) -> None:
    assert load_build(app_copy).config.scenario("fast-int8").quantize == "int8-static"
    change(app_copy.parent)
    with pytest.raises(InputError, match=why):
        load_build(app_copy)


# a build again after each change (3-4 s each: the int8 scenario is quantized again); a changed frame and a
# changed source keep both inputs of the quantizer in the fast tier
@pytest.mark.parametrize(("change", "why"), [
    case if name in ("frame changed", "source changed") else pytest.param(*case, marks=pytest.mark.slow)
    for case, name in zip(CHANGES, CHANGE_IDS, strict=True)], ids=CHANGE_IDS)
def test_a_stale_build_is_built_again_from_the_new_inputs(app_copy: Path, change: Callable[[Path], None],
                                                          why: str) -> None:
    before = load_build(app_copy).config.scenario("fast-int8").model_path
    change(app_copy.parent)
    assert main(["build", str(app_copy), "--cost", "analytic"]) == 0
    scenario = load_build(app_copy).config.scenario("fast-int8")  # current again
    assert scenario.derived_from == "accurate" and scenario.model_path != before  # quantized from the new inputs


def test_same_frames_or_other_files_keep_the_build_current(app_copy: Path) -> None:
    folder = app_copy.parent
    np.save(folder / "frames" / "000.npy", calibration_frame(2000))  # the same content, a new mtime
    (folder / "frames" / "README.txt").write_text("frames of the parking lot camera")
    build = load_build(app_copy)
    assert Path(build.config.scenario("fast-int8").calibration).name == "frames"  # where it was built: a copy
    with runtime_for(app_copy) as runtime:  # opened from the build, as sbrs run opens it
        assert runtime.scenarios == ("accurate", "fast-int8", "half")
        runtime.switch("fast-int8")
        output = runtime.infer(calibration_frame(3))["output"]
        assert output.shape == (1, 10) and np.isfinite(output).all()


def test_a_loaded_app_runs_from_its_moved_build(app_copy: Path) -> None:
    """``runtime_for(app)`` uses the build made from the same configuration: the calibration folder, like the
    other paths, is compared by name (the copy's build was made in another folder)."""
    from sbrs.app import load_app
    from sbrs.runtime.open import _same_config

    assert _same_config(load_build(app_copy).config, load_app(app_copy).config)


@pytest.fixture(scope="module")
def built_on_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The derived app calibrated on a folder of images (``frames/000.png`` ...), built."""
    folder = tmp_path_factory.mktemp("derived-images-build")
    path = write_image_app(folder, images=3, seed=2100)
    assert main(["build", str(path), "--cost", "analytic"]) == 0
    return folder


def _changed_image(folder: Path) -> None:
    write_images(folder / "frames", 2, seed=2101)  # 000.png and 001.png rewritten, other pixels


def _added_image(folder: Path) -> None:
    shutil.copy(folder / "frames" / "000.png", folder / "frames" / "100.PNG")


def _added_jpeg(folder: Path) -> None:
    from PIL import Image

    Image.open(folder / "frames" / "000.png").convert("RGB").save(folder / "frames" / "100.jpg")


def _removed_image(folder: Path) -> None:
    (folder / "frames" / "002.png").unlink()


@pytest.mark.parametrize(("change", "why"), [
    (_changed_image, r"stale: frames/000\.png changed since the build"),
    pytest.param(_added_image, r"stale: frames has other \*\.\[pP\]\[nN\]\[gG\] files than at the build",
                 marks=pytest.mark.slow),  # jpeg added and frame added keep the folder's listing in the fast tier
    (_added_jpeg, r"stale: frames has other \*\.\[jJ\]\[pP\]\[gG\] files than at the build"),
    pytest.param(_removed_image, r"stale: frames/002\.png is missing", marks=pytest.mark.slow),  # as frame removed
], ids=["image changed", "image added", "jpeg added", "image removed"])
def test_calibration_images_make_the_build_stale(built_on_images: Path, tmp_path: Path,
                                                 change: Callable[[Path], None], why: str) -> None:
    shutil.copytree(built_on_images, tmp_path / "app")
    app = tmp_path / "app" / "app.yaml"
    before = load_build(app).config.scenario("fast-int8").model_path
    (tmp_path / "app" / "frames" / "README.txt").write_text("not a frame: the build stays current")
    assert load_build(app).config.scenario("fast-int8").quantize == "int8-static"
    change(app.parent)
    with pytest.raises(InputError, match=why):
        load_build(app)
    if change is _changed_image:  # built again from the new images (as from new frames above, once here)
        assert main(["build", str(app), "--cost", "analytic"]) == 0
        assert load_build(app).config.scenario("fast-int8").model_path != before  # quantized on other frames
