"""Test-wide settings: a private model cache, and reference ONNX Runtime sessions with ONNX Runtime's defaults.

sbrs' sessions have threads of their own (``sbrs.ort_env``), so reference sessions are made as a plain ONNX
Runtime user makes them. A test of ``runtime.threads_scope: process`` (ONNX Runtime's process-wide pool, after
which ONNX Runtime refuses such sessions) runs in a fresh interpreter of its own.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort
import pytest

if TYPE_CHECKING:
    from sbrs.app import App
    from sbrs.model import CnnModel

REPO = Path(__file__).resolve().parents[1]
APPS = sorted((REPO / "apps").glob("*.yaml"))
#: The example apps the fast tier runs the resume proofs and switching stress tests on; the others: slow tier.
SMALL_APPS = ("tiny", "pamap2")


def example_apps_by_tier() -> list[object]:
    """Every example app's name as a pytest parameter, those outside ``SMALL_APPS`` marked ``slow``."""
    return [name if name in SMALL_APPS else pytest.param(name, marks=pytest.mark.slow)
            for name in sorted(path.stem for path in APPS)]


#: The environment variable holding the test run's model cache while it runs (set by ``pytest_configure``).
CACHE_VARIABLE = "SBRS_CACHE_DIR"
#: The xdist group of the tests that build or run an app inside the repository (``apps/tiny.build``, say): they
#: run one after another on one worker, so no two processes write the same build folder at once.
REPO_BUILDS = pytest.mark.xdist_group("repo-builds")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the README's test command): one worker more than the machine has cores. Many tests wait a
    while (a Prometheus scrape, a child ``sbrs run`` starting, a stream reconnecting, a sensor's next reading),
    leaving their core idle; a third worker on this project's 2-core machine fills some of those waits: the fast
    tier in 5 min 34 s and, from a fresh clone, 5 min 56 s, against 5 min 59 s to 6 min 11 s in five runs on two
    workers and 5 min 51 s on four (2026-11-28, quiet machine)."""
    return (os.cpu_count() or 1) + 1


def pytest_configure(config: pytest.Config) -> None:
    """One private model cache for the whole test run, shared by the xdist workers (a worker inherits the
    variable; the cache writes files atomically, so workers making the same model at once is safe), so that each
    zoo model is exported once per run, not once per worker."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller made the cache
        return
    config.stash[_previous_cache] = os.environ.get(CACHE_VARIABLE)
    config.stash[_run_cache] = Path(tempfile.mkdtemp(prefix="sbrs-test-cache-"))
    os.environ[CACHE_VARIABLE] = str(config.stash[_run_cache])


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or _run_cache not in config.stash:
        return
    previous = config.stash[_previous_cache]
    if previous is None:
        os.environ.pop(CACHE_VARIABLE, None)
    else:
        os.environ[CACHE_VARIABLE] = previous
    cache = config.stash[_run_cache]
    remove_builds_into(cache)
    shutil.rmtree(cache, ignore_errors=True)


def made_once(name: str, make: Callable[[Path], None]) -> Path:
    """A folder made once per test run (by ``make(folder)``) and read by every test and worker that asks for it:
    ``<run cache>/once/<name>``, made under a lock. For what costs seconds and is only read afterwards (a report
    measured with ``--measure``): a module fixture is made again wherever xdist runs the module's tests apart."""
    import fcntl

    folder = Path(os.environ[CACHE_VARIABLE]) / "once" / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".made").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            (folder / ".made").touch()
    return folder


_run_cache = pytest.StashKey[Path]()
_previous_cache = pytest.StashKey["str | None"]()


def remove_builds_into(cache: Path, root: Path = REPO) -> list[Path]:
    """The builds the tests left in the working tree (``apps/*.build``, ``tests/**/*.build``) whose models are in
    ``cache``, the test run's private one, removed: the cache goes with the run, and such a build would make a
    user's next ``sbrs run apps/drone.yaml`` refuse it as damaged (its scenario models gone) where no build at
    all is built again."""
    removed = []
    for manifest in [*root.glob("apps/*.build/manifest.json"), *root.glob("tests/**/*.build/manifest.json")]:
        if str(cache) in manifest.read_text(encoding="utf-8", errors="replace"):
            shutil.rmtree(manifest.parent, ignore_errors=True)
            removed.append(manifest.parent)
    return removed


@pytest.fixture(scope="session")
def load_example() -> Callable[[str], App]:
    """``load_example("tiny")`` → the app of apps/tiny.yaml with every shared run shared
    (``runtime.share_min_mb = 0``), so the tests exercise shared units even on apps whose weights are small;
    loaded once per test session. ``load_app`` gives the app with its own settings."""
    from sbrs.app import load_app

    loaded: dict[str, App] = {}

    def load(name: str) -> App:
        if name not in loaded:
            app = load_app(REPO / "apps" / f"{name}.yaml")
            loaded[name] = replace(app, config=replace(app.config, runtime=replace(app.config.runtime,
                                                                                 share_min_mb=0.0)))
        return loaded[name]

    return load


@pytest.fixture(scope="session")
def quantized_zoo() -> Callable[..., Path]:
    """``quantized_zoo("mobilenet_v2", "qdq-per-channel-u8", classes=10)`` → that zoo CNN at 64 px (seed 0,
    ``classes`` if given) in that form of ``tools/quantize_models.py`` (``"fp32"``: the zoo's own export), made
    once per test run for every worker (``made_once``)."""
    from sbrs import zoo
    from tools.quantize_models import quantize

    def path(name: str, form: str, classes: int | None = None) -> Path:
        stem = name if classes is None else f"{name}-{classes}classes"
        file = f"{stem}-{form}.onnx"

        def make(folder: Path) -> None:
            if form == "fp32":
                zoo.export(name, folder / file, resolution=64, **({} if classes is None else {"classes": classes}))
            else:
                quantize(path(name, "fp32", classes), folder / file, form, frames=2)

        return made_once(f"quantized-zoo-{stem}-{form}", make) / file

    return path


@cache
def zoo_model(name: str) -> CnnModel:
    """A zoo CNN imported at a small resolution (64, CIFAR's 32): the zoo cases of the planner and parts tests."""
    from sbrs import zoo
    from sbrs.model import import_model

    options = zoo.get_model(name).options
    resolution = {"resolution": 64 if name != "cifar_resnet" else 32} if "resolution" in options else {}
    return import_model(zoo.build(name, **resolution))


def assert_one_line_error(err: str, fragment: str, line: int | None = None, file: str = "app.yaml") -> None:
    """What a user sees for bad input: one line on stderr, ``sbrs: error: ...``, holding ``fragment`` (and
    ``file:line:`` where ``line`` is given), no traceback."""
    assert err.count("\n") == 1 and err.startswith("sbrs: error: "), err
    assert fragment in err, err
    assert "Traceback" not in err
    if line is not None:
        assert f"{file}:{line}: " in err, err


def quiet_options() -> ort.SessionOptions:
    """ONNX Runtime's default options but for its pool's spinning: a reference session's threads spin after every
    call, taking a core from the runtime under test and from the other test worker, and change no output."""
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def ort_session(model: onnx.ModelProto | str | Path) -> ort.InferenceSession:
    """A CPU reference session with ONNX Runtime's default options (``quiet_options``), as a user of plain ONNX
    Runtime makes it."""
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(source, quiet_options(), providers=["CPUExecutionProvider"])


#: An app of a small zoo MobileNetV2 and scenarios derived from it (docs/APP_YAML.md, "Derived scenarios"):
#: ``{calibration}`` is the int8 scenario's calibration entry (", calibration: frames" or "").
DERIVED_APP = """\
name: derived
input: {{name: input, shape: [1, 3, 64, 64], dtype: float32}}
initial: accurate
scenarios:
  - name: accurate
    zoo: {{name: mobilenet_v2, width: 0.35, resolution: 64, classes: 10}}
  - name: fast-int8
    from: accurate
    quantize: {{mode: int8-static{calibration}}}
    requirements: {{accuracy: 0.3, throughput: 0.7}}
  - name: half
    from: accurate
    quantize: {{mode: fp16}}
    requirements: {{accuracy: 0.5, memory: 0.5}}
runtime: {{threads: 1}}
"""


def calibration_frame(seed: int, shape: tuple[int, ...] = (1, 3, 64, 64)) -> np.ndarray:
    """A seeded frame like an image normalised per channel (what the zoo CNNs take): smooth, not white noise."""
    rng = np.random.default_rng(seed)
    coarse = rng.standard_normal((*shape[:2], 8, 8)).astype(np.float32)
    return np.repeat(np.repeat(coarse, shape[2] // 8, axis=2), shape[3] // 8, axis=3)


def write_derived_app(folder: Path, frames: int | None = 4, seed: int = 0) -> Path:
    """``DERIVED_APP`` in ``folder`` with ``frames`` calibration frames in ``folder/frames``, ``calibration_frame
    (seed + index)`` (None: none, the int8 scenario is calibrated on synthetic frames); the app file's path.
    The model cache lasts the test session: a test that must see a quantization takes a ``seed`` of its own."""
    if frames is not None:
        (folder / "frames").mkdir(parents=True, exist_ok=True)
        for index in range(frames):
            np.save(folder / "frames" / f"{index:03d}.npy", calibration_frame(seed + index))
    path = folder / "app.yaml"
    path.write_text(DERIVED_APP.format(calibration="" if frames is None else ", calibration: frames"))
    return path


#: Modules the run of a build never needs (sbrs.artifact.read's docstring).
FORBIDDEN = ("onnx", "pydantic", "sbrs.zoo", "sbrs.reduction", "deap", "sbrs.model.onnx_import",
             # compile-time stages and file parsing: a build carries their results
             "yaml", "sbrs.moc.derive", "sbrs.memory.arena", "sbrs.memory.app_plan", "sbrs.compile.layout",
             "sbrs.compile.parts", "sbrs.compile.unit_plan", "sbrs.reduction.search", "sbrs.compile.transitions",
             # the control socket's event loop, with --no-socket
             "asyncio", "socket", "concurrent.futures", "shutil", "sbrs.server.server",
             # device memory: OpenSSL's libcrypto (sbrs.digest) and numpy.random's libraries (synthetic frames)
             "hashlib", "_hashlib", "ssl", "numpy.random")
#: ... and what a build of execution units does not need either: the model stage's types, the runtime by parts,
#: the parsers of the other commands (``sbrs.cli.build_parser``).
FORBIDDEN_FOR_UNITS = (*FORBIDDEN, "sbrs.model", "sbrs.compile.fit", "sbrs.compile.parts_plan",
                       "sbrs.server.client")


#: Modules a run with its control socket does not need either: asyncio (it imports ssl and OpenSSL's libraries).
FORBIDDEN_WITH_SOCKET = ("asyncio", "ssl", "_ssl", "hashlib", "_hashlib", "numpy.random", "numpy.ma", "onnx", "yaml",
                         "deap", "concurrent.futures")


def modules_a_run_loads(app: Path, forbidden: tuple[str, ...] = FORBIDDEN, socket_path: Path | None = None,
                        extra: tuple[str, ...] = ()) -> list[str]:
    """Which of ``forbidden`` a fresh process running 3 frames of ``app``'s build imports (``--no-socket``, or
    with its control socket at ``socket_path``; ``extra``: more options of ``sbrs run``)."""
    control = ["--socket", str(socket_path)] if socket_path is not None else ["--no-socket"]
    control += list(extra)
    code = f"""
import sys
from sbrs.cli import main
assert main(["run", {str(app)!r}, "--frames", "3", *{control!r}]) == 0
print("LOADED", sorted(m for m in {forbidden!r} if m in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("LOADED "))
    return list(ast.literal_eval(line.removeprefix("LOADED ")))
