"""Derived scenarios end to end: an app of a zoo MobileNetV2 and its int8-static and fp16 forms (``from:`` +
``quantize:``) builds with ``sbrs build``, runs through ``sbrs.runtime_for`` from its build, each scenario equals
plain ONNX Runtime running that scenario's own (for a derived one: the cached, derived) model file, and SBRS-TP
switches between fp32 and int8 lose no frame."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from sbrs.app import App, load_app
from sbrs.cli import main
from sbrs.model import params_bytes
from sbrs.runtime import runtime_for
from sbrs.runtime.engine import Runtime
from tests.calibration_images import write_image_app
from tests.conftest import calibration_frame, write_derived_app
from tests.runtime.conftest import References, assert_equivalent

# one worker runs this module: its module-scoped builds are made once, not once on each xdist worker
pytestmark = pytest.mark.xdist_group("derived-scenarios")

SCENARIOS = ("accurate", "fast-int8", "half")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = write_derived_app(tmp_path_factory.mktemp("derived"), frames=4, seed=1000)
    assert main(["build", str(path), "--cost", "analytic"]) == 0
    return path


@pytest.fixture(scope="module")
def app(built: Path) -> App:
    return load_app(built)


@pytest.fixture(scope="module")
def refs(app: App) -> References:
    return References(app)  # each scenario's own file: the derived ones' are the cached models


@pytest.fixture(scope="module")
def runtime(built: Path) -> Iterator[Runtime]:
    with runtime_for(built, transition="sbrs-tp") as runtime:
        yield runtime


def _frames(count: int, start: int = 0) -> list[np.ndarray]:
    """Frames like the calibration frames (smooth, normalised), not the calibration frames themselves."""
    return [calibration_frame(5000 + start + index) for index in range(count)]


def test_the_build_holds_every_scenario(built: Path, app: App, runtime: Runtime) -> None:
    assert tuple(runtime.scenarios) == SCENARIOS
    assert app.config.scenario("fast-int8").model_kind == "derived"
    assert Path(app.config.scenario("fast-int8").model_path).is_file()
    assert runtime.execution == "units"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_scenario_equals_onnx_runtime_on_its_own_file(runtime: Runtime, refs: References, scenario: str) -> None:
    runtime.switch(scenario)
    for index, frame in enumerate(_frames(3)):
        got = runtime.infer(frame)
        want = refs.outputs(scenario, frame)
        assert_equivalent(got, want, f"{scenario} frame {index}")
        for value in got.values():
            assert value.shape == (1, 10) and np.isfinite(value).all()


def test_int8_parameters_are_about_a_quarter_of_fp32(app: App) -> None:
    fp32, int8, fp16 = (params_bytes([app.models[name]]) for name in SCENARIOS)
    # int8 weights, plus float scales, int32 biases and zero points per channel, and the BatchNormalization
    # that quant_pre_process folds away: about a quarter of float32's bytes (0.29 here)
    assert 0.2 * fp32 < int8 < 0.35 * fp32, (fp32, int8)
    assert 0.45 * fp32 < fp16 < 0.55 * fp32, (fp32, fp16)


def test_top1_agreement_with_fp32_is_logged(runtime: Runtime, caplog: pytest.LogCaptureFixture) -> None:
    """Logged, not asserted (pytest shows the log with a failure, ``--log-cli-level=INFO`` always): the weights
    are random, so agreement says nothing about a trained model."""
    frames = _frames(8, start=100)
    top1: dict[str, list[int]] = {}
    for scenario in SCENARIOS:
        runtime.switch(scenario)
        outputs = [next(iter(runtime.infer(frame).values())) for frame in frames]
        assert all(o.shape == (1, 10) and np.isfinite(o).all() for o in outputs)
        top1[scenario] = [int(np.argmax(o)) for o in outputs]
    with caplog.at_level(logging.INFO, logger=__name__):
        for scenario in SCENARIOS[1:]:
            agree = sum(a == b for a, b in zip(top1["accurate"], top1[scenario], strict=True))
            logging.getLogger(__name__).info("%s: top-1 agreement with fp32 on %d frames: %d/%d", scenario,
                                             len(frames), agree, len(frames))
    assert len(caplog.records) == len(SCENARIOS) - 1


@pytest.mark.parametrize(("old", "new"), [("accurate", "fast-int8"), ("fast-int8", "accurate"),
                                          ("half", "fast-int8"), ("fast-int8", "half")])
def test_sbrs_tp_switches_between_precisions_at_every_step(runtime: Runtime, refs: References, old: str,
                                                          new: str) -> None:
    """A switch request at each step of the old scenario's frame: the frame in flight finishes on the old
    scenario, the next one runs on the new, each equal to its scenario's own file."""
    frames = _frames(2, start=200)
    for step in range(1, len(runtime.plan.sequences[old]) + 1):
        runtime.switch(old)
        runtime.infer(frames[1])
        results = list(runtime.process_with_hooks(frames, order="stream", inject=(step, new)))
        assert [(r.index, r.scenario) for r in results] == [(0, old), (1, new)], step
        for result, frame in zip(results, frames, strict=True):
            assert_equivalent(result.outputs, refs.outputs(result.scenario, frame), f"{old}->{new} at step {step}")


def test_switches_while_frames_flow_lose_no_frame(runtime: Runtime, refs: References) -> None:
    frames = _frames(10, start=300)
    plan = {2: "fast-int8", 4: "accurate", 5: "fast-int8", 7: "half", 8: "accurate"}
    runtime.switch("accurate")

    def source() -> Iterator[np.ndarray]:
        for index, frame in enumerate(frames):
            if index in plan:
                runtime.switch(plan[index])
            yield frame

    results = sorted(runtime.process(source()), key=lambda r: r.index)
    assert [r.index for r in results] == list(range(len(frames)))  # each frame once
    assert {r.scenario for r in results} == set(SCENARIOS)
    for result in results:
        assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]),
                          f"frame {result.index} on {result.scenario}")


@pytest.fixture(scope="module")
def layered(app: App) -> Iterator[Runtime]:
    """One execution unit per layer (compiled from the models in memory): frames of many steps, so that a switch
    request lands inside the int8 frame too (the built app's frames are one step each: too little work
    to cut, ``sbrs.compile.units.MIN_SWITCH_STEP_WORK``)."""
    with runtime_for(app, use_build=False, granularity="layer", transition="sbrs-tp") as runtime:
        yield runtime


# (not fp16 here: at granularity layer each float16 layer is a session of its own, and ONNX Runtime's CPU
# provider computes float16 in float32 inside a session, so a boundary at every layer rounds, 4e-4 off the file)
@pytest.mark.parametrize(("old", "new"), [("accurate", "fast-int8"), ("fast-int8", "accurate")])
def test_sbrs_tp_switches_mid_frame_between_precisions(layered: Runtime, refs: References, old: str,
                                                       new: str) -> None:
    frames = _frames(2, start=400)
    steps = len(layered.plan.sequences[old])
    assert steps > 10
    for step in sorted({*range(1, steps + 1, max(1, steps // 8)), steps}):
        layered.switch(old)
        layered.infer(frames[1])
        results = list(layered.process_with_hooks(frames, order="stream", inject=(step, new)))
        assert [(r.index, r.scenario) for r in results] == [(0, old), (1, new)], step
        for result, frame in zip(results, frames, strict=True):
            assert_equivalent(result.outputs, refs.outputs(result.scenario, frame), f"{old}->{new} at step {step}")


def test_an_int8_scenario_calibrated_on_images_equals_onnx_runtime(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``quantize.calibration`` naming a folder of images, the folder ``sbrs run --input`` runs on: the app
    builds, runs on those images, and its int8 scenario equals ONNX Runtime running the cached, derived file."""
    from sbrs.run.frames import open_source

    path = write_image_app(tmp_path, images=3, seed=1100)
    assert main(["build", str(path), "--cost", "analytic"]) == 0
    app = load_app(path)
    fast = app.config.scenario("fast-int8")
    assert fast.model_kind == "derived" and fast.calibration == str((tmp_path / "frames").resolve())
    refs = References(app)
    images = list(open_source(str(tmp_path / "frames"), app.config.input))
    with runtime_for(path) as runtime:
        runtime.switch("fast-int8")
        for index, frame in enumerate([*images, *_frames(2, start=600)]):
            got = runtime.infer(frame)
            assert_equivalent(got, refs.outputs("fast-int8", frame), f"fast-int8 frame {index}")
            assert all(value.shape == (1, 10) and np.isfinite(value).all() for value in got.values())
    capsys.readouterr()
    assert main(["run", str(path), "--no-socket", "--input", str(tmp_path / "frames")]) == 0
    assert "3 frames" in capsys.readouterr().err
