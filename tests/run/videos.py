"""Real videos and live streams for the frame-source tests, made here: files by ffmpeg's test sources (Debian's
``ffmpeg``; ``.ci/run`` installs it) and streams by ``ffmpeg -re`` sending on loopback UDP, as a camera
encoder or a drone's video link would."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest


def ffmpeg() -> str:
    found = shutil.which("ffmpeg")
    if found is None:
        pytest.skip("ffmpeg is not installed (apt-get install ffmpeg; .ci/run installs it)")
    return found


def make_video(path: Path, width: int, height: int, frames: int, fps: int = 30, pattern: str = "testsrc") -> Path:
    """A video of ``frames`` frames of ffmpeg's ``pattern`` (moving: every frame differs) at ``fps``."""
    subprocess.run([ffmpeg(), "-v", "error", "-y", "-f", "lavfi", "-i", f"{pattern}=size={width}x{height}:rate={fps}",
                    "-frames:v", str(frames), "-pix_fmt", "yuv420p", str(path)], check=True, timeout=60)
    return path


def read_video(path: Path) -> list[np.ndarray]:
    """Every frame of ``path`` as OpenCV decodes it (BGR), read here independently of sbrs."""
    import cv2

    capture = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame)
    capture.release()
    return frames


def free_udp_port() -> int:
    """A UDP port free on 127.0.0.1 now (and its RTCP neighbour, for RTP)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port % 2 == 0 and port < 65534:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as neighbour:
                try:
                    neighbour.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port


@contextmanager
def sending(clip: Path, port: int, protocol: str = "udp", *, loop: bool = False) -> Iterator[subprocess.Popen[bytes]]:
    """``ffmpeg -re`` sending ``clip`` at its frame rate as MPEG-TS over UDP (``udp``) or over RTP (``rtp``) to
    127.0.0.1:``port``, bound to loopback itself; stopped (killed) when the block ends."""
    muxer = {"udp": "mpegts", "rtp": "rtp_mpegts"}[protocol]
    process = subprocess.Popen(
        [ffmpeg(), "-v", "error", "-re", *(["-stream_loop", "-1"] if loop else []), "-i", str(clip),
         "-c:v", "mpeg2video", "-q:v", "4", "-g", "10", "-f", muxer,
         f"{protocol}://127.0.0.1:{port}?localaddr=127.0.0.1&pkt_size=1316"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield process
    finally:
        process.kill()
        process.wait(timeout=10)
