"""Video files through OpenCV on a reading thread (``sbrs.run.capture``): every frame of a file, each equal to
the reference pre-processing of the frame as OpenCV decodes it; ``--realtime`` paced at the file's rate with
the newest frame taken; sources that cannot be opened; the reading thread against the taker under stress."""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from sbrs.app.config import InputSpec
from sbrs.app.settings import Preprocess
from sbrs.cli import main
from sbrs.errors import InputError
from sbrs.run import capture
from sbrs.run.frames import open_source
from tests.app.test_preprocess import ultralytics_letterbox, ultralytics_tensor
from tests.conftest import assert_one_line_error
from tests.run.videos import make_video, read_video

cv2 = pytest.importorskip("cv2")

YOLO = InputSpec("images", (1, 3, 320, 320), "float32", Preprocess(resize="letterbox", mean=(0.0,), std=(1.0,)))


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1280x720, 12 frames at 30 fps."""
    return make_video(tmp_path_factory.mktemp("clip") / "clip.mp4", 1280, 720, 12)


def test_a_file_gives_every_frame_pre_processed_as_the_reference(clip: Path) -> None:
    decoded = read_video(clip)
    with open_source(str(clip), YOLO, keep_pictures=True) as source:
        tensors = list(source)
        frames = [source.taken(index) for index in range(len(tensors))]
    assert (source.kind, source.live, source.fps, source.width, source.height) == ("file", False, 30.0, 1280, 720)
    assert len(tensors) == len(decoded) == 12 and source.counts.read == 12 and source.counts.dropped == 0
    for number, (tensor, frame, picture) in enumerate(zip(tensors, frames, decoded, strict=True)):
        assert frame is not None and frame.number == number
        np.testing.assert_array_equal(frame.picture, picture)
        np.testing.assert_allclose(tensor, ultralytics_tensor(ultralytics_letterbox(picture, (320, 320))),
                                   rtol=0, atol=1e-7)
        assert frame.geometry is not None and frame.geometry.offset == (0.0, 70.0)  # (320 - 180) / 2 above


def test_a_slow_taker_still_gets_every_frame_of_a_file(clip: Path) -> None:
    numbers = []
    with open_source(str(clip), YOLO) as source:
        for index, _ in enumerate(source):
            time.sleep(0.02)
            numbers.append(source.taken(index).number)  # type: ignore[union-attr]
    assert numbers == list(range(12)) and source.counts.dropped == 0


def test_realtime_paces_a_file_and_gives_the_newest_frame(tmp_path: Path) -> None:
    """30 frames at 30 fps last about a second; a taker slower than the file gets fewer, the newest each time,
    and the others are counted as dropped."""
    slow = make_video(tmp_path / "slow.mp4", 160, 120, 30)
    spec = InputSpec("input", (1, 3, 32, 32), "float32")
    with open_source(str(slow), spec, realtime=True) as source:
        started = time.monotonic()
        taken = []
        for index, _ in enumerate(source):
            frame = source.taken(index)
            assert frame is not None
            taken.append(frame)
            time.sleep(0.1)  # a model at 10 fps
        elapsed = time.monotonic() - started
    assert source.live and 0.9 < elapsed < 2.5
    numbers = [frame.number for frame in taken]
    assert numbers == sorted(numbers) and len(numbers) < 20 and numbers[-1] >= 27
    assert source.counts.read == 30 and source.counts.dropped == 30 - len(taken)
    ages = sorted(frame.age_s for frame in taken)
    assert ages[len(ages) // 2] < 1 / 30 + 0.02, ages  # no older than about one frame time


def test_observers_as_a_list_count_the_dropped_frames(tmp_path: Path) -> None:
    """``observers=[observer]``, as ``runtime_for`` takes them: the first dropped frame failed the reading thread
    (a list has no ``frames_dropped``) and ended the frames with an error."""
    from sbrs.metrics.observer import MetricsObserver

    slow = make_video(tmp_path / "slow.mp4", 160, 120, 30)
    observer = MetricsObserver(["a"], process_metrics=False)
    with open_source(str(slow), InputSpec("input", (1, 3, 32, 32), "float32"), realtime=True,
                     observers=[observer]) as source:
        for _ in source:
            time.sleep(0.1)  # a model at 10 fps
    assert source.counts.read == 30 and source.counts.dropped > 0
    assert observer.registry.get_sample_value("sbrs_source_frames_dropped_total") == source.counts.dropped


@pytest.mark.parametrize(("content", "message"), [
    (b"", "cannot open the video file"),
    (b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8, "cannot open the video file"),
])
def test_a_file_that_is_no_video_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes,
                                             message: str) -> None:
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(content)
    with pytest.raises(InputError, match=message):
        open_source(str(garbage), YOLO)
    app = tmp_path / "app.yaml"
    app.write_text(APP)
    assert main(["run", str(app), "--no-socket", "--source", str(garbage)]) == 2
    assert_one_line_error(capsys.readouterr().err.splitlines(keepends=True)[-1], message)


def test_a_stream_nobody_serves_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = tmp_path / "app.yaml"
    app.write_text(APP)
    assert main(["run", str(app), "--no-socket", "--source", "rtsp://127.0.0.1:1/live"]) == 2
    assert_one_line_error(capsys.readouterr().err.splitlines(keepends=True)[-1],
                          "rtsp://127.0.0.1:1/live: cannot open the stream")


APP = """\
name: tinyvideo
input: {name: input, shape: [1, 3, 32, 32], dtype: float32}
scenarios:
  - name: a
    layers: [{op: conv, out: 4, kernel: 3, pad: 1, act: relu}, {op: gap}, {op: flatten}, {op: fc, out: 10}]
"""


def test_the_reading_thread_against_the_taker_under_stress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many sources, file and realtime, taken at random speeds, abandoned at random points and closed while the
    thread waits for room, reads or paces: no error, no thread left behind, frame numbers only grow, and every
    frame read is given, dropped, or still waiting when the source closed."""
    monkeypatch.setattr(capture, "FILE_AHEAD", 1)  # the thread waits for room most of the time
    clip = make_video(tmp_path / "stress.mp4", 96, 64, 40, fps=120)
    spec = InputSpec("input", (1, 3, 16, 16), "float32")
    rng = random.Random(7)
    before = threading.active_count()
    for round_ in range(24):
        realtime = round_ % 2 == 1
        source = open_source(str(clip), spec, realtime=realtime)
        stop_after = rng.randrange(0, 45)
        numbers = []
        for index, _ in enumerate(source):
            numbers.append(source.taken(index).number)  # type: ignore[union-attr]
            if index >= stop_after:
                break
            time.sleep(rng.choice((0.0, 0.0, 0.001, 0.01)))
        source.close()
        source.close()  # idempotent
        assert numbers == sorted(set(numbers)) and (realtime or numbers == list(range(len(numbers))))
        counts = source.counts
        # waiting: in the queue (a file's FILE_AHEAD, a live source's one), or read and not yet handed over
        waiting = counts.read - len(numbers) - counts.dropped
        assert 0 <= waiting <= 2, (realtime, counts, len(numbers))
        assert realtime or counts.dropped == 0
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == before


def test_a_file_cut_short_and_filled_with_garbage_ends_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An MPEG-TS file cut at 60 % and padded with random bytes, as a recording a crash left: the frames before
    the cut come, the garbage after it is skipped by the decoder, and the run ends with its summary, exit 0."""
    whole = make_video(tmp_path / "whole.ts", 320, 240, 30)
    data = whole.read_bytes()
    cut = tmp_path / "cut.ts"
    cut.write_bytes(data[:len(data) * 6 // 10] + np.random.default_rng(1).integers(0, 256, 50_000, np.uint8).tobytes())
    app = tmp_path / "app.yaml"
    app.write_text(APP)
    summary = tmp_path / "summary.json"
    assert main(["run", str(app), "--no-socket", "--source", str(cut), "--summary", str(summary)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert 5 <= len(lines) < 30
    assert json.loads(summary.read_text())["source"]["read"] == len(lines)


def decodable_frames(path: Path) -> list[np.ndarray]:
    """The frames of ``path`` that OpenCV decodes, read past every read that fails (a damaged frame) until 100
    fail in a row (the end), independently of sbrs."""
    capture = cv2.VideoCapture(str(path))
    frames: list[np.ndarray] = []
    failed = 0
    while failed < 100:
        ok, frame = capture.read()
        failed = 0 if ok else failed + 1
        if ok:
            frames.append(frame)
    capture.release()
    return frames


def test_a_damaged_frame_in_the_middle_of_a_file_is_skipped_not_the_rest(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """MPEG-4 part 2 in an MP4 whose middle bytes are overwritten: the decoder refuses a frame there and decodes the
    ones after it. The source gives every frame that decodes, in order, and logs and counts the one skipped (it
    used to take the failed read for the file's end: 25 of 49 frames, silently)."""
    from tests.run.videos import ffmpeg

    whole = tmp_path / "whole.mp4"
    subprocess.run([ffmpeg(), "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=10", "-frames:v",
                    "50", "-c:v", "mpeg4", "-movflags", "+faststart", str(whole)], check=True, timeout=60)
    data = bytearray(whole.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 5000] = b"\xff" * 5000
    damaged = tmp_path / "damaged.mp4"
    damaged.write_bytes(bytes(data))
    decoded = decodable_frames(damaged)
    assert 30 < len(decoded) < 50  # the damage costs a frame or a few, in the middle
    with caplog.at_level("WARNING", logger="sbrs"), open_source(str(damaged), YOLO, keep_pictures=True) as source:
        frames = [source.taken(index) for index, _ in enumerate(source)]  # a source remembers frames in flight
    assert len(frames) == len(decoded) and source.counts.read == len(decoded)
    for frame, picture in zip(frames, decoded, strict=True):
        assert frame is not None
        np.testing.assert_array_equal(frame.picture, picture)
    numbers = [frame.number for frame in frames if frame is not None]
    assert numbers == sorted(numbers) and numbers[-1] == len(decoded) - 1 + source.counts.skipped
    assert source.counts.skipped >= 1 and source.stats()["skipped"] == source.counts.skipped
    assert "could not be decoded" in caplog.text
