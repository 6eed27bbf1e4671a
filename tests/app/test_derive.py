"""Scenarios derived at another precision (``from:`` + ``quantize:``, sbrs/app/derive.py): what loads, the cache
(one quantization per distinct input), calibration from a folder or synthetic frames with a warning, and a
one-line error with exit status 2 for each bad declaration."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import sbrs.model.precision as precision
from sbrs.app import load_app, load_app_config
from sbrs.app.derive import SYNTHETIC_FRAMES
from sbrs.cli import main
from tests.calibration_images import write_image_app, write_images
from tests.conftest import assert_one_line_error, calibration_frame, write_derived_app


class Counter:
    """Counts the calls of the quantizer and the converter (each then runs as usual)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        for name in ("quantize_int8_static", "convert_fp16"):
            original = getattr(precision, name)
            monkeypatch.setattr(precision, name, self._counting(name, original))

    def _counting(self, name, original):
        def call(*args, **kwargs):
            self.calls.append(name)
            return original(*args, **kwargs)

        return call


def test_derived_scenarios_load_with_their_source_and_mode(tmp_path: Path) -> None:
    app = load_app(write_derived_app(tmp_path))
    config = app.config
    accurate, fast, half = (config.scenario(name) for name in ("accurate", "fast-int8", "half"))
    assert config.scenario_names == ("accurate", "fast-int8", "half")
    assert (fast.model_kind, fast.derived_from, fast.quantize) == ("derived", "accurate", "int8-static")
    assert fast.calibration == str((tmp_path / "frames").resolve())
    assert (half.derived_from, half.quantize, half.calibration) == ("accurate", "fp16", None)
    assert accurate.derived_from is None and accurate.quantize is None
    # the derived models live in the cache, named after the source's file and the mode
    cache = Path(os.environ["SBRS_CACHE_DIR"]) / "derived"
    for scenario in (fast, half):
        assert Path(scenario.model_path).parent == cache
        assert Path(scenario.model_path).name.startswith(f"{Path(accurate.model_path).stem}-{scenario.quantize}-")
    # each derived scenario keeps its own requirements and the source's post-processing
    assert fast.requirements.throughput == 0.7 and half.requirements.memory == 0.5
    assert fast.postprocess == accurate.postprocess
    # the int8 model is QDQ (one-byte tensors between units), the fp16 one keeps a float32 input and output
    ops = {layer.op for layer in app.models["fast-int8"].layers}
    assert any(layer.qdq is not None for layer in app.models["fast-int8"].layers), ops
    half_model = app.models["half"]
    assert half_model.tensors["input"].dtype == "float32"
    assert {half_model.tensors[name].dtype for name in half_model.graph_outputs} == {"float32"}


def test_a_second_load_reuses_the_cached_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counter = Counter(monkeypatch)
    path = write_derived_app(tmp_path, frames=3, seed=100)  # frames of its own: no other test quantized them
    first = load_app_config(path)
    assert "quantize_int8_static" in counter.calls  # (the fp16 model may come from an earlier test's load)
    calls = list(counter.calls)
    # the int8 model's file is this test's alone; the fp16 one's may be written by another test's load at the same
    # moment on another worker (the same model, the same name: each writes it whole and replaces it)
    stamp = os.stat(first.scenario("fast-int8").model_path).st_mtime_ns
    second = load_app_config(path)
    assert counter.calls == calls  # no second derivation
    for name in ("fast-int8", "half"):
        assert second.scenario(name).model_path == first.scenario(name).model_path
    assert os.stat(second.scenario("fast-int8").model_path).st_mtime_ns == stamp


def test_changed_calibration_frames_quantize_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_derived_app(tmp_path, frames=2, seed=200)
    before = load_app_config(path).scenario("fast-int8").model_path
    counter = Counter(monkeypatch)
    np.save(tmp_path / "frames" / "001.npy", calibration_frame(99))  # changed content, same name
    changed = load_app_config(path)
    assert counter.calls == ["quantize_int8_static"]  # the fp16 model does not depend on the frames
    assert changed.scenario("fast-int8").model_path != before
    np.save(tmp_path / "frames" / "002.npy", calibration_frame(7))  # a frame added
    added = load_app_config(path).scenario("fast-int8").model_path
    assert added not in (before, changed.scenario("fast-int8").model_path)
    assert counter.calls == ["quantize_int8_static"] * 2


def spy_on_calibration(monkeypatch: pytest.MonkeyPatch) -> list[list[np.ndarray]]:
    """The frames each int8 quantization is given, one list per call (the quantizer still runs)."""
    seen: list[list[np.ndarray]] = []
    original = precision.quantize_int8_static

    def spy(source: Path, frames):
        seen.append(list(frames))
        return original(source, seen[-1])

    monkeypatch.setattr(precision, "quantize_int8_static", spy)
    return seen


def test_calibration_frames_come_from_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = spy_on_calibration(monkeypatch)
    path = write_derived_app(tmp_path, frames=3, seed=300)
    (tmp_path / "frames" / "notes.txt").write_text("not a frame")  # only .npy files are frames
    load_app_config(path)
    assert len(seen) == 1 and len(seen[0]) == 3
    for index, frame in enumerate(seen[0]):  # in name order
        np.testing.assert_array_equal(frame, calibration_frame(300 + index))


def test_calibration_frames_may_be_images_read_as_sbrs_run_reads_them(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder of images (no .npy file): every image, in name order, resized and normalised as ``sbrs run
    --input`` feeds it (``sbrs.run.frames.open_source``); the cache key holds each image."""
    from sbrs.app.config import InputSpec
    from sbrs.run.frames import open_source

    seen = spy_on_calibration(monkeypatch)
    path = write_image_app(tmp_path, images=3, seed=500)
    (tmp_path / "frames" / "notes.txt").write_text("not a frame")
    config = load_app_config(path)
    assert config.scenario("fast-int8").calibration == str((tmp_path / "frames").resolve())
    want = list(open_source(str(tmp_path / "frames"), InputSpec("input", (1, 3, 64, 64), "float32")))
    assert len(seen) == 1 and len(seen[0]) == len(want) == 3
    for got, frame in zip(seen[0], want, strict=True):
        assert got.shape == (1, 3, 64, 64) and got.dtype == np.float32
        np.testing.assert_array_equal(got, frame)
    assert load_app_config(path).scenario("fast-int8").model_path == config.scenario("fast-int8").model_path
    assert len(seen) == 1  # a second load reuses the model
    write_images(tmp_path / "frames", 1, seed=501)  # 000.png changed
    assert load_app_config(path).scenario("fast-int8").model_path != config.scenario("fast-int8").model_path
    assert len(seen) == 2


def test_an_image_folder_without_pillow_is_sbrs_runs_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from sbrs.app.config import InputSpec
    from sbrs.errors import InputError
    from sbrs.run.frames import open_source

    path = write_image_app(tmp_path, images=1)
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL raises ImportError
    with pytest.raises(InputError) as run_error:
        open_source(str(tmp_path / "frames"), InputSpec("input", (1, 3, 64, 64), "float32"))
    assert "Pillow" in run_error.value.detail
    assert main(["check", str(path)]) == 2
    assert_one_line_error(capsys.readouterr().err, f"scenarios[1].quantize.calibration: {run_error.value.detail}", 9)


def test_an_image_unreadable_when_the_quantizer_asks_for_it_names_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Checked at load, cut short before it is read: the quantizer's failure names the image, not the quantizer."""
    original = precision.quantize_int8_static

    def cut_then_quantize(source: Path, frames):
        (tmp_path / "frames" / "001.png").write_bytes(b"\x89PNG\r\n\x1a\n")
        return original(source, frames)

    monkeypatch.setattr(precision, "quantize_int8_static", cut_then_quantize)
    path = write_image_app(tmp_path, images=2, seed=600)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()[-1]  # after the progress line saying what is being derived
    assert err.startswith("sbrs: error: ") and "app.yaml:9: scenarios[1].quantize.calibration: frames/001.png: " \
        "not a readable image" in err, err


def test_without_calibration_synthetic_frames_and_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    original = precision.quantize_int8_static

    def spy(source: Path, frames):
        frames = list(frames)
        seen.append(len(frames))
        return original(source, frames)

    monkeypatch.setattr(precision, "quantize_int8_static", spy)
    monkeypatch.setenv("SBRS_CACHE_DIR", str(tmp_path / "cache"))  # a cache of its own: this load must quantize
    path = write_derived_app(tmp_path, frames=None)
    with caplog.at_level(logging.WARNING, logger="sbrs"):
        config = load_app_config(path)
    assert config.scenario("fast-int8").calibration is None
    assert seen == [SYNTHETIC_FRAMES]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert "\n" not in message and "synthetic" in message and "not representative" in message
    assert "fast-int8" in message and "quantize.calibration" in message and f"{path}:9" in message


def test_the_schema_takes_the_modes_the_model_stage_makes() -> None:
    from typing import get_args

    from sbrs.app.schema import QuantizeEntry

    assert get_args(QuantizeEntry.model_fields["mode"].annotation) == precision.MODES


def test_from_may_name_a_later_scenario_and_a_scenario_file_may_derive(tmp_path: Path) -> None:
    write_derived_app(tmp_path, frames=2)
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "int8.yaml").write_text(
        "name: int8\nfrom: accurate\nquantize: {mode: int8-static, calibration: ../frames}\n")
    (tmp_path / "later.yaml").write_text(
        "name: later\ninput: {shape: [1, 3, 64, 64]}\nscenarios:\n"
        "  - {name: half, from: accurate, quantize: {mode: fp16}}\n"
        "  - file: scenarios/int8.yaml\n"
        "  - {name: accurate, zoo: {name: mobilenet_v2, width: 0.35, resolution: 64, classes: 10}}\n")
    config = load_app_config(tmp_path / "later.yaml")
    assert config.scenario_names == ("half", "int8", "accurate")
    assert config.scenario("int8").calibration == str((tmp_path / "frames").resolve())
    assert config.scenario("int8").defined_in.endswith("int8.yaml")


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def _bad_frame(folder: Path) -> None:
    np.save(folder / "frames" / "001.npy", np.zeros((1, 3, 32, 32), np.float32))


def _no_frames(folder: Path) -> None:
    for frame in (folder / "frames").iterdir():
        frame.unlink()
    (folder / "frames" / "README.txt").write_text("neither a .npy file nor an image")


def _corrupt_image(folder: Path) -> None:
    """An image folder (no .npy file left) whose second image is cut short."""
    _no_frames(folder)
    good, cut = write_images(folder / "frames", 2)
    cut.write_bytes(good.read_bytes()[:100])


# (description, edit of the app folder, expected message fragment, expected line or None)
BAD_CASES = [
    ("from an unknown scenario", lambda d: _edit(d / "app.yaml", "from: accurate\n    quantize: {mode: fp16}",
                                                 "from: acurate\n    quantize: {mode: fp16}"),
     "scenarios[2].from: unknown scenario 'acurate' (scenarios: accurate, fast-int8, half)", 12),
    ("from a derived scenario", lambda d: _edit(d / "app.yaml", "from: accurate\n    quantize: {mode: fp16}",
                                                "from: fast-int8\n    quantize: {mode: fp16}"),
     "scenarios[2].from: scenario 'fast-int8' is itself derived (from: accurate)", 12),
    ("from itself", lambda d: _edit(d / "app.yaml", "from: accurate\n    quantize: {mode: fp16}",
                                    "from: half\n    quantize: {mode: fp16}"),
     "scenarios[2].from: scenario 'half' is itself derived", 12),
    ("quantize without from", lambda d: _edit(d / "app.yaml", "    from: accurate\n    quantize: {mode: fp16}",
                                              "    quantize: {mode: fp16}"),
     "scenarios[2].quantize: 'from' is missing", 12),
    ("from without quantize", lambda d: _edit(d / "app.yaml", "    quantize: {mode: fp16}\n", ""),
     "scenarios[2].from: 'quantize' is missing", 12),
    ("from beside a model", lambda d: _edit(d / "app.yaml", "    from: accurate\n    quantize: {mode: fp16}",
                                            "    from: accurate\n    zoo: {name: resnet18}\n    quantize: {mode: fp16}"),
     "scenarios[2]: give exactly one of 'model' (ONNX path), 'layers' (inline list), 'zoo' or 'from'", 11),
    ("unknown mode", lambda d: _edit(d / "app.yaml", "mode: fp16", "mode: int4"),
     "scenarios[2].quantize.mode: Input should be 'int8-static' or 'fp16'", 13),
    ("unknown quantize key", lambda d: _edit(d / "app.yaml", "mode: fp16", "mode: fp16, bits: 8"),
     "scenarios[2].quantize.bits: unknown key (allowed: calibration, mode)", 13),
    ("calibration with fp16", lambda d: _edit(d / "app.yaml", "mode: fp16", "mode: fp16, calibration: frames"),
     "scenarios[2].quantize: 'calibration' applies to mode int8-static only", 13),
    ("missing calibration folder", lambda d: _edit(d / "app.yaml", "calibration: frames", "calibration: framez"),
     "scenarios[1].quantize.calibration: no such folder of calibration frames: framez", 9),
    ("no frames in the folder", _no_frames,
     "scenarios[1].quantize.calibration: frames: the folder holds no .npy or image files (.png, .jpg, .jpeg, .bmp)",
     9),
    ("a frame of another shape", _bad_frame,
     "scenarios[1].quantize.calibration: frames/001.npy: shape [1, 3, 32, 32] does not fit the app's input "
     "[1, 3, 64, 64]", 9),
    ("a frame of another dtype", lambda d: np.save(d / "frames" / "000.npy", np.zeros((1, 3, 64, 64), np.complex64)),
     "scenarios[1].quantize.calibration: frames/000.npy: dtype complex64 does not fit the app's input dtype float32",
     9),
    ("not a .npy file", lambda d: (d / "frames" / "000.npy").write_text("garbage"),
     "scenarios[1].quantize.calibration: frames/000.npy: not a readable .npy array", 9),
    ("a corrupt image", _corrupt_image, "scenarios[1].quantize.calibration: frames/001.png: not a readable image", 9),
    ("a misspelt from", lambda d: _edit(d / "app.yaml", "    from: accurate\n    quantize: {mode: fp16}",
                                        "    form: accurate\n    quantize: {mode: fp16}"),
     "scenarios[2].form: unknown key (allowed: characteristics, from,", 12),
]


@pytest.mark.parametrize(("edit", "fragment", "line"), [case[1:] for case in BAD_CASES],
                         ids=[case[0] for case in BAD_CASES])
def test_bad_declarations_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], edit,
                                                  fragment: str, line: int | None) -> None:
    write_derived_app(tmp_path, frames=2)
    edit(tmp_path)
    status = main(["check", str(tmp_path / "app.yaml")])
    err = capsys.readouterr().err
    assert status == 2, err
    assert_one_line_error(err, fragment, line)


def test_unknown_scenario_keys_list_from_as_the_user_writes_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_derived_app(tmp_path, frames=2)
    _edit(tmp_path / "app.yaml", "    quantize: {mode: fp16}", "    quantize: {mode: fp16}\n    precision: 16")
    assert main(["check", str(tmp_path / "app.yaml")]) == 2
    err = capsys.readouterr().err
    assert "precision: unknown key (allowed: characteristics, from, input_size, layers, model, name, postprocess, quantize," in err
    assert "from_" not in err


def test_a_quantizer_failure_is_one_line_naming_the_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from onnxruntime import quantization

    def broken(*args, **kwargs):
        raise RuntimeError("no kernel for this op\nmore detail")

    monkeypatch.setattr(quantization, "quantize_static", broken)
    write_derived_app(tmp_path, frames=1, seed=400)
    assert main(["check", str(tmp_path / "app.yaml")]) == 2
    err = capsys.readouterr().err.splitlines()[-1]  # after the progress line saying what is being derived
    assert err.startswith("sbrs: error: "), err
    assert ("app.yaml:9: scenarios[1].quantize: onnxruntime.quantization could not quantize the model: "
            "no kernel for this op") in err, err
