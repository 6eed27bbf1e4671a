"""``sbrs run`` end to end: JSON lines, summary, bad input (exit 2), SIGTERM, options."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sbrs.app import App
from sbrs.cli import main
from tests.conftest import REPO, REPO_BUILDS

pytestmark = REPO_BUILDS  # builds an example app inside the repository (tests/conftest.py)

TINY = str(REPO / "apps" / "tiny.yaml")


def test_run_prints_one_json_line_per_frame_and_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", TINY, "--frames", "5", "--seed", "3"]) == 0
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [line["frame"] for line in lines] == [0, 1, 2, 3, 4]
    for line in lines:
        assert line["scenario"] == "full" and line["latency_s"] > 0
        output = line["outputs"]["output"]
        assert output["shape"] == [1, 10] and len(output["top5"]) == 5
        values = [value for _, value in output["top5"]]
        assert values == sorted(values, reverse=True)
    assert "5 frames" in captured.err and "full 5" in captured.err and "arena" in captured.err
    assert main(["run", TINY, "--frames", "5", "--seed", "3"]) == 0
    again = json.loads(capsys.readouterr().out.splitlines()[0])
    assert again["outputs"] == lines[0]["outputs"]  # seeded: the same frames


def test_run_reads_a_folder_of_npy_frames_and_writes_a_file(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    frames = tmp_path / "frames"
    frames.mkdir()
    rng = np.random.default_rng(0)
    for index in range(3):
        np.save(frames / f"{index:03d}.npy", rng.standard_normal((3, 32, 32)).astype(np.float32))  # no batch dim
    output = tmp_path / "out.jsonl"
    assert main(["run", TINY, "--input", str(frames), "--output", str(output)]) == 0
    assert len(output.read_text().splitlines()) == 3
    assert "3 frames" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tiny_built() -> None:
    """apps/tiny.yaml's build, made first, so that a run's stderr holds only what the test looks for."""
    assert main(["build", TINY, "-q"]) == 0


@pytest.mark.parametrize("problem", ["missing folder", "wrong shape", "empty folder"])
def test_run_bad_input_is_one_line_and_exit_2(tiny_built: None, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              problem: str) -> None:
    folder = tmp_path / "frames"
    if problem != "missing folder":
        folder.mkdir()
    if problem == "wrong shape":
        np.save(folder / "a.npy", np.zeros((1, 3, 16, 16), np.float32))
    assert main(["run", TINY, "--frames", "2", "--input", str(folder)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and "frames" in captured.err


def test_run_stops_cleanly_on_sigterm_with_a_summary(tmp_path: Path) -> None:
    out_path = tmp_path / "frames.jsonl"
    with out_path.open("w") as out_file:
        process = subprocess.Popen([sys.executable, "-m", "sbrs.cli", "run", TINY], stdout=out_file,
                                   stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        deadline = time.monotonic() + 60
        while not out_path.read_text() and time.monotonic() < deadline:  # wait until frames are running
            time.sleep(0.05)
        time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    lines = [json.loads(line) for line in out_path.read_text().splitlines()]  # every line whole: no frame cut
    assert [line["frame"] for line in lines] == list(range(len(lines)))
    assert "stopped by a signal" in err, err
    assert f" {len(lines)} frames" in err, (len(lines), err)


def test_a_reader_that_leaves_ends_the_run_with_its_summary(tmp_path: Path) -> None:
    """``sbrs run APP | head -1``: the run ends after the frame whose line found no reader, quietly (no
    traceback), with its summary written; the --summary file was left empty (it is opened before the first frame)."""
    summary = tmp_path / "summary.json"
    process = subprocess.Popen([sys.executable, "-m", "sbrs.cli", "run", TINY, "--no-socket", "--summary",
                                str(summary)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ))
    assert process.stdout is not None and process.stderr is not None
    first = json.loads(process.stdout.readline())
    process.stdout.close()  # as `head -1` does after its line
    err = process.stderr.read()
    assert process.wait(timeout=60) == 1 and first["frame"] == 0
    assert "Traceback" not in err and "Exception ignored" not in err and "error" not in err, err
    written = json.loads(summary.read_text())
    assert written["interrupted"] and written["frames"] >= 1


def test_run_order_option_is_validated(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["run", TINY, "--frames", "1", "--order", "sideways"])
    assert exit_info.value.code == 2
    assert main(["run", TINY, "--frames", "3", "--order", "stream", "--no-socket"]) == 0
    assert [json.loads(line)["frame"] for line in capsys.readouterr().out.splitlines()] == [0, 1, 2]


def test_run_prints_the_tcp_address_it_listens_on(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Issue 14, row 10: ``sbrs run`` never said where it listened on TCP."""
    assert main(["run", TINY, "--frames", "2", "--socket", str(tmp_path / "s.sock"), "--listen", "127.0.0.1:0"]) == 0
    err = capsys.readouterr().err
    assert "control protocol on tcp 127.0.0.1:" in err
    port = int(err.split("control protocol on tcp 127.0.0.1:")[1].split()[0])
    assert 0 < port < 65536


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (a device whose writes fail: full)")
@pytest.mark.parametrize("where", ["--output", "--summary", "stdout"])
def test_a_full_disk_under_the_results_is_one_line(where: str, tiny_built: None,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`--output /dev/full`, stdout on a full disk and `--summary /dev/full` were 'internal error: OSError: [Errno
    28] No space left on device', naming no file (the failed line's second flush, at close, hid the first)."""
    command = ["run", TINY, "--frames", "3", "--no-socket"]
    if where == "stdout":
        full = open("/dev/full", "w", encoding="utf-8")  # noqa: SIM115 (closed below)
        monkeypatch.setattr(sys, "stdout", full)
    else:
        command += [where, "/dev/full"]
    try:
        assert main(command) == 2
    finally:
        if where == "stdout":
            monkeypatch.undo()
            with contextlib.suppress(OSError):
                full.close()
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(f"sbrs: error: {'' if where == 'stdout' else where + ': '}"), err
    assert "No space left on device" in err and "internal error" not in err, err


def test_a_closed_stdout_is_one_line_before_the_models_load(tiny_built: None, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`sbrs run APP >&-` (Python makes sys.stdout None) was 'internal error: AttributeError: 'NoneType' object
    has no attribute 'write'', after the models loaded."""
    monkeypatch.setattr(sys, "stdout", None)
    assert main(["run", TINY, "--frames", "1", "--no-socket"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--output: stdout is closed" in err, err


def test_run_frames_takes_no_frame_past_its_limit_and_keeps_the_sources_live(
        load_example: Callable[[str], App]) -> None:
    """``--frames N`` took frame N+1 from the source before stopping (its summary said 201 read for 200), and the
    generator run_frames handed the runtime hid the source's ``live``: a file's or synthetic frames, which never
    wait, were then taken as frames that may (on two streams: a copy of each, and no stream on the caller's
    thread)."""
    from sbrs.run.frames import open_source
    from sbrs.run.loop import run_frames
    from sbrs.runtime import runtime_for
    from sbrs.runtime.runner import frames_never_wait

    app = load_example("tiny")
    seen = []
    with runtime_for(app) as runtime, open_source(None, app.config.input) as source:
        process = runtime.process

        def recording(frames: Any, **options: Any) -> Any:
            seen.append(frames_never_wait(frames))
            return process(frames, **options)

        runtime.process = recording  # type: ignore[method-assign]
        summary = run_frames(runtime, source, limit=5)
    assert sum(summary.frames.values()) == 5 and source.counts.read == 5
    assert source.live is False and seen == [True]
