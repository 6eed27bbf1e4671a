"""``sbrs run`` on a video: apps/detect.yaml fed a 1280x720 clip prints one JSON line per frame with its boxes in
the clip's pixels, equal to ONNX Runtime on the reference pre-processing of each frame with ultralytics' box
mapping; ``--save-outputs`` records the same; ``--save-video`` writes every frame with the overlay; a switch is
marked on the frame where it took effect; the app's ``source:``; the errors of --save-video and --show."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from sbrs.app import load_app
from sbrs.cli import main
from sbrs.errors import InputError
from sbrs.outputs.save import frame_file_name
from sbrs.run.frames import open_source
from sbrs.run.loop import FrameRecord, run_frames
from sbrs.run.overlay import SWITCH_COLOUR, FrameViewer, class_colour, frame_for_view
from sbrs.runtime import runtime_for
from tests.app.test_preprocess import ultralytics_letterbox, ultralytics_scale_boxes, ultralytics_tensor
from tests.conftest import FORBIDDEN, REPO, assert_one_line_error, modules_a_run_loads
from tests.outputs.test_detections import reference
from tests.run.test_capture import APP
from tests.run.videos import make_video, read_video
from tests.runtime.conftest import References, assert_equivalent

cv2 = pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_video(tmp_path_factory.mktemp("clip") / "clip.mp4", 1280, 720, 6)


def test_detect_on_a_clip_gives_boxes_in_the_clips_pixels_equal_to_onnx_runtime(
        clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app_path = tmp_path / "detect.yaml"  # a copy, so that this test's build does not race another's
    shutil.copy(REPO / "apps" / "detect.yaml", app_path)
    saved, video, summary = tmp_path / "outputs", tmp_path / "out.mp4", tmp_path / "summary.json"
    assert main(["run", str(app_path), "--source", str(clip), "--save-video", str(video), "--save-outputs",
                 str(saved), "--summary", str(summary), "--no-socket"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    pictures = read_video(clip)
    assert [line["frame"] for line in lines] == list(range(len(pictures))) == list(range(6))
    app = load_app(app_path)
    spec = app.config.scenario("large").postprocess
    references = References(app)
    found = 0
    for line, picture in zip(lines, pictures, strict=True):
        index = line["frame"]
        want = references.outputs("large", ultralytics_tensor(ultralytics_letterbox(picture, (320, 320))))
        with np.load(saved / frame_file_name(index)) as frame_file:
            assert_equivalent({"output": frame_file["output"]}, want, f"frame {index}")
            saved_boxes = frame_file["detection_boxes"]
        prediction = want["output"][0]
        expected = reference(prediction[:4].T.tolist(), prediction[4:].T.tolist(), confidence=spec.confidence,
                             iou=spec.iou, max_detections=spec.max_detections, layout="cxcywh", frame=(320, 320))
        got = line["detections"]
        assert [d["class"] for d in got] == [label for _, _, label in expected]
        in_clip = ultralytics_scale_boxes((320, 320), np.array([box for box, _, _ in expected]).reshape(-1, 4),
                                          (720, 1280))
        for detection, box, (_, score, _) in zip(got, in_clip, expected, strict=True):
            assert detection["box"] == pytest.approx(box.tolist(), abs=0.05)
            assert detection["score"] == pytest.approx(score, abs=2e-6)
            assert 0 <= detection["box"][0] <= detection["box"][2] <= 1280
            assert 0 <= detection["box"][1] <= detection["box"][3] <= 720
        np.testing.assert_allclose(saved_boxes, [d["box"] for d in got] or np.zeros((0, 4)), atol=0.006)
        found += len(got)
    assert found > 0 and max(d["box"][3] for line in lines for d in line["detections"]) > 320  # the clip's pixels
    source = json.loads(summary.read_text())["source"]
    assert (source["kind"], source["fps"], source["read"], source["dropped"]) == ("file", 30.0, 6, 0)

    # the video: every frame, the clip's size, the overlay drawn on the clip's own pixels
    written = read_video(video)
    assert len(written) == len(pictures) and written[0].shape == (720, 1280, 3)
    if shutil.which("ffprobe"):
        counted = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                                  "stream=nb_read_frames", "-of", "csv=p=0", str(video)], capture_output=True,
                                 text=True, check=True, timeout=60).stdout.strip()
        assert int(counted) == len(pictures)
    frame, picture, detections = written[2], pictures[2], lines[2]["detections"]
    assert frame[:12].mean() < 40 < picture[:12].mean()  # the bar on top: black where the clip is bright
    shown = next(d for d in detections if d["box"][1] >= 45 and d["box"][2] - d["box"][0] > 40)  # below the bar
    x1, y1, x2, _ = (round(v) for v in shown["box"])
    edge = frame[y1 - 1:y1 + 2, x1 + 5:x2 - 5].astype(int)  # the rows the edge is drawn on, column by column
    colour = np.array(class_colour(shown["class"]))
    near = (np.abs(edge - colour).max(axis=2) < 60).any(axis=0)
    assert near.mean() > 0.8, "the first box's top edge is not drawn in its class colour"
    assert (np.abs(picture[y1 - 1:y1 + 2, x1 + 5:x2 - 5].astype(int) - colour).max(axis=2) < 60).any(axis=0).mean() \
        < 0.5  # and the clip itself is not that colour there


def test_a_folder_of_photos_gives_boxes_in_each_photos_pixels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two photos of odd sizes, letterboxed for the detector: each line's boxes are in its own photo's pixels."""
    pytest.importorskip("PIL")
    from PIL import Image

    app_path = tmp_path / "detect.yaml"
    shutil.copy(REPO / "apps" / "detect.yaml", app_path)
    photos = tmp_path / "photos"
    photos.mkdir()
    sizes = [(517, 333), (720, 1280)]
    for index, (height, width) in enumerate(sizes):
        picture = cv2.resize(np.random.default_rng(index).integers(0, 256, (9, 7, 3), dtype=np.uint8), (width, height))
        Image.fromarray(picture).save(photos / f"{index}.png")
    assert main(["run", str(app_path), "--source", str(photos), "--no-socket"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    app = load_app(app_path)
    spec = app.config.scenario("large").postprocess
    references = References(app)
    for line, (height, width) in zip(lines, sizes, strict=True):
        rgb = np.asarray(Image.open(photos / f"{line['frame']}.png").convert("RGB"))
        want = references.outputs("large", ultralytics_tensor(ultralytics_letterbox(rgb[..., ::-1], (320, 320))))
        prediction = want["output"][0]
        expected = reference(prediction[:4].T.tolist(), prediction[4:].T.tolist(), confidence=spec.confidence,
                             iou=spec.iou, max_detections=spec.max_detections, layout="cxcywh", frame=(320, 320))
        boxes = ultralytics_scale_boxes((320, 320), np.array([box for box, _, _ in expected]).reshape(-1, 4),
                                        (height, width))
        assert [d["class"] for d in line["detections"]] == [label for _, _, label in expected]
        np.testing.assert_allclose(np.array([d["box"] for d in line["detections"]]).reshape(-1, 4), boxes, atol=0.05)
        assert all(0 <= d["box"][2] <= width and 0 <= d["box"][3] <= height for d in line["detections"])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "app.yaml"
    path.write_text(APP)
    assert main(["build", str(path)]) == 0
    return path


def test_the_apps_source_is_read_relative_to_the_app_file(tiny: Path, clip: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    folder = tiny.parent
    shutil.copy(clip, folder / "clip.mp4")
    with_source = folder / "with-source.yaml"
    with_source.write_text(APP.replace("name: tinyvideo", "name: tinyvideo\nsource: clip.mp4"))
    assert main(["build", str(with_source)]) == 0
    capsys.readouterr()
    assert main(["run", str(with_source), "--no-socket"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 6
    with_source.write_text(APP.replace("name: tinyvideo", "name: tinyvideo\nsource: missing.mp4"))
    assert main(["run", str(with_source), "--no-socket", "--rebuild"]) == 2
    assert_one_line_error(capsys.readouterr().err.splitlines(keepends=True)[-1],
                          "source: missing.mp4: no such video file", file="with-source.yaml")


@pytest.mark.parametrize(("arguments", "message"), [
    (["--save-video", "{tmp}/out.mp4"], "--save-video: draws on the source's pictures"),
    (["--save-video", "{tmp}/out.gif", "--source", "{clip}"], "--save-video: {tmp}/out.gif: the video's file name"),
    (["--save-video", "{tmp}/no/out.mp4", "--source", "{clip}"], "--save-video: {tmp}/no/out.mp4: no such folder"),
    (["--show", "--source", "{clip}"], "--show: "),
])
def test_what_cannot_be_watched_is_one_line(tiny: Path, clip: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str], arguments: list[str],
                                            message: str) -> None:
    given = [text.format(tmp=tmp_path, clip=clip) for text in arguments]
    assert main(["run", str(tiny), "--no-socket", *given]) == 2
    assert_one_line_error(capsys.readouterr().err.splitlines(keepends=True)[-1],
                          message.format(tmp=tmp_path, clip=clip))


def test_show_needs_a_gui_and_a_display(tiny: Path, clip: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from sbrs.run.overlay import require_gui

    gui = next((line.partition(":")[2].strip() for line in cv2.getBuildInformation().splitlines()
                if line.strip().startswith("GUI:")), "NONE")
    headless = gui.upper() == "NONE"
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    with pytest.raises(InputError) as error:
        require_gui(cv2)
    assert ("has no GUI" if headless else "no display") in str(error.value)


def test_a_switch_is_marked_on_the_frame_where_it_took_effect(tiny: Path, clip: Path, tmp_path: Path) -> None:
    """A two-scenario app switched while a clip runs: in the saved video, the frame whose result carries the
    switch has the switch border, the frames before it have none."""
    app_path = tmp_path / "two.yaml"
    app_path.write_text(APP + "  - name: b\n    seed: 3\n    layers: [{op: gap}, {op: flatten}, {op: fc, out: 10}]\n")
    video = tmp_path / "switch.mp4"
    switched: list[int] = []
    with runtime_for(load_app(app_path), use_build=False) as runtime, \
            open_source(str(clip), load_app(app_path).config.input, keep_pictures=True) as source:
        viewer = FrameViewer(cv2, video=video, show=False, fps=source.fps)

        def on_frame(record: FrameRecord) -> None:
            if record.index == 2:
                runtime.switch("b")
            if record.switch is not None:
                switched.append(record.index)
            assert record.source is not None and record.source.picture is not None
            viewer.add(frame_for_view(record.index, record.source.picture, record.source.order, record.scenario,
                                      record.value, record.switch))

        run_frames(runtime, source, on_frame=on_frame, frame_info=source.taken)
        viewer.close()
    assert len(switched) == 1 and viewer.written == 6
    written = read_video(video)
    left_edge = [frame[200:500, 2:6].reshape(-1, 3).astype(int).mean(axis=0) for frame in written]
    red = np.array(SWITCH_COLOUR)
    marked = [index for index, colour in enumerate(left_edge) if np.abs(colour - red).max() < 70]
    assert marked == switched, (marked, switched, left_edge)


def test_a_run_of_random_frames_loads_no_video_library(tiny: Path) -> None:
    assert modules_a_run_loads(tiny, (*FORBIDDEN, "cv2")) == []


def test_the_python_api_opens_the_same_source(tiny: Path, clip: Path) -> None:
    """``sbrs.open_source``: for an app path, an ``App`` or an ``InputSpec``; None takes the app's ``source:``."""
    import sbrs

    app = load_app(tiny)
    with sbrs.open_source(str(clip), tiny) as by_path, sbrs.open_source(str(clip), app) as by_app, \
            sbrs.open_source(str(clip), app.config.input) as by_spec:
        tensors = [list(source) for source in (by_path, by_app, by_spec)]
    assert len(tensors[0]) == 6 and all(
        np.array_equal(a, b) for other in tensors[1:] for a, b in zip(tensors[0], other, strict=True))
    with_source = tiny.parent / "api-source.yaml"
    shutil.copy(clip, tiny.parent / "api-clip.mp4")
    with_source.write_text(APP.replace("name: tinyvideo", "name: tinyvideo\nsource: api-clip.mp4"))
    with sbrs.open_source(None, with_source) as source:
        assert source.kind == "file" and len(list(source)) == 6


def test_two_frames_in_flight_keep_each_result_with_its_own_picture(tmp_path: Path, clip: Path) -> None:
    """``runtime.streams: 2``: results may finish out of order, yet each frame's outputs are ONNX Runtime's on its
    own picture, and the video's frame k is the clip's frame k."""
    app_path = tmp_path / "streams.yaml"
    app_path.write_text(APP.replace("input: {name: input, shape: [1, 3, 32, 32], dtype: float32}",
                                    "input: {name: input, shape: [1, 3, 32, 32], dtype: float32,\n"
                                    "        preprocess: {resize: letterbox}}\nruntime: {streams: 2}"))
    saved, video = tmp_path / "outputs", tmp_path / "streams.mp4"
    assert main(["run", str(app_path), "--no-socket", "--source", str(clip), "--save-outputs", str(saved),
                 "--save-video", str(video), "--output", str(tmp_path / "lines.jsonl")]) == 0
    app = load_app(app_path)
    references = References(app)
    pictures = read_video(clip)
    from sbrs.app.preprocess import Preprocessor

    preprocessor = Preprocessor(app.config.input)
    for index, picture in enumerate(pictures):
        with np.load(saved / frame_file_name(index)) as frame_file:
            assert_equivalent({"output": frame_file["output"]}, references.outputs("a", preprocessor(picture)[0]),
                              f"frame {index}")
    written = read_video(video)
    assert len(written) == len(pictures)
    for index, frame in enumerate(written):
        distances = [np.abs(frame[400:, 600:].astype(int) - picture[400:, 600:]).mean() for picture in pictures]
        assert int(np.argmin(distances)) == index
