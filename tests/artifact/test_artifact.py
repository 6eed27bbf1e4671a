"""The compiled build: equivalence with ONNX Runtime on each scenario's own model, refusal of bad builds, and
the lean run path (no onnx, pydantic, zoo or reduction search in the process that runs a build)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from sbrs.app import load_app
from sbrs.artifact.read import (
    MANIFEST,
    OPTIMIZED_SUFFIX,
    OPTIMIZED_WEIGHTS,
    WEIGHTS,
    build_dir,
    load_build,
)
from sbrs.artifact.write import compile_app
from sbrs.errors import InputError
from sbrs.ort_env import machine_key, session_options
from sbrs.runtime import runtime_for
from sbrs.runtime.engine import Runtime
from sbrs.runtime.open import open_runtime
from tests.conftest import FORBIDDEN_FOR_UNITS, FORBIDDEN_WITH_SOCKET, modules_a_run_loads

APPS = Path(__file__).resolve().parents[2] / "apps"


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """A copy of the tiny app with a fresh build beside it."""
    app_path = tmp_path / "tiny.yaml"
    shutil.copy(APPS / "tiny.yaml", app_path)
    compile_app(load_app(app_path))
    return app_path


def _sbrs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sbrs.cli", *args], capture_output=True, text=True, check=False,
                          timeout=300)


@pytest.mark.parametrize("name", ["tiny", pytest.param("pamap2", marks=pytest.mark.slow)])  # pamap2: 3-4 s each
@pytest.mark.parametrize("here", [True, False], ids=["optimised-here", "optimised-elsewhere"])
def test_build_runs_like_onnx_runtime_on_each_scenario_model(name: str, here: bool, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the build's ONNX Runtime-optimised files were made (this machine) the runtime loads them; where
    they were not (another CPU or onnxruntime) it loads the portable unit files; equal to ORT either way."""
    app = load_app(APPS / f"{name}.yaml")
    folder = tmp_path / f"{name}.build"
    manifest = compile_app(app, folder)
    assert manifest["weights_bytes"] > 0
    # one weights file shared by every portable unit file, one by every optimised one, no weight stored twice
    assert sorted(path.name for path in folder.glob("*.bin")) == sorted([WEIGHTS, OPTIMIZED_WEIGHTS])
    units = sorted(path.name for path in folder.glob("u*.onnx") if not path.name.endswith(OPTIMIZED_SUFFIX))
    assert units and manifest["optimized_for"] == machine_key(("CPUExecutionProvider",))
    assert all((folder / (unit.removesuffix(".onnx") + OPTIMIZED_SUFFIX)).is_file() for unit in units)
    # the optimised units' weights: all in the shared file, a tensor two units hold stored once
    import onnx

    references = [tuple((entry.key, entry.value) for entry in tensor.external_data)
                  for path in folder.glob(f"*{OPTIMIZED_SUFFIX}")
                  for tensor in onnx.load_model(str(path), load_external_data=False).graph.initializer
                  if tensor.data_location == onnx.TensorProto.EXTERNAL]
    assert references and all(dict(entries)["location"] == OPTIMIZED_WEIGHTS for entries in references)
    if name == "pamap2":  # its scenarios' units repeat layers (27 references to 16 tensors)
        assert len(set(references)) < len(references)
    if not here:
        monkeypatch.setattr("sbrs.ort_env.machine_key", lambda providers: "another machine")
    loaded = load_build(app.config.path, folder)
    assert loaded.optimized_here is here
    build = Runtime.from_build(loaded)
    assert all(session._model_path.endswith(OPTIMIZED_SUFFIX) is here for session in build._sessions.values())
    rng = np.random.default_rng(3)
    frame = rng.standard_normal(tuple(app.config.input.shape)).astype(app.config.input.dtype)
    for scenario in app.config.scenarios:
        reference = ort.InferenceSession(scenario.model_path, session_options(), providers=["CPUExecutionProvider"])
        expected = dict(zip([o.name for o in reference.get_outputs()],
                            reference.run(None, {reference.get_inputs()[0].name: frame}), strict=True))
        build.switch(scenario.name)
        got = build.infer(frame)
        for output, value in expected.items():
            assert np.max(np.abs(got[output] - value)) <= 1e-5 * max(1.0, float(np.max(np.abs(value))))
    build.close()


def test_run_uses_current_build_and_says_when_it_builds(tmp_path: Path) -> None:
    app_path = tmp_path / "tiny.yaml"
    shutil.copy(APPS / "tiny.yaml", app_path)
    first = _sbrs("run", str(app_path), "--frames", "2", "--no-socket")
    assert first.returncode == 0, first.stderr
    assert "building" in first.stderr and (build_dir(app_path) / MANIFEST).is_file()
    second = _sbrs("run", str(app_path), "--frames", "2", "--no-socket")
    assert second.returncode == 0 and "building" not in second.stderr
    def outputs(text: str) -> list[object]:
        return [json.loads(line)["outputs"] for line in text.splitlines()]

    assert outputs(first.stdout) == outputs(second.stdout)  # same seeded frames, same outputs


def test_an_app_file_behind_a_symbolic_link_runs(tmp_path: Path) -> None:
    """The app is loaded and built beside the file a link leads to; ``sbrs run LINK`` looked beside the link,
    found no build after building it and stopped with 'the build has no manifest.json' (exit 2), every time."""
    (tmp_path / "apps").mkdir()
    target = tmp_path / "apps" / "tiny.yaml"
    shutil.copy(APPS / "tiny.yaml", target)
    link = tmp_path / "drone-app.yaml"
    link.symlink_to(target)
    first = _sbrs("run", str(link), "--frames", "1", "--no-socket")
    assert first.returncode == 0, first.stderr
    assert build_dir(link) == build_dir(target) and (build_dir(target) / MANIFEST).is_file()
    second = _sbrs("run", str(link), "--frames", "1", "--no-socket")
    assert second.returncode == 0 and "building" not in second.stderr, second.stderr


def _garbage(folder: Path) -> None:
    (folder / MANIFEST).write_bytes(b"\x00\xffnot json")


def _truncated_manifest(folder: Path) -> None:
    text = (folder / MANIFEST).read_bytes()
    (folder / MANIFEST).write_bytes(text[: len(text) // 2])


def _tampered_manifest(folder: Path) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["plan"]["arena_bytes"] += 64
    (folder / MANIFEST).write_text(json.dumps(manifest))


def _tampered_weights(folder: Path) -> None:
    data = bytearray((folder / WEIGHTS).read_bytes())
    data[len(data) // 2] ^= 0xFF
    before = (folder / WEIGHTS).stat().st_mtime_ns
    (folder / WEIGHTS).write_bytes(bytes(data))
    # an edit made later than the build (the file clock may not tick within a few milliseconds)
    os.utime(folder / WEIGHTS, ns=(before + 10**9, before + 10**9))


def _truncated_weights(folder: Path) -> None:
    data = (folder / WEIGHTS).read_bytes()
    (folder / WEIGHTS).write_bytes(data[: len(data) // 2])


def _missing_unit(folder: Path) -> None:
    next(folder.glob("u*.onnx")).unlink()


def _tampered_optimized_weights(folder: Path) -> None:
    path = folder / OPTIMIZED_WEIGHTS
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    before = path.stat().st_mtime_ns
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before + 10**9, before + 10**9))


def _stale(folder: Path) -> None:
    app_path = folder.with_name("tiny.yaml")
    app_path.write_text(app_path.read_text().replace("characteristics: {accuracy: 90.0", "characteristics: "
                                                     "{accuracy: 91.0", 1))


DAMAGES = [_garbage, _truncated_manifest, _tampered_manifest, _tampered_weights, _truncated_weights, _missing_unit,
           _tampered_optimized_weights, _stale]


@pytest.mark.parametrize("damage", DAMAGES)
def test_bad_build_is_refused_with_exit_2_and_one_line(tiny: Path, damage) -> None:  # type: ignore[no-untyped-def]
    damage(build_dir(tiny))
    with pytest.raises(InputError, match="run `sbrs build"):
        load_build(tiny)
    result = _sbrs("run", str(tiny), "--frames", "1", "--no-socket")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "sbrs build" in lines[0] and "Traceback" not in result.stderr


# a manifest that is no JSON and a build missing a file keep --rebuild's recovery in the fast tier; the rest
# damage what the same check reads
@pytest.mark.parametrize("damage", [damage if damage in (_garbage, _missing_unit)
                                    else pytest.param(damage, marks=pytest.mark.slow) for damage in DAMAGES])
def test_rebuild_replaces_a_bad_build(tiny: Path, damage) -> None:  # type: ignore[no-untyped-def]
    damage(build_dir(tiny))
    rebuilt = _sbrs("run", str(tiny), "--frames", "1", "--no-socket", "--rebuild")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "rebuilding" in rebuilt.stderr
    assert load_build(tiny).config.name == "tiny"  # current again


def test_touching_an_input_without_changing_it_keeps_the_build(tiny: Path) -> None:
    tiny.write_text(tiny.read_text())  # new mtime, same bytes: the sha256 decides
    assert load_build(tiny).config.name == "tiny"


def test_running_a_build_imports_only_what_it_needs(tiny: Path) -> None:
    assert modules_a_run_loads(tiny, FORBIDDEN_FOR_UNITS) == []


def test_the_control_socket_costs_no_event_loop(tiny: Path, tmp_path: Path) -> None:
    """The socket server is a ``selectors`` loop: no asyncio, whose ssl import maps OpenSSL (~7 MB resident)."""
    assert modules_a_run_loads(tiny, FORBIDDEN_WITH_SOCKET, socket_path=tmp_path / "run.sock") == []


def test_a_changed_model_file_makes_the_build_stale(tmp_path: Path) -> None:
    """An app naming an ONNX file: rewriting that file with other weights makes the build stale."""
    import onnx
    from onnx import numpy_helper

    source = load_app(APPS / "tiny.yaml").config.scenarios[0]
    model_path = tmp_path / "model.onnx"
    shutil.copy(source.model_path, model_path)
    app_path = tmp_path / "one.yaml"
    app_path.write_text("name: one\ninput: {name: input, shape: [1, 3, 32, 32], dtype: float32}\ninitial: only\n"
                        "scenarios:\n  - {name: only, model: model.onnx, requirements: {accuracy: 1.0}}\n")
    compile_app(load_app(app_path))
    assert load_build(app_path).config.name == "one"
    model = onnx.load(model_path)
    first = model.graph.initializer[0]
    first.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(first) + 1, first.name))
    onnx.save(model, model_path)
    with pytest.raises(InputError, match=r"stale: model\.onnx changed"):
        load_build(app_path)


def test_runtime_for_uses_a_current_build_and_falls_back_to_the_models(tiny: Path) -> None:
    app = load_app(tiny)
    frame = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    with runtime_for(app) as from_build, runtime_for(app, use_build=False) as in_memory:
        assert all(str(build_dir(tiny)) in session._model_path for session in from_build._sessions.values())
        for scenario in app.config.scenario_names:
            from_build.switch(scenario)
            in_memory.switch(scenario)
            assert np.array_equal(from_build.infer(frame)["output"], in_memory.infer(frame)["output"])
    _tampered_weights(build_dir(tiny))
    with runtime_for(app) as fallback:
        assert not any(str(build_dir(tiny)) in session._model_path for session in fallback._sessions.values())
    with runtime_for(app, transition="naive") as other_options:  # the build is for sbrs-tp: compiled in memory
        assert other_options.node.mode == "naive"


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the sbrs loggers said (INFO and above) since the last ``caplog.clear()``."""
    return [record.getMessage() for record in caplog.records if record.name.startswith("sbrs")]


def test_run_says_when_the_optimised_files_are_for_another_machine(tiny: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sbrs")
    runtime, _, _ = open_runtime(tiny)
    runtime.close()
    assert said(caplog) == []
    monkeypatch.setattr("sbrs.ort_env.machine_key", lambda providers: "another machine")
    runtime, _, _ = open_runtime(tiny)
    runtime.close()
    assert len(said(caplog)) == 1 and "another machine" in said(caplog)[0] and "sbrs build" in said(caplog)[0]


@pytest.mark.parametrize("failure", ["save", "flags"])
def test_a_build_without_optimised_files_says_why_and_runs_the_portable_ones(
        failure: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """When ONNX Runtime cannot save an optimised form, or the CPU's flags cannot be read, the build keeps none
    (not some), says why in its manifest, and runs from its portable unit files."""
    if failure == "save":
        def refuse(source: str, target: str, providers: tuple[str, ...]) -> None:
            if target.startswith(str(tmp_path)) and "u2" in target:
                raise RuntimeError("cannot serialise this node")
            shutil.copy(source, target)  # the files made before the failure must be removed

        monkeypatch.setattr("sbrs.ort_env.save_optimized", refuse)
    else:
        monkeypatch.setattr("sbrs.ort_env.machine_key", lambda providers: None)
    app_path = tmp_path / "tiny.yaml"
    shutil.copy(APPS / "tiny.yaml", app_path)
    manifest = compile_app(load_app(app_path))
    folder = build_dir(app_path)
    assert manifest["optimized_for"] is None and not list(folder.glob(f"*{OPTIMIZED_SUFFIX}*"))
    assert ("cannot serialise this node" if failure == "save" else "CPU flags") in manifest["not_optimized"]
    caplog.set_level(logging.INFO, logger="sbrs")
    caplog.clear()
    runtime, _, _ = open_runtime(app_path)
    with runtime:
        assert said(caplog) == [] and not any(s._model_path.endswith(OPTIMIZED_SUFFIX) for s in runtime._sessions.values())
        frame = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
        assert runtime.infer(frame)["output"].shape == (1, 10)


def test_optimised_models_without_large_weights_share_the_weights_file(tmp_path: Path) -> None:
    """A band call without an initializer of 1 KiB or more (a pooling or addition band of ResNet-50) has no
    weights file of its own once optimised: the build keeps its optimised form anyway (multi-cnn under a
    limit lost every optimised file over one such call)."""
    import onnx
    from onnx import TensorProto, helper

    from sbrs.artifact.write import OPTIMIZED_WEIGHTS, _share_optimized_weights
    from sbrs.ort_env import save_optimized

    def conv_model(channels: int) -> onnx.ModelProto:  # 32*27*4 bytes of weights: written beside the model
        weight = helper.make_tensor("w", TensorProto.FLOAT, [channels, 3, 3, 3],
                                    np.linspace(-1, 1, channels * 27, dtype=np.float32).tolist())
        node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 8, 8])],
                                  [weight])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    def pool_model() -> onnx.ModelProto:
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    made = []
    for name, model in (("big", conv_model(32)), ("small", pool_model())):  # no initializer at all
        source = tmp_path / f"{name}.onnx"
        onnx.save_model(model, str(source))
        made.append(tmp_path / f"{name}.opt.onnx")
        save_optimized(str(source), str(made[-1]), ("CPUExecutionProvider",))
    assert (tmp_path / "big.opt.onnx.bin").exists() and not (tmp_path / "small.opt.onnx.bin").exists()
    _share_optimized_weights(made, tmp_path / OPTIMIZED_WEIGHTS)
    frame = np.linspace(0, 1, 192, dtype=np.float32).reshape(1, 3, 8, 8)
    for name in ("big", "small"):
        want = ort.InferenceSession(str(tmp_path / f"{name}.onnx")).run(None, {"x": frame})[0]
        got = ort.InferenceSession(str(tmp_path / f"{name}.opt.onnx")).run(None, {"x": frame})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not (tmp_path / "big.opt.onnx.bin").exists()


def test_builds_of_one_app_finishing_together_swap_in_one_after_the_other(tmp_path: Path) -> None:
    """Two builds of one app each deleted the build folder, then renamed theirs in: finishing together, one
    failed (the other's delete under its own, or a rename onto a folder no longer empty). Now one swaps in at a
    time, the last one kept, and no folder of theirs is left beside it."""
    import threading

    from sbrs.artifact.write import _swap_in

    folder = tmp_path / "app.build"
    folder.mkdir()
    (folder / "manifest.json").write_text("0")
    errors: list[BaseException] = []

    def build(version: int) -> None:
        staging = tmp_path / f".app.build.{version}"
        staging.mkdir()
        for name in ("manifest.json", *(f"u{k}.onnx" for k in range(50))):
            (staging / name).write_text(str(version))
        try:
            _swap_in(staging, folder)
        except BaseException as error:  # the test's verdict, below
            errors.append(error)

    for round_ in range(20):
        builders = [threading.Thread(target=build, args=(2 * round_ + k + 1,)) for k in range(2)]
        for builder in builders:
            builder.start()
        for builder in builders:
            builder.join(30)
        assert errors == []
        contents = {path.read_text() for path in folder.iterdir()}
        assert len(contents) == 1 and (folder / "manifest.json").is_file()  # one build, whole
    assert sorted(path.name for path in tmp_path.iterdir()) == ["app.build"]
