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
from sbrs.compile.unit_threads import measure_unit_threads, whole_frame_units
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
        for unit, session in rt._sessions.items():  # on two streams (the build's measured choice) every unit has one
            want = 1 if unit in build.unit_threads or build.streams == 2 else rt.thread_pool.count
            assert session.get_session_options().intra_op_num_threads == want, unit


def test_an_app_that_sets_its_threads_is_not_measured(tmp_path: Path) -> None:
    path = tiny_copy(tmp_path, "runtime: {threads: 2, streams: 1}\n")  # two streams: one-thread sessions
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


def _config_entry(session: object, key: str) -> str | None:
    options = session.get_session_options()  # type: ignore[attr-defined]
    try:
        return str(options.get_session_config_entry(key))
    except RuntimeError:  # not set
        return None


def test_a_unit_that_is_a_scenarios_whole_frame_keeps_its_pool_warm() -> None:
    """cifar10: balanced and thrifty are one unit each (called frame after frame: their pools spin for a
    moment after a call); accurate's and steady's units take turns, so theirs stop spinning at once."""
    from sbrs.app import load_app
    from sbrs.ort_env import WARM_SPIN_US

    app = load_app(Path(__file__).resolve().parents[2] / "apps" / "cifar10.yaml")
    with runtime_for(app) as rt:
        warm = whole_frame_units(rt.plan.sequences)  # type: ignore[union-attr]
        assert warm == {rt.plan.sequences["balanced"][0], rt.plan.sequences["thrifty"][0]}  # type: ignore[union-attr]
        for unit, session in rt._sessions.items():
            if session.get_session_options().intra_op_num_threads < 2:
                continue  # no pool: nothing spins
            if unit in warm:
                assert _config_entry(session, "session.intra_op.spin_duration_us") == str(WARM_SPIN_US), unit
                assert _config_entry(session, "session.force_spinning_stop") is None, unit
            else:
                assert _config_entry(session, "session.force_spinning_stop") == "1", unit


def _unit_file(folder: Path, name: str, *, kernel: int = 3, shape: tuple[int, ...] = (1, -1), seed: int = 0,
               tensor: str = "x", inline_below: int = 1024) -> str:
    """A small unit model: Conv → Reshape to ``shape``; initializers of ``inline_below`` bytes or more in an
    external file (the weights, as a build writes them; with 0 the shape constant too)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.random.default_rng(seed).standard_normal(
        (16, 2, kernel, kernel)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", [tensor, "w"], ["c"], pads=[kernel // 2] * 4),
             helper.make_node("Reshape", ["c", "shape"], ["y"])]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info(tensor, TensorProto.FLOAT, [1, 2, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [weights, numpy_helper.from_array(np.array(shape, dtype=np.int64), "shape")])
    path = folder / f"{name}.onnx"
    onnx.save_model(helper.make_model(graph), str(path), save_as_external_data=True, location=f"{name}.bin",
                    size_threshold=inline_below)
    return str(path)


def test_units_of_one_structure_are_measured_once(tmp_path: Path) -> None:
    """unit_structure: equal for units that differ only in their weights' values and tensor names; different
    when a kernel or a shape constant differs (kept in the file or external)."""
    from sbrs.compile.unit_threads import unit_structure

    base = unit_structure(_unit_file(tmp_path, "a"))
    assert unit_structure(_unit_file(tmp_path, "b", seed=1, tensor="other")) == base
    assert unit_structure(_unit_file(tmp_path, "c", kernel=1)) != base
    assert unit_structure(_unit_file(tmp_path, "d", shape=(-1, 1))) != base
    external = unit_structure(_unit_file(tmp_path, "e", inline_below=0))
    assert unit_structure(_unit_file(tmp_path, "f", inline_below=0, seed=2)) == external
    assert unit_structure(_unit_file(tmp_path, "g", inline_below=0, shape=(-1, 1))) != external
    chosen = measure_unit_threads({"a": str(tmp_path / "a.onnx"), "b": str(tmp_path / "b.onnx")},
                                  ("CPUExecutionProvider",), 2, optimized=False)
    assert set(chosen) in (set(), {"a", "b"})  # one answer for both
