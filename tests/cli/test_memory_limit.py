"""``sbrs build`` + ``sbrs run`` on an app with ``memory_limit_mb`` (tests/data/limited): the run executes the
band calls the build saved, within the limit, with outputs equal to ONNX Runtime, switches over the control
socket under SBRS-TP, reports its memory in the summary; an unreachable or mismatched limit is exit 2."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sbrs.app import load_app
from sbrs.cli import main
from tests.conftest import modules_a_run_loads, ort_session

# one worker runs this module: its module-scoped builds are made once, not once on each xdist worker
pytestmark = pytest.mark.xdist_group("memory-limit")

LIMITED = Path(__file__).resolve().parents[1] / "data" / "limited" / "limited.yaml"
SMALL_SEARCH = ("--generations", "6", "--population", "12", "--cost", "analytic")  # deterministic


def _sbrs(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sbrs.cli", *args], capture_output=True, text=True, check=False,
                          timeout=timeout)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("limited-cli") / "limited.yaml"
    shutil.copy(LIMITED, path)
    result = _sbrs("build", str(path), "--json", *SMALL_SEARCH)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["build"]["execution"] == "parts" and report["build"]["call_files"] > 0
    assert not report["reduction"]["early_exit"]
    parts = report["build"]["run_by_parts"]
    assert parts["params_bytes"] + parts["arena_bytes"] <= report["memory_limit_bytes"] == 870_000
    return path


def test_run_executes_the_saved_band_calls_within_the_limit_like_onnx_runtime(built: Path, tmp_path: Path) -> None:
    frames = tmp_path / "frames"
    frames.mkdir()
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(3)]
    for index, array in enumerate(arrays):
        np.save(frames / f"{index}.npy", array)
    summary_path = tmp_path / "summary.json"
    result = _sbrs("run", str(built), "--input", str(frames), "--no-socket", "--summary", str(summary_path))
    assert result.returncode == 0, result.stderr
    assert "building" not in result.stderr  # the build was current
    summary = json.loads(summary_path.read_text())
    memory = summary["memory"]
    assert memory["execution"] == "parts" and memory["limit_bytes"] == 870_000 and memory["within_limit"]
    assert memory["params_bytes"] + memory["arena_bytes"] <= memory["limit_bytes"]
    assert f"= {memory['total_bytes'] / 1e6:.3f} MB of a 0.870 MB limit" in result.stderr
    model = load_app(built).config.scenarios[0].model_path
    reference = ort_session(model)
    for line, array in zip(result.stdout.splitlines(), arrays, strict=True):
        record = json.loads(line)
        want = reference.run(None, {"input": array})[0][0]
        for index, value in record["outputs"]["output"]["top5"]:
            assert abs(value - float(want[index])) <= 1e-5 * max(1.0, float(np.abs(want).max()))


def test_run_switches_over_the_socket_under_sbrs_tp(built: Path, tmp_path: Path) -> None:
    socket_path = str(tmp_path / "c.sock")
    summary_path = tmp_path / "summary.json"
    process = subprocess.Popen([sys.executable, "-m", "sbrs.cli", "run", str(built), "--socket", socket_path,
                                "--summary", str(summary_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=dict(os.environ))
    try:
        assert process.stdout is not None
        first = json.loads(process.stdout.readline())
        assert first["scenario"] == "full"
        deadline = time.monotonic() + 60
        while not os.path.exists(socket_path) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert main(["switch", "skip", "--socket", socket_path]) == 0
        switch = None
        while switch is None and time.monotonic() < deadline:
            record = json.loads(process.stdout.readline())
            switch = record.get("switch")
        assert switch is not None and switch["new"] == "skip" and switch["mode"] == "sbrs-tp"
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    summary = json.loads(summary_path.read_text())
    assert summary["switches"] >= 1 and summary["memory"]["within_limit"]
    assert summary["memory"]["transition"] == "sbrs-tp"


def test_running_a_build_by_parts_imports_only_what_it_needs(built: Path) -> None:
    assert modules_a_run_loads(built) == []


def test_an_unreachable_limit_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "limited.yaml"
    path.write_text(LIMITED.read_text().replace("memory_limit_mb: 0.87", "memory_limit_mb: 0.5"))
    for command in (("build", str(path), *SMALL_SEARCH), ("run", str(path), "--frames", "1", "--no-socket")):
        result = _sbrs(*command)
        assert result.returncode == 2, result.stderr
        lines = [line for line in result.stderr.splitlines() if line.startswith("sbrs")]
        assert "memory limit 0.5 MB" in lines[-1] and "Traceback" not in result.stderr


def test_a_build_made_for_a_larger_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "limited.yaml"
    shutil.copy(LIMITED, path)
    assert _sbrs("build", str(path), "--memory-limit", "0.95").returncode == 0  # fits unreduced: units
    result = _sbrs("run", str(path), "--frames", "1", "--no-socket")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "memory limit of 0.95 MB" in lines[0] and "sbrs build" in lines[0]


def test_an_unwritable_summary_is_refused_before_the_first_frame(built: Path, tmp_path: Path) -> None:
    result = _sbrs("run", str(built), "--frames", "2", "--no-socket", "--summary", str(tmp_path / "no" / "s.json"))
    assert result.returncode == 2 and result.stdout == ""
    assert "--summary" in result.stderr and "cannot write" in result.stderr


def test_a_granularity_asked_of_a_build_by_parts_is_reported_unused(built: Path) -> None:
    result = _sbrs("run", str(built), "--frames", "1", "--no-socket", "--granularity", "layer")
    assert result.returncode == 0, result.stderr
    assert "--granularity layer does not apply" in result.stderr
