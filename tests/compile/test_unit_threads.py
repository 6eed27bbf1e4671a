"""Threads per execution unit, measured when the build is made (``sbrs.compile.unit_threads``): what the build
records is what the runtime's sessions get, and an app that fixes its threads is not measured. Which units
end up on one thread is the machine's answer, so no test asserts it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sbrs.artifact.read import load_build
from sbrs.cli import main
from sbrs.compile.unit_threads import measure_unit_threads
from sbrs.runtime import runtime_for

TINY = Path(__file__).resolve().parents[2] / "apps" / "tiny.yaml"


def tiny_copy(folder: Path, runtime: str = "") -> Path:
    path = folder / "tiny.yaml"
    path.write_text(TINY.read_text(encoding="utf-8") + runtime, encoding="utf-8")
    return path


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: nothing to choose between")
def test_the_build_records_one_thread_units_and_the_runtime_uses_them(tmp_path: Path) -> None:
    path = tiny_copy(tmp_path)
    assert main(["build", str(path), "--json"]) == 0
    manifest = json.loads((tmp_path / "tiny.build" / "manifest.json").read_text(encoding="utf-8"))
    build = load_build(path)
    units = {unit.id for unit in build.units()[0].units}
    assert set(manifest["unit_threads"]) <= units and set(manifest["unit_threads"].values()) <= {1}
    assert dict(build.unit_threads) == manifest["unit_threads"]
    with runtime_for(path) as rt:
        for unit, session in rt._sessions.items():
            want = 1 if unit in build.unit_threads else rt.thread_pool.count
            assert session.get_session_options().intra_op_num_threads == want, unit


def test_an_app_that_sets_its_threads_is_not_measured(tmp_path: Path) -> None:
    path = tiny_copy(tmp_path, "runtime: {threads: 2}\n")
    assert main(["build", str(path), "--json"]) == 0
    assert load_build(path).unit_threads == {}
    with runtime_for(path) as rt:
        assert all(s.get_session_options().intra_op_num_threads == 2 for s in rt._sessions.values())


def test_measuring_answers_for_the_units_given_only(tmp_path: Path) -> None:
    path = tiny_copy(tmp_path)
    assert main(["build", str(path), "--json"]) == 0
    folder = tmp_path / "tiny.build"
    paths = {unit: str(folder / f"{unit}.onnx") for unit in ("u1", "u2")}
    chosen = measure_unit_threads(paths, ("CPUExecutionProvider",), 2, optimized=False)
    assert set(chosen) <= set(paths) and set(chosen.values()) <= {1}
