"""What ``--save-video`` draws (``draw``) and how ``FrameViewer`` writes: pixels checked on exact pictures, frames
written in stream order whatever order their results came in, a live source's video at its processing rate."""

from __future__ import annotations

import random
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sbrs.control.sensors import source_frame_rate
from sbrs.errors import InputError
from sbrs.outputs.detections import Detections
from sbrs.run.overlay import (
    BAR_COLOUR,
    SWITCH_COLOUR,
    FrameViewer,
    ViewFrame,
    check_video_path,
    class_colour,
    draw,
)
from tests.run.videos import read_video

cv2 = pytest.importorskip("cv2")


def grey(height: int = 240, width: int = 320) -> np.ndarray:
    return np.full((height, width, 3), 128, np.uint8)


def test_boxes_are_drawn_in_the_pictures_pixels_in_their_class_colour() -> None:
    detections = Detections(np.array([[50, 100, 200, 200]], np.float32), np.array([0.9], np.float32),
                            np.array([3], np.int64))
    image = draw(cv2, ViewFrame(7, grey(), "BGR", "accurate", detections, None, 0.0), 12.5, None)
    colour = class_colour(3)
    assert tuple(image[150, 50]) == colour and tuple(image[200, 120]) == colour  # left and bottom edges
    assert tuple(image[150, 120]) == (128, 128, 128)  # inside: the picture
    assert (image[:10] == BAR_COLOUR).all(axis=2).mean() > 0.5  # the bar, under its white text
    assert (image[:20] == (255, 255, 255)).all(axis=2).any()  # the bar's text


def test_a_switch_frame_has_a_border_and_top_k_lines_are_written() -> None:
    frame = ViewFrame(3, grey(), "RGB", "fast", {"output": [(5, 0.7), (2, 0.2)]}, ("accurate", "fast", 0.012), 0.0)
    image = draw(cv2, frame, 30.0, "switch accurate -> fast (12.0 ms)")
    assert tuple(image[120, 3]) == SWITCH_COLOUR and tuple(image[236, 160]) == SWITCH_COLOUR
    unmarked = draw(cv2, ViewFrame(4, grey(), "RGB", "fast", {}, None, 0.0), 30.0, None)
    assert tuple(unmarked[120, 3]) == (128, 128, 128)
    lines = image[16:50, 8:200]
    assert (lines == BAR_COLOUR).all(axis=2).sum() > 500  # the two lines' backgrounds


def test_an_rgb_picture_is_drawn_as_bgr() -> None:
    picture = np.zeros((100, 100, 3), np.uint8)
    picture[..., 0] = 200  # red, in RGB order
    image = draw(cv2, ViewFrame(0, picture, "RGB", "a", None, None, 0.0), 0.0, None)
    assert tuple(image[80, 80]) == (0, 0, 200)


def frames(count: int, rate: float) -> list[ViewFrame]:
    return [ViewFrame(index, np.full((64, 96, 3), 15 * (index % 17), np.uint8), "BGR", "a", None, None, index / rate)
            for index in range(count)]


def test_frames_are_written_in_stream_order(tmp_path: Path) -> None:
    viewer = FrameViewer(cv2, video=tmp_path / "order.avi", show=False, fps=25.0)
    shuffled = frames(6, 25.0)
    for index in (1, 0, 2, 4, 3, 5):
        viewer.add(shuffled[index])
    viewer.close()
    written = read_video(tmp_path / "order.avi")
    assert viewer.written == len(written) == 6
    assert [round(float(frame[40:, :].mean()) / 15) for frame in written] == list(range(6))


def test_a_live_sources_video_plays_at_its_processing_rate(tmp_path: Path) -> None:
    viewer = FrameViewer(cv2, video=tmp_path / "live.mp4", show=False, fps=None)
    for frame in frames(15, 8.0):
        viewer.add(frame)
    viewer.close()
    assert viewer.fps == pytest.approx(8.0) and len(read_video(tmp_path / "live.mp4")) == 15
    capture = cv2.VideoCapture(str(tmp_path / "live.mp4"))
    assert capture.get(cv2.CAP_PROP_FPS) == pytest.approx(8.0, rel=0.01)
    capture.release()


@pytest.mark.parametrize(("processed", "declared", "written"),
                         [(40.0, 15.0, 15.0), (8.0, 15.0, 8.0), (40.0, float("nan"), 40.0), (40.0, 0.0, 40.0)],
                         ids=["burst-capped", "slower-than-the-source", "declared-nan", "declared-zero"])
def test_a_live_sources_video_never_plays_faster_than_the_source_gives_frames(
        tmp_path: Path, processed: float, declared: float, written: float) -> None:
    """A stream's first frames come in a burst from its buffer: processed at 40 a second from a source of 15, the
    video plays at 15. Processed slower than the source (frames dropped), at the processing rate. A declared rate
    that is no rate is ignored (``sbrs run`` passes the source's ``fps`` as ``source_frame_rate`` reads it)."""
    source_fps = source_frame_rate(SimpleNamespace(fps=declared))
    viewer = FrameViewer(cv2, video=tmp_path / "live.mp4", show=False, fps=None, source_fps=source_fps)
    for frame in frames(12, processed):
        viewer.add(frame)
    viewer.close()
    assert viewer.fps == pytest.approx(written)
    capture = cv2.VideoCapture(str(tmp_path / "live.mp4"))
    assert capture.get(cv2.CAP_PROP_FPS) == pytest.approx(written, rel=0.01)
    capture.release()


def test_a_short_live_run_is_written_too(tmp_path: Path) -> None:
    viewer = FrameViewer(cv2, video=tmp_path / "short.mp4", show=False, fps=None)
    for frame in frames(3, 5.0):
        viewer.add(frame)
    viewer.close()
    assert viewer.fps == pytest.approx(5.0) and len(read_video(tmp_path / "short.mp4")) == 3


@pytest.mark.parametrize("processed", [1234.5678, 3000.123, 70_000.0])
def test_a_video_processed_faster_than_mpeg4_can_time_is_still_written(tmp_path: Path, processed: float) -> None:
    """A folder of images or a fast app on a live source is processed at a rate whose time base (OpenCV's: the
    rate to 0.001, reduced) has a denominator above MPEG-4's 16 bits: the mp4v writer refused to open and the run
    failed after its first frames (exit 2). The rate is rounded to one it takes."""
    viewer = FrameViewer(cv2, video=tmp_path / "fast.mp4", show=False, fps=None)
    for frame in frames(12, processed):
        viewer.add(frame)
    viewer.close()
    assert len(read_video(tmp_path / "fast.mp4")) == 12
    assert viewer.fps == pytest.approx(min(processed, 65535.0), rel=1e-3)


@pytest.mark.parametrize(("name", "message"), [("out.gif", "must end in one of"), ("no/out.mp4", "no such folder")])
def test_a_video_path_that_cannot_be_written(tmp_path: Path, name: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        check_video_path(str(tmp_path / name))


def test_the_viewers_thread_against_the_run_under_stress(tmp_path: Path) -> None:
    """Frames added at random moments in completion order (an SBRS-TP switch hands a result over one before its
    predecessor) while the viewer's thread draws and writes, with the rate known or measured: every frame is
    written once, in stream order."""
    rng = random.Random(3)
    for round_ in range(8):
        count = rng.randrange(1, 45)
        order = list(range(count))
        index = 0
        while index < count - 1:
            if rng.random() < 0.25:
                order[index], order[index + 1] = order[index + 1], order[index]
                index += 2
            else:
                index += 1
        path = tmp_path / f"stress{round_}.avi"
        viewer = FrameViewer(cv2, video=path, show=False, fps=None if round_ % 2 else 25.0)
        made = frames(count, 20.0)
        for index in order:
            viewer.add(made[index])
            time.sleep(rng.choice((0.0, 0.0, 0.0005, 0.003)))
        viewer.close()
        written = read_video(path)
        assert viewer.written == len(written) == count
        assert [round(float(frame[40:, :].mean()) / 15) for frame in written] == [i % 17 for i in range(count)]
