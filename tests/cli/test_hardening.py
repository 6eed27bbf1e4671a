"""Issue 14, one row per probe: bad or hostile input answered in one line (exit 2), never an internal error.

The command-line rows run ``sbrs.cli.main`` in this process and check the exit status and that stderr is one
line naming the culprit. Rows about the socket, the metrics endpoint and the runtime have their tests beside
the code they exercise (tests/server, tests/metrics, tests/runtime); this file keeps the rows of the table
that a user meets at the command line, plus signals and the model cache.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from sbrs.cli import main
from sbrs.runtime import runtime_for
from tests.conftest import REPO_BUILDS

pytestmark = REPO_BUILDS  # runs and builds apps/tiny.yaml inside the repository (tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "apps" / "tiny.yaml"

INLINE_APP = """name: probe
input: {{name: input, shape: {shape}, dtype: float32}}
scenarios:
  - name: only
    layers: [{{op: conv, out: 4, kernel: 3, pad: 1, act: relu}}, {{op: gap}}, {{op: flatten}}, {{op: fc, out: 3}}]
    requirements: {{accuracy: 1.0}}
"""


def _alias_bomb(folder: Path) -> list[str]:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
    path = folder / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    return ["check", str(path)]


def _deep_yaml(folder: Path) -> list[str]:
    path = folder / "deep.yaml"
    path.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    return ["check", str(path)]


def _npy_folder(folder: Path, write: Callable[[Path], None]) -> list[str]:
    frames = folder / "frames"
    frames.mkdir()
    write(frames)
    return ["run", str(TINY), "--no-socket", "--input", str(frames)]


def _empty_npy(folder: Path) -> list[str]:
    return _npy_folder(folder, lambda frames: (frames / "000.npy").write_bytes(b""))


def _nan_npy(folder: Path) -> list[str]:
    def write(frames: Path) -> None:
        frame = np.zeros((1, 3, 32, 32), np.float32)
        frame[0, 0, 0, 0] = np.nan
        np.save(frames / "000.npy", frame)

    return _npy_folder(folder, write)


def _image_folder(folder: Path, write: Callable[[Path], None]) -> list[str]:
    pytest.importorskip("PIL")
    images = folder / "images"
    images.mkdir()
    write(images)
    return ["run", str(TINY), "--no-socket", "--input", str(images)]


def _huge_png(folder: Path) -> list[str]:
    from PIL import Image

    return _image_folder(folder, lambda images: Image.new("L", (20000, 20000)).save(images / "big.png"))


def _corrupt_image_after_good_ones(folder: Path) -> list[str]:
    from PIL import Image

    def write(images: Path) -> None:
        for index in range(2):
            Image.new("RGB", (40, 40), (index * 50, 10, 10)).save(images / f"{index:03d}.png")
        good = (images / "000.png").read_bytes()
        (images / "002.png").write_bytes(good[: len(good) // 2])  # truncated

    return _image_folder(folder, write)


def _plan_at_directory(folder: Path) -> list[str]:
    (folder / "plan").mkdir()
    return ["build", str(TINY), "--plan", str(folder / "plan")]


def _plan_unwritable(folder: Path) -> list[str]:
    return ["build", str(TINY), "--plan", "/proc/sbrs-cannot-write/plan.json"]


def _huge_input_shape(folder: Path) -> list[str]:
    path = folder / "huge.yaml"
    path.write_text(INLINE_APP.format(shape="[1, 3, 20000, 20000]"))
    return ["run", str(path), "--no-socket", "--frames", "1"]


def _listen_without_socket(folder: Path) -> list[str]:
    return ["run", str(TINY), "--no-socket", "--listen", "0.0.0.0:0", "--frames", "1"]


def _empty_onnx(folder: Path) -> list[str]:
    (folder / "empty.onnx").write_bytes(b"")
    path = folder / "app.yaml"
    path.write_text(INLINE_APP.format(shape="[1, 3, 8, 8]").replace(
        "layers: [{op: conv, out: 4, kernel: 3, pad: 1, act: relu}, {op: gap}, {op: flatten}, {op: fc, out: 3}]",
        "model: empty.onnx"))
    return ["check", str(path)]


def _zoo_export_unwritable(folder: Path) -> list[str]:
    blocker = folder / "file"
    blocker.write_text("not a folder")
    return ["zoo", "export", "har_cnn", "-o", str(blocker / "model.onnx")]


def _bad_zoo_option(folder: Path) -> list[str]:
    path = folder / "zoo.yaml"
    path.write_text("name: zoo\ninput: {name: input, shape: [1, 3, 32, 32], dtype: float32}\nscenarios:\n"
                    "  - {name: a, zoo: {name: cifar_resnet, drop_blocks: [3]}, requirements: {accuracy: 1.0}}\n")
    return ["check", str(path)]


#: (issue 14 row, probe, what the one line must name)
CLI_ROWS: list[tuple[str, Callable[[Path], list[str]], str]] = [
    ("1 YAML alias bomb", _alias_bomb, "aliases expanded"),
    ("7 YAML nested 5000 deep", _deep_yaml, "levels deep"),
    ("7 0-byte .npy", _empty_npy, "000.npy"),
    ("5 NaN frame", _nan_npy, "NaN"),
    ("7 20000x20000 PNG", _huge_png, "big.png"),
    ("8 corrupt image after good ones", _corrupt_image_after_good_ones, "002.png"),
    ("7 build --plan at a directory", _plan_at_directory, "plan"),
    ("7 build --plan somewhere unwritable", _plan_unwritable, "cannot write"),
    ("7 20000x20000 input shape", _huge_input_shape, "input.shape"),
    ("10 --listen with --no-socket", _listen_without_socket, "--listen"),
    ("12 0-byte .onnx", _empty_onnx, "empty file"),
    ("7 a file in the way of a zoo export", _zoo_export_unwritable, "is not a directory"),
    ("12 a zoo option out of range", _bad_zoo_option, "block 3 has no identity shortcut"),
]


def test_a_bad_zoo_option_is_not_called_a_cache_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_bad_zoo_option(tmp_path)) == 2
    error = capsys.readouterr().err
    assert "droppable" in error and "cache" not in error and "SBRS_CACHE_DIR" not in error, error


@pytest.mark.parametrize(("row", "probe", "named"), CLI_ROWS, ids=[row for row, _, _ in CLI_ROWS])
def test_bad_input_is_one_line_and_exit_2(row: str, probe: Callable[[Path], list[str]], named: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    argv = probe(tmp_path)
    started = time.perf_counter()
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, f"row {row}: exit {code}, stderr {captured.err!r}"
    lines = [line for line in captured.err.splitlines() if line.startswith("sbrs: ")]
    assert len(lines) == 1 and lines[0].startswith("sbrs: error: "), captured.err
    assert "internal error" not in captured.err and named in lines[0], lines[0]
    assert captured.out == "", f"row {row}: no frame may be written before the error ({captured.out[:200]!r})"
    assert time.perf_counter() - started < 30


@pytest.mark.parametrize("problem", ["read-only", "file instead of folder", "missing"])
def test_cache_folder_trouble_is_one_line(problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Row 7: a read-only, file-instead-of-folder or missing cache folder."""
    cache = tmp_path / "cache"
    if problem == "read-only":
        cache.mkdir()
        cache.chmod(0o500)
        if os.access(cache, os.W_OK):  # root writes anywhere: make the folder unusable another way
            cache.chmod(0o700)
            (cache / "layers").write_text("a file where the cache wants a folder")
    elif problem == "file instead of folder":
        cache.write_text("not a folder")
    monkeypatch.setenv("SBRS_CACHE_DIR", str(cache))
    app = tmp_path / "app.yaml"
    app.write_text(INLINE_APP.format(shape="[1, 3, 8, 8]"))
    code = main(["check", str(app)])
    captured = capsys.readouterr()
    if problem == "missing":  # made on first use
        assert code == 0, captured.err
        return
    assert code == 2 and "SBRS_CACHE_DIR" in captured.err and captured.err.count("\n") == 1, captured.err


def test_a_replaced_cache_entry_is_made_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row 9: a cached ONNX replaced by another valid model (or corrupted) was used silently."""
    from sbrs.app import load_app

    monkeypatch.setenv("SBRS_CACHE_DIR", str(tmp_path / "cache"))
    app_file = tmp_path / "app.yaml"
    app_file.write_text(INLINE_APP.format(shape="[1, 3, 8, 8]"))
    first = load_app(app_file)
    entry = Path(first.config.scenarios[0].model_path)
    original = entry.read_bytes()
    other = tmp_path / "other.yaml"
    other.write_text(INLINE_APP.format(shape="[1, 3, 8, 8]").replace("out: 3", "out: 5"))
    replacement = Path(load_app(other).config.scenarios[0].model_path).read_bytes()
    for tampered in (replacement, original[: len(original) // 2]):
        entry.write_bytes(tampered)
        again = load_app(app_file)
        assert Path(again.config.scenarios[0].model_path).read_bytes() == original


@pytest.mark.slow  # the fast tier runs tests/bench's smoke test from such a folder, with the same assertions
def test_bench_probe_ignores_a_local_sbrs_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row 13: ``sbrs bench`` run from a folder holding a directory named ``sbrs``: the processes it measures
    (``sbrs run`` and the Python API probe) import the installed sbrs, not the folder."""
    from sbrs.bench.bench import current_build
    from sbrs.bench.device_memory import measure_device_memory

    current_build(str(TINY))
    (tmp_path / "sbrs").mkdir()
    (tmp_path / "sbrs" / "__init__.py").write_text("raise ImportError('the wrong sbrs')\n")
    monkeypatch.chdir(tmp_path)
    report = measure_device_memory(TINY, frames=1)
    assert report["sbrs_run"]["stages"]["ran"]["rss_bytes"] > 0
    assert "ran" in report["python_api"]["stages"]


def _start_run(tmp_path: Path) -> subprocess.Popen[str]:
    socket_path = tmp_path / "s.sock"
    process = subprocess.Popen([sys.executable, "-m", "sbrs.cli", "run", str(TINY), "--socket", str(socket_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 60
    while not socket_path.exists():
        assert process.poll() is None and time.monotonic() < deadline, "sbrs run did not start"
        time.sleep(0.05)
    time.sleep(0.3)
    return process


@pytest.mark.parametrize("signals", [(signal.SIGHUP,), (signal.SIGTERM, signal.SIGTERM)],
                         ids=["SIGHUP", "second SIGTERM during shutdown"])
def test_signals_stop_cleanly(signals: tuple[signal.Signals, ...], tmp_path: Path) -> None:
    """Row 11: SIGHUP killed the run without a summary and left the socket file; a second SIGTERM during the
    shutdown gave exit -15."""
    process = _start_run(tmp_path)
    for sig in signals:
        process.send_signal(sig)
        time.sleep(0.02)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert "sbrs run:" in stderr and "frames in" in stderr
    assert not (tmp_path / "s.sock").exists()


def test_the_run_summary_keeps_constant_memory() -> None:
    """Row 6: ``RunSummary.switches`` kept every switch record (~15 MB a day at one switch a second)."""
    from sbrs.run.loop import RECENT_SWITCHES, RunSummary
    from sbrs.runtime.control_node import SwitchRecord

    summary = RunSummary(arena_bytes=0)
    for index in range(10_000):
        summary.add_switch(SwitchRecord("a", "b", "api", "sbrs-tp", 0.001 * (index % 3), None, 0))
    report = summary.to_dict()
    assert report["switches"] == 10_000 and len(report["recent_switches"]) == RECENT_SWITCHES
    assert report["mean_response_delay_s"] == pytest.approx(0.001, rel=1e-3)
    json.dumps(report)


def test_nonfinite_outputs_make_valid_json() -> None:
    """Row 5: a frame whose output holds NaN wrote ``NaN`` into the JSON line, which is not JSON."""
    from sbrs.run.loop import FrameRecord, json_lines_writer

    class Sink:
        text = ""

        def write(self, text: str) -> None:
            self.text += text

        def flush(self) -> None:
            pass

    sink = Sink()
    outputs = {"logits": np.array([[1.0, np.nan, np.inf]], np.float32), "map": np.full((1, 2, 2), -np.inf)}
    json_lines_writer(sink)(FrameRecord(0, "a", 0.001, outputs))  # type: ignore[arg-type]
    line = json.loads(sink.text, parse_constant=lambda name: pytest.fail(f"{name} in a JSON line"))
    assert line["outputs"]["logits"]["nonfinite"] == 2 and line["outputs"]["map"]["nonfinite"] == 4


def test_a_plain_session_after_a_runtime_needs_shared_threads() -> None:
    """Row 14: once a runtime exists, ONNX Runtime refuses sessions with their own thread pools; the options
    sbrs documents for the user's own sessions work."""
    import onnxruntime as ort

    from sbrs.app import load_app
    from sbrs.ort_env import session_options

    app = load_app(TINY)
    with runtime_for(app):
        model = app.config.scenarios[0].model_path
        session = ort.InferenceSession(model, session_options(), providers=["CPUExecutionProvider"])
        frame = np.zeros(app.config.input.shape, np.float32)
        assert session.run(None, {session.get_inputs()[0].name: frame})[0].shape == (1, 10)


def test_a_full_disk_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Row 7: disk full during a zoo export (or any atomic write: plans, the cache)."""
    import errno

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full)
    assert main(["zoo", "export", "har_cnn", "-o", str(tmp_path / "model.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and "model.onnx" in err
    assert list(tmp_path.iterdir()) == []  # the temporary file is gone too
