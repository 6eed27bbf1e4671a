"""Logging: the library logs through the ``sbrs`` loggers and configures nothing; the command shows INFO,
``-v`` DEBUG (the arena chart) and ``-q`` warnings and errors only; long steps report throttled progress."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sbrs.artifact.build import build_app
from sbrs.cli import main
from sbrs.log import Progress
from tests.conftest import REPO

TINY = REPO / "apps" / "tiny.yaml"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def progress_lines(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, times: list[float],
                   **options: object) -> list[str]:
    """The lines of a ``Progress`` over 10 steps, step k done at ``times[k]`` seconds."""
    clock = Clock()
    monkeypatch.setattr("sbrs.log.time.monotonic", clock)
    caplog.set_level(logging.INFO, logger="sbrs.test")
    caplog.clear()
    progress = Progress(logging.getLogger("sbrs.test"), "work", 10, unit="parts", **options)  # type: ignore[arg-type]
    for done, at in enumerate(times, 1):
        clock.now = at
        progress(done)
    return [record.getMessage() for record in caplog.records]


def test_a_short_step_says_nothing(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    assert progress_lines(monkeypatch, caplog, [0.1 * k for k in range(1, 11)]) == []


def test_a_long_step_speaks_at_most_once_a_second_or_a_tenth(monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    lines = progress_lines(monkeypatch, caplog, [3.0 + 0.1 * k for k in range(10)])
    assert lines[0] == "work: 10% (1/10 parts)" and lines[-1] == "work: 100% (10/10 parts)"
    assert len(lines) <= 10
    slow = progress_lines(monkeypatch, caplog, [3.0, *[3.0 + 0.01 * k for k in range(1, 10)]], step=0.5)
    assert slow == ["work: 10% (1/10 parts)", "work: 60% (6/10 parts)", "work: 100% (10/10 parts)"]


def test_the_search_always_reports_its_end(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    lines = progress_lines(monkeypatch, caplog, [0.01 * k for k in range(1, 11)], after_s=0.0, always_end=True)
    assert lines and lines[-1] == "work: 100% (10/10 parts)"


def test_the_library_configures_no_handler_and_writes_nothing(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """In a fresh interpreter: building and running an app leaves the root logger, the sbrs logger's handlers
    and the warnings filters as they were (after the dependencies' own imports: numpy and transitions add
    filters of their own), and writes nothing on stderr. (The app is built here first, so the child's build takes
    its timings from the cache: measured afresh on a loaded machine they come with a warning, by design.)"""
    app = tmp_path / "tiny.yaml"
    shutil.copy(TINY, app)
    build_app(app)
    code = f"""
import logging, sys, warnings
import numpy as np, onnx, onnxruntime, pydantic, yaml, deap.base, transitions  # their own filters, set on import
filters = list(warnings.filters)
from sbrs.artifact.build import build_app
import sbrs
build_app({str(app)!r})
with sbrs.runtime_for({str(app)!r}) as runtime:
    runtime.infer(np.zeros((1, 3, 32, 32), np.float32))
assert logging.getLogger().handlers == [], logging.getLogger().handlers
assert logging.getLogger("sbrs").handlers == [] and logging.getLogger("sbrs").level == logging.NOTSET
assert warnings.filters == filters
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert done.stderr == ""


def test_verbose_shows_the_arena_chart_and_quiet_hides_the_summary(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    app = tmp_path / "tiny.yaml"
    shutil.copy(TINY, app)
    assert main(["build", str(app), "-v"]) == 0
    err = capsys.readouterr().err
    assert "arena of app 'tiny':" in err and "lower bound" in err and "blocks: a=" in err
    assert main(["build", str(app)]) == 0
    assert "arena of app" not in capsys.readouterr().err
    assert main(["run", str(app), "--frames", "2", "--no-socket"]) == 0
    assert "2 frames" in capsys.readouterr().err
    assert main(["run", str(app), "--frames", "2", "--no-socket", "-q"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and len(captured.out.splitlines()) == 2  # the frames are output, not logging
    assert logging.getLogger("sbrs").handlers == []  # the command's handler is gone once it returns
