"""What a source text names (``parse_source``), and the frames of a folder of images; every bad source is one
line and exit 2."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from sbrs.app.config import InputSpec
from sbrs.app.settings import Preprocess
from sbrs.cli import main
from sbrs.errors import InputError
from sbrs.run.frames import open_source
from sbrs.run.sources import CSI_PIPELINE, parse_source
from tests.conftest import REPO, assert_one_line_error

SPEC = InputSpec("input", (1, 3, 32, 32), "float32")


@pytest.mark.parametrize(("text", "kind", "target"), [
    ("0", "camera", 0),
    ("rtsp://cam.local:8554/live", "stream", "rtsp://cam.local:8554/live"),
    ("udp://@:5600", "stream", "udp://@:5600"),
    ("udp://@127.0.0.1:5600", "stream", "udp://@127.0.0.1:5600?localaddr=127.0.0.1"),
    ("rtp://@127.0.0.1:5004", "stream", "rtp://@127.0.0.1:5004?localaddr=127.0.0.1"),
    ("rtp://@127.0.0.1:5004?localaddr=127.0.0.2", "stream", "rtp://@127.0.0.1:5004?localaddr=127.0.0.2"),
    ("https://example.org/live.m3u8", "stream", "https://example.org/live.m3u8"),
    ("videotestsrc ! videoconvert ! appsink", "gstreamer", "videotestsrc ! videoconvert ! appsink"),
    ("csi://1", "gstreamer", CSI_PIPELINE.format(sensor=1)),
])
def test_what_a_source_text_names(text: str, kind: str, target: object) -> None:
    source = parse_source(text)
    assert (source.kind, source.target) == (kind, target)
    assert source.live and source.network == (kind == "stream")


def test_files_and_folders(tmp_path: Path) -> None:
    clip = tmp_path / "Clip.MP4"
    clip.write_bytes(b"")
    assert (parse_source(str(clip)).kind, parse_source(f"file://{clip}").kind) == ("file", "file")
    assert parse_source(str(tmp_path)).kind == "folder" and not parse_source(str(tmp_path)).live
    assert parse_source(None).kind == "synthetic"


@pytest.mark.parametrize(("text", "message"), [
    ("", "an empty source"),
    ("{tmp}/missing.mp4", "missing.mp4: no such video file"),
    ("{tmp}/missing", "missing: no such folder or video file"),
    ("{tmp}/notes.txt", "notes.txt: not a video file (.mp4"),
    ("/dev/video99", "/dev/video99: no such camera device"),
    ("v4l2://video0", "v4l2://video0: expected a camera device /dev/videoN"),
    ("udp://@", "udp://@: a udp:// source needs a port"),
    ("rtp://@:99999", "rtp://@:99999: not a valid URI"),
    ("rtsp://:554/x", "rtsp://:554/x: a rtsp:// source needs a host"),
    ("csi://front", "csi://front: expected csi://N"),
    ("gopher://example.org", "gopher://example.org: unknown kind of source 'gopher://'"),
])
def test_a_text_that_names_no_source_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                                 message: str) -> None:
    (tmp_path / "notes.txt").write_text("not a video")
    text = text.format(tmp=tmp_path)
    with pytest.raises(InputError) as error:
        parse_source(text)
    assert error.value.field == "--source" and message.format(tmp=tmp_path) in error.value.detail
    assert main(["run", str(REPO / "apps" / "tiny.yaml"), "--no-socket", "--frames", "1", "--source", text]) == 2
    assert_one_line_error(capsys.readouterr().err, message)


def test_without_opencv_the_error_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"\x00" * 64)
    monkeypatch.setitem(sys.modules, "cv2", None)
    with pytest.raises(InputError) as error:
        open_source(str(clip), SPEC)
    assert 'pip install "sbrs[video]"' in str(error.value)


def test_a_gstreamer_pipeline_needs_an_opencv_built_with_it() -> None:
    cv2 = pytest.importorskip("cv2")
    from sbrs.run.capture import has_gstreamer

    if has_gstreamer(cv2):
        pytest.skip("this OpenCV has GStreamer")
    with pytest.raises(InputError) as error:
        open_source("videotestsrc num-buffers=3 ! videoconvert ! appsink", SPEC)
    assert "was built without GStreamer" in str(error.value)


def test_realtime_is_for_video_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--realtime: --realtime paces a video file"):
        open_source(str(tmp_path), SPEC, realtime=True)


def test_a_folder_of_images_gives_each_picture_and_its_geometry(tmp_path: Path) -> None:
    """The pictures of an image folder take the app's pre-processing and remember their geometry, so that boxes
    map back to each photo's own pixels (here two sizes, letterboxed)."""
    pytest.importorskip("PIL")
    from PIL import Image

    from sbrs.app.preprocess import Preprocessor

    rng = np.random.default_rng(0)
    sizes = [(517, 333), (720, 1280)]
    for index, (height, width) in enumerate(sizes):
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(tmp_path / f"{index}.png")
    spec = InputSpec("input", (1, 3, 64, 64), "float32", Preprocess(resize="letterbox"))
    with open_source(str(tmp_path), spec, keep_pictures=True) as source:
        tensors = list(source)
        frames = [source.taken(index) for index in range(2)]
    assert source.kind == "folder" and source.fps is None and source.counts.read == 2
    for tensor, frame, (height, width) in zip(tensors, frames, sizes, strict=True):
        assert frame is not None and frame.picture is not None and frame.picture.shape == (height, width, 3)
        want, geometry = Preprocessor(spec)(frame.picture, "RGB")
        np.testing.assert_array_equal(tensor, want)
        assert frame.geometry == geometry and frame.geometry.source == (height, width)
    assert source.taken(0) is None  # forgotten once asked for


def test_npy_folders_and_random_frames_have_no_pictures(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.zeros((1, 3, 32, 32), np.float32))
    with open_source(str(tmp_path), SPEC) as source:
        assert not source.pictures and len(list(source)) == 1 and source.taken(0) is None
    with open_source(None, SPEC) as source:
        assert source.kind == "synthetic" and not source.pictures
