"""Live streams on loopback: ``ffmpeg -re`` sends a clip as MPEG-TS over UDP or RTP to 127.0.0.1, and ``sbrs run
--source udp://@127.0.0.1:PORT`` (or ``rtp://``) consumes it; the sender killed and started again shows the
reconnect; a taker slower than the stream shows dropped frames and no stale frame; garbage and a stream that
vanishes end cleanly."""

from __future__ import annotations

import functools
import http.server
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from sbrs.app.config import InputSpec
from sbrs.app.preprocess import Preprocessor
from sbrs.cli import main
from sbrs.errors import InputError
from sbrs.run.capture import CaptureSource
from sbrs.run.frames import open_source
from sbrs.run.sources import parse_source
from tests.run.test_capture import APP
from tests.run.videos import ffmpeg, free_udp_port, make_video, sending

pytest.importorskip("cv2")
SPEC = InputSpec("input", (1, 3, 32, 32), "float32")


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """320x240, 2 s at 30 fps (senders loop it)."""
    return make_video(tmp_path_factory.mktemp("stream") / "clip.mp4", 320, 240, 60)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny app, built once for the module."""
    path = tmp_path_factory.mktemp("app") / "app.yaml"
    path.write_text(APP)
    assert main(["build", str(path)]) == 0
    return path


def run(app: Path, folder: Path, *arguments: str) -> tuple[int, list[dict], dict]:
    """``sbrs run`` in this process: its exit status, JSON lines and summary."""
    output, summary = folder / "lines.jsonl", folder / "summary.json"
    status = main(["run", str(app), "--no-socket", "--output", str(output), "--summary", str(summary), *arguments])
    lines = [json.loads(line) for line in output.read_text().splitlines()] if output.exists() else []
    return status, lines, json.loads(summary.read_text()) if summary.exists() and summary.stat().st_size else {}


@pytest.mark.parametrize("protocol", ["udp", "rtp"])
def test_sbrs_run_consumes_a_live_stream(app: Path, clip: Path, tmp_path: Path, protocol: str) -> None:
    port = free_udp_port()
    with sending(clip, port, protocol, loop=True):
        status, lines, summary = run(app, tmp_path, "--source", f"{protocol}://@127.0.0.1:{port}", "--frames", "20")
    assert status == 0 and [line["frame"] for line in lines] == list(range(20))
    source = summary["source"]
    assert (source["kind"], source["live"], source["fps"], source["reconnects"]) == ("stream", True, 30.0, 0)
    assert source["read"] >= 20 and 0 <= source["dropped"] <= source["read"] - 20


@pytest.mark.parametrize("protocol", ["udp", pytest.param("rtp", marks=pytest.mark.slow)])  # one reopening path: udp keeps it fast
def test_a_stream_whose_sender_restarts_is_reopened(app: Path, clip: Path, tmp_path: Path, protocol: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """The sender is killed after some frames and started again later than a read waits: the run logs the
    reopening, counts it, and goes on with the new sender's frames up to --frames. (OpenCV's RTP reader waits
    through three read timeouts before it gives up: a shorter gap there resumes the same stream.)"""
    port = free_udp_port()
    output = tmp_path / "lines.jsonl"
    restarted: list[object] = []

    def kill_then_restart(first: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not output.exists() or len(output.read_text().splitlines()) < 10):
            time.sleep(0.05)
        first.kill()
        time.sleep(3.0 if protocol == "udp" else 7.0)  # longer than a read waits (READ_TIMEOUT_S): it is gone
        second = sending(clip, port, protocol, loop=True)
        second.__enter__()
        restarted.append(second)

    with sending(clip, port, protocol, loop=True) as first:
        killer = threading.Thread(target=kill_then_restart, args=(first,))
        killer.start()
        try:
            status, lines, summary = run(app, tmp_path, "--source", f"{protocol}://@127.0.0.1:{port}",
                                         "--frames", "45")
        finally:
            killer.join()
            for second in restarted:
                second.__exit__(None, None, None)  # type: ignore[attr-defined]
    assert status == 0 and len(lines) == 45
    assert summary["source"]["reconnects"] == 1
    messages = [record.getMessage() for record in caplog.records]
    assert any("stopped giving frames; reopening it" in message for message in messages)
    assert any("reopened after" in message and "reconnection 1" in message for message in messages)


def test_a_taker_slower_than_the_stream_gets_the_newest_frames(clip: Path) -> None:
    """30 fps in, 10 fps taken: about two frames in three are dropped and counted (the metric too), and each
    frame handed over is the newest: about one frame time old at most."""
    from sbrs.metrics.observer import MetricsObserver

    observer = MetricsObserver(["a"], process_metrics=False)
    port = free_udp_port()
    with sending(clip, port, "udp", loop=True), \
            open_source(f"udp://@127.0.0.1:{port}", SPEC, observers=observer) as source:
        frames = []
        for index, _ in enumerate(source):
            frames.append(source.taken(index))
            time.sleep(0.1)
            if index == 15:
                break
    numbers = [frame.number for frame in frames]
    assert numbers == sorted(set(numbers)) and numbers[-1] - numbers[0] >= 30
    counts = source.counts
    assert counts.dropped >= 20 and observer.registry.get_sample_value("sbrs_source_frames_dropped_total") == \
        counts.dropped
    ages = sorted(frame.age_s for frame in frames[1:])  # the first waited for the stream to start
    assert ages[len(ages) // 2] <= 1 / 30 + 0.02 and ages[-1] <= 0.25, ages


def test_a_stream_that_vanishes_ends_the_run_cleanly_without_reconnect(app: Path, clip: Path, tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    port = free_udp_port()
    with sending(clip, port, "udp") as sender:  # the 2 s clip once, then the sender is gone
        status, lines, summary = run(app, tmp_path, "--source", f"udp://@127.0.0.1:{port}", "--no-reconnect")
        assert sender.wait(timeout=10) == 0
    assert status == 0 and 10 <= len(lines) <= 60 and summary["frames"] == len(lines)
    assert not summary["interrupted"] and summary["source"]["reconnects"] == 0
    assert any("the stream stopped giving frames; its frames end" in record.getMessage()
               for record in caplog.records)  # the run said nothing of why it ended


def test_closing_a_stream_being_reopened_does_not_wait_for_the_attempt(clip: Path) -> None:
    """Ctrl-C while a stream is reopened (an attempt may take its whole open timeout): ``close`` waited as for a
    read in progress, 3 s, before the run could stop. The attempt is not waited for; the thread lets the source go
    when it ends."""
    import cv2

    port = free_udp_port()
    attempt_started, attempt_may_end = threading.Event(), threading.Event()
    with sending(clip, port, "udp", loop=True) as sender:
        source = open_source(f"udp://@127.0.0.1:{port}", SPEC, reconnect=True)
        assert isinstance(source, CaptureSource)
        next(iter(source))

        def slow_open() -> object:  # an open that takes its timeout: nothing answers
            attempt_started.set()
            attempt_may_end.wait(10)
            return cv2.VideoCapture()

        source._open = slow_open  # type: ignore[method-assign]
        sender.kill()
        assert attempt_started.wait(10)  # the read timed out and the source is being reopened
        started = time.monotonic()
        source.close()
        closing_took = time.monotonic() - started
        attempt_may_end.set()
    source._thread.join(5)
    assert closing_took < 1.0 and not source._thread.is_alive()


def test_garbage_datagrams_are_no_stream(tmp_path: Path) -> None:
    """Random bytes on the port: nothing FFmpeg can read, so the stream cannot be opened (one line)."""
    import socket

    port = free_udp_port()
    stop = threading.Event()

    def spray() -> None:
        rng = np.random.default_rng(0)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            sender.bind(("127.0.0.1", 0))
            while not stop.is_set():
                sender.sendto(rng.integers(0, 256, 1316, dtype=np.uint8).tobytes(), ("127.0.0.1", port))
                time.sleep(0.002)

    sprayer = threading.Thread(target=spray)
    sprayer.start()
    try:
        with pytest.raises(InputError) as error:
            CaptureSource(parse_source(f"udp://@127.0.0.1:{port}"), Preprocessor(SPEC), open_timeout_s=1.5,
                          read_timeout_s=1.0)
    finally:
        stop.set()
        sprayer.join()
    assert f"udp://@127.0.0.1:{port}: cannot open the stream" in str(error.value) or "gave no frame" in str(error.value)


@pytest.fixture
def hls(clip: Path, tmp_path: Path) -> Iterator[str]:
    """The clip as an HLS playlist served over HTTP on 127.0.0.1; its URL."""
    folder = tmp_path / "hls"
    folder.mkdir()
    subprocess.run([ffmpeg(), "-v", "error", "-i", str(clip), "-c:v", "mpeg2video", "-f", "hls", "-hls_time", "1",
                    "-hls_playlist_type", "vod", str(folder / "index.m3u8")], check=True, timeout=60)
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.m3u8"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_hls_stream_over_http(app: Path, hls: str, tmp_path: Path) -> None:
    """A stream, so read at its own pace (here a finished playlist: as fast as it downloads), the newest frame
    taken: every frame of the clip is read, and either given to the app or counted as dropped; the end of the
    playlist ends the run."""
    status, lines, summary = run(app, tmp_path, "--source", hls, "--no-reconnect")
    source = summary["source"]
    assert status == 0 and source["kind"] == "stream" and source["read"] == 60
    assert len(lines) + source["dropped"] == 60 and len(lines) >= 1
