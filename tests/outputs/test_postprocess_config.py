"""``postprocess:`` in app and scenario files: what loads, and one line ``file:line: field: message`` with exit
status 2 for everything that does not (bad kinds, keys, types, and specs the model's outputs cannot meet)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from sbrs.app import load_app
from sbrs.artifact.read import config_from_dict
from sbrs.cli import main
from sbrs.outputs.spec import DetectionsSpec, FunctionSpec, RawSpec, SpecLocation, TopKSpec

APP = """\
name: outputs
input: {name: input, shape: [1, 3, 64, 64], dtype: float32}
initial: det
postprocess: {kind: detections, confidence: 0.3}
scenarios:
  - name: det
    zoo: {name: yolo_detector, resolution: 64}
  - name: det_small
    zoo: {name: yolo_detector, resolution: 64, neck_width: 0.5}
    postprocess: {kind: detections, iou: 0.6, max_detections: 5}
  - name: cls
    seed: 1
    layers: [{op: conv, out: 8, kernel: 3, pad: 1, act: relu}, {op: gap}, {op: flatten}, {op: fc, out: 10}]
    postprocess: top-k
  - file: scenarios/side.yaml
"""

SIDE = """\
name: side
seed: 1
layers: [{op: conv, out: 8, kernel: 3, pad: 1, act: relu}, {op: gap}, {op: flatten}, {op: fc, out: 10}]
postprocess: {kind: top-k, k: 3}
"""


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "side.yaml").write_text(SIDE)
    (tmp_path / "app.yaml").write_text(APP)
    return tmp_path


def test_specs_resolve_per_scenario_with_the_app_default(app_dir: Path) -> None:
    config = load_app(app_dir / "app.yaml").config
    assert config.scenario("det").postprocess == DetectionsSpec(confidence=0.3, at=SpecLocation("app", "postprocess", 4))
    assert config.scenario("det_small").postprocess == DetectionsSpec(
        iou=0.6, max_detections=5, at=SpecLocation("scenario", "scenarios[1].postprocess", 10))
    assert config.scenario("cls").postprocess == TopKSpec(at=SpecLocation("scenario", "scenarios[2].postprocess", 14))
    assert config.scenario("side").postprocess == TopKSpec(k=3, at=SpecLocation("scenario", "postprocess", 4))
    # a build stores the config as JSON and reads it back (sbrs run never sees the YAML)
    assert config_from_dict(config.to_dict()) == config


def test_without_postprocess_every_scenario_gets_top_5(tmp_path: Path) -> None:
    (tmp_path / "app.yaml").write_text("name: plain\ninput: {shape: [1, 3, 8, 8]}\nscenarios:\n"
                                       "  - {name: only, layers: [{op: gap}, {op: flatten}, {op: fc, out: 4}]}\n")
    spec = load_app(tmp_path / "app.yaml").config.scenario("only").postprocess
    assert spec == TopKSpec() and spec.k == 5


@pytest.mark.parametrize(("text", "expected"), [
    ("raw", RawSpec()),
    ("{kind: raw, max_elements: 20}", RawSpec(max_elements=20)),
    ("my_post.decode:frame", FunctionSpec("my_post.decode:frame")),
    ("{kind: function, function: 'pkg.mod:fn'}", FunctionSpec("pkg.mod:fn")),
    ("{kind: detections, format: ssd, boxes: b, scores: s, normalized: true, background: 0, activation: softmax}",
     DetectionsSpec(format="ssd", boxes="b", scores="s", normalized=True, background=0, activation="softmax")),
])
def test_short_and_long_forms(tmp_path: Path, text: str, expected: object) -> None:
    from sbrs.app import load_app_config

    (tmp_path / "app.yaml").write_text(f"name: forms\ninput: {{shape: [1, 3, 8, 8]}}\npostprocess: {text}\n"
                                       "scenarios:\n  - {name: only, layers: [{op: gap}, {op: flatten}]}\n")
    spec = load_app_config(tmp_path / "app.yaml").scenario("only").postprocess
    assert asdict(spec) == {**asdict(expected), "at": asdict(SpecLocation("app", "postprocess", 3))}


# (description, old text, new text, expected fragment, file:line expected in the message)
BAD_CASES = [
    ("unknown short form", "postprocess: {kind: detections, confidence: 0.3}", "postprocess: boxes",
     "postprocess: unknown post-processor 'boxes' (allowed: top-k, detections, raw, or module:function", "app.yaml:4"),
    ("unknown kind", "{kind: detections, confidence: 0.3}", "{kind: boxes}",
     "postprocess.kind: unknown kind 'boxes' (allowed: top-k, detections, raw, function)", "app.yaml:4"),
    ("kind missing", "{kind: detections, confidence: 0.3}", "{confidence: 0.3}",
     "postprocess.kind: required key is missing", "app.yaml:4"),
    ("not a string or mapping", "{kind: detections, confidence: 0.3}", "12",
     "postprocess: expected top-k, detections, raw, or module:function", "app.yaml:4"),
    ("not module:function", "{kind: detections, confidence: 0.3}", "'my mod:fn'",
     "postprocess: 'my mod:fn' is not module:function", "app.yaml:4"),
    ("bad function in the long form", "{kind: detections, confidence: 0.3}", "{kind: function, function: 'a:b:c'}",
     "postprocess.function: 'a:b:c' is not module:function", "app.yaml:4"),
    ("confidence above 1", "confidence: 0.3", "confidence: 1.5",
     "postprocess.confidence: Input should be less than or equal to 1", "app.yaml:4"),
    ("iou of the wrong type", "confidence: 0.3", "iou: high", "postprocess.iou: Input should be a valid", "app.yaml:4"),
    ("unknown detections key", "confidence: 0.3", "confidance: 0.3", "postprocess.confidance: unknown key (allowed: "
     "activation, background, box_format, boxes, confidence, format, iou, kind, max_candidates, max_detections, "
     "normalized, output, scores)", "app.yaml:4"),
    ("key of the other format", "confidence: 0.3", "boxes: b",
     "postprocess: 'boxes' and 'scores' name the outputs of format ssd; format yolo reads one 'output'",
     "app.yaml:4"),
    ("k of 0", "postprocess: top-k", "postprocess: {kind: top-k, k: 0}",
     "scenarios[2].postprocess.k: Input should be greater than or equal to 1", "app.yaml:14"),
    ("top-k with a detections key", "postprocess: top-k", "postprocess: {kind: top-k, iou: 0.5}",
     "scenarios[2].postprocess.iou: unknown key (allowed: k, kind)", "app.yaml:14"),
    ("max_detections of 0", "max_detections: 5", "max_detections: 0",
     "scenarios[1].postprocess.max_detections: Input should be greater than or equal to 1", "app.yaml:10"),
    ("a classifier decoded as a detector", "    postprocess: top-k\n", "",
     "app.yaml:4: postprocess: scenario 'cls' (detections (yolo)): format yolo reads [1, 4 + classes, anchors]; "
     "output 'output' is [1, 10]", "app.yaml:4"),
    ("an output that does not exist", "iou: 0.6,", "iou: 0.6, output: boxes,",
     "scenarios[1].postprocess: scenario 'det_small' (detections (yolo)): output: the model has no output 'boxes' "
     "(outputs: output)", "app.yaml:10"),
    ("ssd outputs missing", "iou: 0.6,", "iou: 0.6, format: ssd,", "the model has no output 'boxes'", "app.yaml:10"),
    ("background class beyond the classes", "iou: 0.6,", "iou: 0.6, background: 80,",
     "background class 80 does not exist (the model has 80 classes)", "app.yaml:10"),
    ("raw outputs above max_elements", "postprocess: top-k", "postprocess: {kind: raw, max_elements: 5}",
     "scenarios[2].postprocess: scenario 'cls' (raw): raw writes every output as lists: 10 numbers a frame, above "
     "max_elements 5", "app.yaml:14"),
    ("in a scenario file", "SIDE:k: 3", "k: -3", "side.yaml:4: postprocess.k: Input should be greater than or equal",
     "side.yaml:4"),
]


@pytest.mark.parametrize(("old", "new", "fragment", "where"), [case[1:] for case in BAD_CASES],
                         ids=[case[0] for case in BAD_CASES])
def test_bad_postprocess_is_one_line_and_exit_2(app_dir: Path, capsys: pytest.CaptureFixture[str], old: str, new: str,
                                                fragment: str, where: str) -> None:
    path = app_dir / ("scenarios/side.yaml" if old.startswith("SIDE:") else "app.yaml")
    old = old.removeprefix("SIDE:")
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))
    status = main(["check", str(app_dir / "app.yaml")])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith("sbrs: error: "), err
    assert fragment in err, err
    assert f"{where}: " in err, err
