"""The build sequence as a library function (``sbrs.artifact.build.build_app``), building in a child process
(``sbrs.artifact.child``: results and errors come back structured, never parsed from a command line's
stderr), and ``sbrs.runtime_for`` on a path (what ``sbrs run`` holds) and on an app under a memory limit (no
search behind the caller's back)."""

from __future__ import annotations

import ast
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sbrs.app import load_app
from sbrs.artifact.build import BuildResult, build_app
from sbrs.artifact.child import build_in_child
from sbrs.artifact.read import MANIFEST, build_dir, load_build
from sbrs.cli import main
from sbrs.errors import InputError
from sbrs.runtime import runtime_for
from tests.conftest import FORBIDDEN_FOR_UNITS, REPO

LIMITED = REPO / "tests" / "data" / "limited" / "limited.yaml"


def copy_app(tmp_path: Path, source: Path) -> Path:
    path = tmp_path / source.name
    shutil.copy(source, path)
    return path


def test_build_app_is_what_sbrs_build_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # a steady load and timings of its own: figures kept from a busy moment (this build's, or another worker's build
    # of tiny in between) would be taken again by the second build
    monkeypatch.setattr("sbrs.compile.timing_cache.load_average", lambda: 0.0)
    monkeypatch.setattr("sbrs.compile.timing_cache.cache_dir", lambda kind: tmp_path / "cache" / kind)
    app_path = copy_app(tmp_path, REPO / "apps" / "tiny.yaml")
    result = build_app(app_path)
    assert isinstance(result, BuildResult) and result.violation_error() is None
    assert result.folder == build_dir(app_path) and (result.folder / MANIFEST).is_file()
    assert result.plan_path == tmp_path / "tiny.plan.json" and result.plan_path.is_file()
    assert result.to_dict()["build"]["execution"] == "units" and load_build(app_path).plan is not None
    assert main(["build", str(app_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = json.loads(json.dumps(result.to_dict(), default=str))
    # the second build takes the first one's timings (sbrs.compile.timing_cache): the same build, figure for figure
    assert printed == expected
    streams = printed["build"]["streams"]
    assert set(streams) == {"streams", "asked", "reason", "gain", "load", "figures"} and streams["asked"] == "auto"


def test_a_build_in_a_child_answers_with_its_result(tmp_path: Path) -> None:
    app_path = copy_app(tmp_path, REPO / "apps" / "tiny.yaml")
    answer = build_in_child(app_path)
    assert answer["build"]["folder"] == str(build_dir(app_path.resolve()))
    assert load_build(app_path).config.name == "tiny"


@pytest.mark.parametrize("damage", ["unknown key", "missing model"])
def test_a_childs_error_is_the_same_error_here(tmp_path: Path, damage: str) -> None:
    app_path = copy_app(tmp_path, REPO / "apps" / "tiny.yaml")
    text = app_path.read_text()
    if damage == "unknown key":
        app_path.write_text(text.replace("initial: full", "initial: full\nspeed: 3"))
    else:
        app_path.write_text("name: one\ninput: {name: input, shape: [1, 3, 32, 32], dtype: float32}\n"
                            "initial: only\nscenarios:\n  - {name: only, model: nowhere.onnx, "
                            "requirements: {accuracy: 1.0}}\n")
    with pytest.raises(InputError) as here:
        build_app(app_path)
    with pytest.raises(InputError) as there:
        build_in_child(app_path)
    assert str(there.value) == str(here.value)
    assert (there.value.file, there.value.line, there.value.field) == (here.value.file, here.value.line,
                                                                       here.value.field)


def test_the_library_never_runs_its_own_command_line() -> None:
    """No module names ``sbrs.cli`` in a string (``python -m sbrs.cli`` in a subprocess) but the CLI itself and
    ``sbrs bench``, which measures the ``sbrs run`` command from outside as its user runs it."""
    found = []
    for path in sorted((REPO / "sbrs").rglob("*.py")):
        if (path.name == "cli.py" and path.parent.name == "sbrs") or "bench" in path.relative_to(REPO).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip() == "sbrs.cli":
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []


def modules_runtime_for_loads(app: Path) -> list[str]:
    """Which of ``FORBIDDEN_FOR_UNITS`` and the app stage's loader a fresh process running 2 frames through
    ``sbrs.runtime_for(path)`` imports."""
    forbidden = (*FORBIDDEN_FOR_UNITS, "sbrs.app.app")
    code = f"""
import sys
import numpy as np
import sbrs
with sbrs.runtime_for({str(app)!r}) as runtime:
    for _ in range(2):
        runtime.infer(np.zeros((1, 3, 32, 32), np.float32))
print("LOADED", sorted(m for m in {forbidden!r} if m in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("LOADED "))
    return list(ast.literal_eval(line.removeprefix("LOADED ")))


def test_runtime_for_a_path_holds_what_sbrs_run_holds(tmp_path: Path) -> None:
    app_path = copy_app(tmp_path, REPO / "apps" / "tiny.yaml")
    assert modules_runtime_for_loads(app_path) == []  # no build yet: built in a child, then loaded
    assert (build_dir(app_path) / MANIFEST).is_file()
    assert modules_runtime_for_loads(app_path) == []  # from the build


def test_runtime_for_a_path_refuses_a_bad_build_as_sbrs_run_does(tmp_path: Path) -> None:
    app_path = copy_app(tmp_path, REPO / "apps" / "tiny.yaml")
    build_app(app_path)
    (build_dir(app_path) / MANIFEST).write_text("{}")
    with pytest.raises(InputError, match="run `sbrs build"):
        runtime_for(app_path)
    with pytest.raises(InputError, match="run `sbrs build"):
        runtime_for(str(app_path))


def test_runtime_for_an_app_never_searches(tmp_path: Path) -> None:
    """An app whose memory limit needs processing by parts, with neither a build nor a saved choice: refused
    with the command to run, instead of a search behind the caller's back."""
    app_path = copy_app(tmp_path, LIMITED)
    with pytest.raises(InputError, match=r"sbrs build .*limited\.yaml") as refused:
        runtime_for(load_app(app_path))
    assert refused.value.field == "memory_limit_mb"


def test_a_childs_log_records_come_back_as_they_are(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The child logs at the level the parent's sbrs logger has, and its records are logged again here under
    their own logger names (DEBUG: each model's import, the arena chart)."""
    app_path = copy_app(tmp_path, REPO / "apps" / "tiny.yaml")
    caplog.set_level(logging.DEBUG, logger="sbrs")
    build_in_child(app_path)
    records = [(record.name, record.levelno, record.getMessage()) for record in caplog.records]
    assert ("sbrs.app.app", logging.DEBUG) in {(name, level) for name, level, _ in records}
    assert any(name == "sbrs.artifact.build" and "arena of app 'tiny'" in text for name, _, text in records)
    caplog.clear()
    caplog.set_level(logging.WARNING, logger="sbrs")
    build_in_child(app_path)
    assert [record for record in caplog.records if record.name.startswith("sbrs")] == []


def test_a_stop_ends_the_childs_build_and_keeps_nothing(tmp_path: Path) -> None:
    """``stop`` set while the child builds (a signal to ``sbrs run``) ends the child at once, instead of waiting
    for the whole build; nothing it wrote is left, not even its temporary folder."""
    import threading

    from sbrs.artifact.child import BuildStopped

    app_path = copy_app(tmp_path, REPO / "apps" / "tiny.yaml")
    stop = threading.Event()

    class StopOnFirstRecord(logging.Handler):  # the child is importing the app's models: mid-build
        def emit(self, record: logging.LogRecord) -> None:
            stop.set()

    root = logging.getLogger("sbrs")
    handler, level = StopOnFirstRecord(), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        with pytest.raises(BuildStopped, match="stopped by a signal while building"):
            build_in_child(app_path, stop=stop)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    assert stop.is_set()
    assert sorted(path.name for path in tmp_path.iterdir() if "build" in path.name) == []


@pytest.mark.parametrize("signals", [("SIGINT",), ("SIGTERM",), ("SIGINT", "SIGTERM")],
                         ids=["Ctrl-C to the group", "SIGTERM", "Ctrl-C then SIGTERM"])
def test_a_signal_while_sbrs_run_builds_stops_it(signals: tuple[str, ...], tmp_path: Path) -> None:
    """Ctrl-C while ``sbrs run`` built (the terminal signals the child too) said 'building ... failed:
    KeyboardInterrupt', exit 1, no summary; SIGTERM waited for the whole build and the models to load. Both now
    end the child, write the summary and exit 0, the app left without a build (the next run builds it)."""
    import os
    import signal
    import time

    app_path = copy_app(tmp_path, REPO / "apps" / "tiny.yaml")
    summary = tmp_path / "summary.json"
    process = subprocess.Popen([sys.executable, "-m", "sbrs.cli", "run", str(app_path), "--no-socket", "--summary",
                                str(summary)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        assert process.stderr is not None
        assert "building" in process.stderr.readline()
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
        deadline = time.monotonic() + 30
        while not children.read_text().split():  # the child started: it is importing, far from done
            assert time.monotonic() < deadline, "no build child started"
            time.sleep(0.01)
        for name in signals:
            sig = getattr(signal, name)
            if sig == signal.SIGINT:
                os.killpg(process.pid, sig)  # as a terminal's Ctrl-C: the whole process group
            else:
                process.send_signal(sig)
        err = process.stderr.read()
        assert process.wait(timeout=60) == 0, err
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert "stopped by a signal while building" in err and "Traceback" not in err, err
    assert json.loads(summary.read_text())["interrupted"] is True
    assert sorted(path.name for path in tmp_path.iterdir() if "build" in path.name) == []
    left = subprocess.run(["pgrep", "-g", str(process.pid)], capture_output=True, text=True, check=False).stdout
    assert left == "", f"processes left in the run's group: {left}"


def test_a_build_child_ends_when_its_parent_is_killed(tmp_path: Path) -> None:
    """A parent killed with SIGKILL can end nothing itself: its build child ran to its end for nobody. Linux now
    tells the child (SIGTERM at its parent's death), which unwinds as on a signal and keeps nothing."""
    import os
    import time

    app_path = copy_app(tmp_path, REPO / "apps" / "tiny.yaml")
    parent = subprocess.Popen(
        [sys.executable, "-c", "import os, subprocess, sys, time\n"
         f"child = subprocess.Popen([sys.executable, '-m', 'sbrs.artifact.child', {str(app_path)!r}, "
         "'--parent', str(os.getpid())], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
         "print(child.pid, flush=True)\ntime.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    time.sleep(0.3)  # the child is importing, or building
    parent.kill()
    parent.wait(10)
    deadline = time.monotonic() + 20
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        with open(f"/proc/{child}/stat") as stat:  # a zombie has ended (its parent, init, reaps it)
            if stat.read().split(")")[-1].split()[0] == "Z":
                break
        time.sleep(0.05)
    assert time.monotonic() < deadline, "the build child outlived its killed parent"
    assert sorted(path.name for path in tmp_path.iterdir() if "build" in path.name) == []
