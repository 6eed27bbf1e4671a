"""Post-processed values at run time: ``FrameResult.value`` (computed by the reader, never by the runtime),
``sbrs run``'s JSON lines, ``--save-outputs`` files against ONNX Runtime, and the user's own function (imported
once at start; its import errors stop the run in one line, its per-frame errors do not)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sbrs.app import App
from sbrs.cli import main
from sbrs.errors import InputError
from sbrs.outputs.postprocess import PostprocessError, top_k
from sbrs.outputs.save import OutputSaver, frame_file_name
from sbrs.outputs.spec import FunctionSpec, RawSpec, SpecLocation
from sbrs.run.frames import synthetic_frames
from sbrs.run.loop import FrameRecord, run_frames
from sbrs.runtime import runtime_for
from tests.conftest import REPO
from tests.runtime.conftest import References, assert_equivalent, random_frame

TINY_APP = """\
name: tinyout
input: {{name: input, shape: [1, 3, 32, 32], dtype: float32}}
initial: full
postprocess: {postprocess}
scenarios:
  - name: full
    seed: 1
    layers: [{{op: conv, out: 8, kernel: 3, pad: 1, act: relu}}, {{op: gap}}, {{op: flatten}}, {{op: fc, out: 10}}]
  - name: lite
    seed: 1
    layers: [{{op: gap}}, {{op: flatten}}, {{op: fc, out: 10}}]
"""

USER_MODULE = """\
import numpy as np

calls = 0


def summarise(outputs, frame):
    global calls
    calls += 1
    if frame.index == 1:
        raise ValueError("no luck on this frame")
    return {"best": int(np.argmax(outputs["output"])), "scenario": frame.scenario, "index": frame.index,
            "latency_positive": frame.latency_s > 0, "logits": outputs["output"][0, :2]}


def opaque(outputs, frame):
    return object()


not_a_function = 3
"""


def with_spec(app: App, spec: object) -> App:
    """``app`` with every scenario post-processed by ``spec``."""
    scenarios = tuple(replace(s, postprocess=spec) for s in app.config.scenarios)
    return replace(app, config=replace(app.config, scenarios=scenarios))


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An importable module of the user's (a fresh name per test, so imports start afresh)."""
    name = f"user_post_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_the_value_is_computed_when_read_not_by_the_runtime(load_example: Callable[[str], App],
                                                           user_module: str) -> None:
    app = with_spec(load_example("tiny"), FunctionSpec(f"{user_module}:summarise"))
    module = sys.modules.get(user_module)
    assert module is None  # imported by the runtime, when it starts
    frames = [random_frame(app, seed) for seed in range(3)]
    with runtime_for(app, use_build=False) as runtime:
        module = sys.modules[user_module]
        runtime.switch("skip")
        results = list(runtime.process(iter(frames)))
        assert module.calls == 0  # every result is out and nothing was post-processed yet
        value = results[0].value
        assert module.calls == 1 and results[0].value is value  # once, on the first read
        assert value["scenario"] == "skip" and value["index"] == 0 and value["latency_positive"]
        assert value["best"] == int(np.argmax(results[0].outputs["output"]))
        with pytest.raises(PostprocessError, match=r"failed on frame 1 \(skip\): ValueError: no luck"):
            _ = results[1].value
        assert results[2].value["index"] == 2


def test_top_5_is_the_default_value_and_infer_users_ask_the_runtime(load_example: Callable[[str], App]) -> None:
    app = load_example("tiny")
    frame = random_frame(app, 7)
    with runtime_for(app, use_build=False) as runtime:
        outputs = runtime.infer(frame)
        assert runtime.postprocess(outputs) == {"output": top_k(outputs["output"][0], 5)}
        result = next(runtime.process([frame]))
        assert result.value == {"output": top_k(result.outputs["output"][0], 5)}
        assert [index for index, _ in result.value["output"]] == list(np.argsort(-outputs["output"][0])[:5])
        with pytest.raises(InputError, match="unknown scenario 'nope'"):
            runtime.postprocess(outputs, "nope")


def test_raw_values_are_lists(load_example: Callable[[str], App]) -> None:
    app = with_spec(load_example("tiny"), RawSpec())
    frame = random_frame(app, 1)
    with runtime_for(app, use_build=False) as runtime:
        result = next(runtime.process([frame]))
        assert result.value == {"output": result.outputs["output"].tolist()}


def test_a_user_function_that_does_not_import_stops_the_start(load_example: Callable[[str], App], tmp_path: Path,
                                                              user_module: str) -> None:
    app = load_example("tiny")
    at = SpecLocation("app", "postprocess", 7)
    cases = {f"{user_module}_missing:f": "cannot import", f"{user_module}:absent": "has no 'absent'",
             f"{user_module}:not_a_function": "is a int, not a function"}
    for text, fragment in cases.items():
        with pytest.raises(InputError, match=fragment) as error:
            runtime_for(with_spec(app, FunctionSpec(text, at=at)), use_build=False)
        assert error.value.line == 7 and error.value.field == "postprocess" and "\n" not in str(error.value)
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    for module, fragment in (("exits", "SystemExit: 3"), ("broken", "SyntaxError")):
        with pytest.raises(InputError, match=fragment):
            runtime_for(with_spec(app, FunctionSpec(f"{module}:f", at=at)), use_build=False)


def test_saved_outputs_equal_onnx_runtime_across_switches(load_example: Callable[[str], App], tmp_path: Path) -> None:
    """Every file of a run that switches twice holds what ONNX Runtime gives on the scenario's own model."""
    app = load_example("tiny")
    references = References(app)
    saver = OutputSaver(tmp_path / "frames")
    frames = [random_frame(app, 40 + index) for index in range(7)]
    switches = {2: "skip", 5: "exit"}

    with runtime_for(app, use_build=False) as runtime:
        def feed() -> Iterator[np.ndarray]:
            for index, frame in enumerate(frames):
                if index in switches:
                    runtime.switch(switches[index])
                yield frame

        def save(record: FrameRecord) -> None:
            saver.save(record.index, record.scenario, record.outputs)

        run_frames(runtime, feed(), on_frame=save)
    files = sorted((tmp_path / "frames").iterdir())
    assert [path.name for path in files] == [frame_file_name(index) for index in range(len(frames))]
    scenarios = []
    for index, path in enumerate(files):
        with np.load(path) as data:
            assert int(data["frame"]) == index
            scenario = data["scenario"].item()
            outputs = {name: data[name] for name in data.files if name not in ("frame", "scenario")}
        scenarios.append(scenario)
        assert_equivalent(outputs, references.outputs(scenario, frames[index]), f"{path.name} on {scenario}")
    assert set(scenarios) == {"full", "skip", "exit"} and scenarios[0] == "full" and scenarios[-1] == "exit"


def test_run_with_a_user_function_keeps_going_past_its_errors(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    app = tmp_path / "app.yaml"
    app.write_text(TINY_APP.format(postprocess="mypost:summarise"))
    (tmp_path / "mypost.py").write_text(USER_MODULE)  # beside the app: found there, not on sys.path
    assert main(["run", str(app), "--frames", "4", "--no-socket"]) == 0
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [line["frame"] for line in lines] == [0, 1, 2, 3]
    assert "value" not in lines[1] and lines[1]["error"] == (
        "postprocess mypost:summarise failed on frame 1 (full): ValueError: no luck on this frame")
    for line in (lines[0], lines[2], lines[3]):
        assert "error" not in line
        assert line["value"]["index"] == line["frame"] and line["value"]["scenario"] == "full"
        assert line["value"]["best"] == line["outputs"]["output"]["top5"][0][0]
        assert len(line["value"]["logits"]) == 2  # a numpy array in the value, written as a list
    failures = [text for text in captured.err.splitlines() if "failed on frame" in text]
    assert failures == ["sbrs run: postprocess mypost:summarise failed on frame 1 (full): ValueError: no luck on "
                        "this frame"]
    assert "post-processing failed on 1 frames" in captured.err


def test_a_value_json_cannot_hold_is_the_frames_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = tmp_path / "app.yaml"
    app.write_text(TINY_APP.format(postprocess="mypost:opaque"))
    (tmp_path / "mypost.py").write_text(USER_MODULE)
    assert main(["run", str(app), "--frames", "2", "--no-socket"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all("returned a value JSON cannot hold: a object is not JSON" in line["error"] for line in lines)


def test_run_refuses_a_user_function_that_does_not_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = tmp_path / "app.yaml"
    app.write_text(TINY_APP.format(postprocess="nowhere_module:f"))
    assert main(["run", str(app), "--frames", "2", "--no-socket"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    error = captured.err.strip().splitlines()[-1]
    assert error.startswith("sbrs: error: ") and f"{app}:4: postprocess: cannot import 'nowhere_module'" in error


def test_run_writes_raw_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = tmp_path / "app.yaml"
    app.write_text(TINY_APP.format(postprocess="raw"))
    assert main(["run", str(app), "--frames", "1", "--no-socket"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert np.array(line["raw"]["output"]).shape == (1, 10)


def test_run_summarises_top_k_with_the_k_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = tmp_path / "app.yaml"
    app.write_text(TINY_APP.format(postprocess="{kind: top-k, k: 3}"))
    assert main(["run", str(app), "--frames", "1", "--no-socket"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert set(line) == {"frame", "scenario", "latency_s", "outputs"}
    assert len(line["outputs"]["output"]["top3"]) == 3 and "top5" not in line["outputs"]["output"]


@pytest.mark.parametrize("problem", ["a file", "earlier frames", "an unwritable folder"])
def test_a_bad_save_outputs_folder_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         problem: str) -> None:
    target = tmp_path / "out"
    if problem == "a file":
        target.write_text("")
    elif problem == "earlier frames":
        target.mkdir()
        (target / frame_file_name(0)).write_bytes(b"")
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into any folder")
        target.mkdir()
        target.chmod(0o500)
    app = tmp_path / "app.yaml"
    app.write_text(TINY_APP.format(postprocess="top-k"))
    assert main(["run", str(app), "--frames", "1", "--no-socket", "--save-outputs", str(target)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    error = captured.err.strip().splitlines()[-1]
    assert error.startswith(f"sbrs: error: --save-outputs: {target}: "), error


def test_save_outputs_makes_the_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = tmp_path / "app.yaml"
    app.write_text(TINY_APP.format(postprocess="top-k"))
    target = tmp_path / "new" / "frames"
    assert main(["run", str(app), "--frames", "3", "--no-socket", "--save-outputs", str(target)]) == 0
    assert sorted(path.name for path in target.iterdir()) == [frame_file_name(index) for index in range(3)]


def test_detection_example_prints_detections_and_saves_what_onnx_runtime_computes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """apps/detect.yaml end to end: each JSON line's detections are the reference decoding and suppression
    (tests/outputs/test_detections.py) of ONNX Runtime's output of the scenario's own model on the same seeded
    frame, and each saved file holds that output."""
    from sbrs.app import load_app
    from tests.outputs.test_detections import reference

    app_path = tmp_path / "detect.yaml"  # a copy, so that this test's build does not race another's
    shutil.copy(REPO / "apps" / "detect.yaml", app_path)
    frames_dir = tmp_path / "frames"
    assert main(["run", str(app_path), "--frames", "3", "--no-socket", "--save-outputs", str(frames_dir),
                 "--seed", "5"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    app = load_app(app_path)
    spec = app.config.scenario("large").postprocess
    references = References(app)
    frames = synthetic_frames(app.config.input, 5)
    found = 0
    for index, (line, frame) in enumerate(zip(lines, frames, strict=False)):
        assert line["frame"] == index and line["scenario"] == "large"
        want = references.outputs("large", frame)
        with np.load(frames_dir / frame_file_name(index)) as saved:
            assert saved["scenario"].item() == "large" and int(saved["frame"]) == index
            assert_equivalent({"output": saved["output"]}, want, f"saved frame {index}")
        prediction = want["output"][0]
        expected = reference(prediction[:4].T.tolist(), prediction[4:].T.tolist(), confidence=spec.confidence,
                             iou=spec.iou, max_detections=spec.max_detections, layout="cxcywh", frame=(320, 320))
        got = line["detections"]
        assert [d["class"] for d in got] == [label for _, _, label in expected]
        for detection, (box, score, _) in zip(got, expected, strict=True):
            assert set(detection) == {"box", "score", "class"}
            assert detection["box"] == pytest.approx(box, abs=0.02) and detection["score"] == pytest.approx(score,
                                                                                                          abs=2e-6)
            assert 0 <= detection["box"][0] <= detection["box"][2] <= 320
        found += len(got)
    assert found > 0  # random weights, but the example shows boxes


def test_two_folders_modules_of_one_name_are_two_modules(tmp_path: Path) -> None:
    """Two apps' ``post.py`` in two folders: each function is its own, and neither takes the other's entry in
    ``sys.modules`` (both were ``sbrs_user_post``). A module is loaded once per process."""
    import sys

    from sbrs.outputs.postprocess import load_function

    functions = []
    for answer in (1, 2):
        folder = tmp_path / f"app{answer}"
        folder.mkdir()
        (folder / "post.py").write_text(f"def f(outputs, meta):\n    return {answer}\n")
        functions.append(load_function("post:f", folder))
    assert [function({}, None) for function in functions] == [1, 2]
    modules = {function.__module__ for function in functions}
    assert len(modules) == 2 and all(sys.modules[name].f is function for name, function in
                                     zip(sorted(modules), sorted(functions, key=lambda f: f.__module__), strict=True))
    assert load_function("post:f", tmp_path / "app1") is functions[0]
