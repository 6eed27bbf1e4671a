"""``runtime.session: auto`` in a build (``sbrs.artifact.write.compile_app``): the form measured faster is the one
kept, recorded in the manifest with its figures and reason, shown by ``sbrs build`` and ``sbrs inspect``, and runs
equal to ONNX Runtime on each scenario's own model; a named form wins and is never measured; where one graph cannot
run the app, units are kept unmeasured with the reason; a rebuild takes the cached figures. The timings are
replaced by given figures (``measure_session``, ``measure_streams``): no timing decides a test."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from sbrs.app import load_app
from sbrs.artifact.build import build_app
from sbrs.artifact.read import MANIFEST, build_dir
from sbrs.cli import main
from sbrs.compile.session_choice import ScenarioSession
from sbrs.compile.unit_streams import ScenarioStreams
from sbrs.runtime import runtime_for
from tests.conftest import REPO
from tests.runtime.conftest import References
from tests.runtime.test_one_session import assert_every_pair, assert_steady_state

#: tiny's units on fixed threads and one stream: the build measures nothing but the two forms.
FIXED = "threads: 2, streams: 1"


class GivenTimes:
    """``measure_session`` answering one graph at ``ratio`` times the units' 1 ms frames, counting its calls."""

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio
        self.calls = 0

    def __call__(self, unit_paths: Mapping[str, str], sequences: Mapping[str, Sequence[str]], one_path: str,
                 indices: Mapping[str, int], *args: Any, **kwargs: Any) -> dict[str, ScenarioSession]:
        self.calls += 1
        assert Path(one_path).is_file() and all(Path(p).is_file() for p in unit_paths.values())
        assert sorted(indices.values()) == list(range(len(sequences)))
        return {s: ScenarioSession(1e-3, self.ratio * 1e-3, len(units)) for s, units in sequences.items()}


@pytest.fixture
def quiet_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Timings of this test's own, kept at a steady load (``sbrs.compile.timing_cache``)."""
    monkeypatch.setattr("sbrs.compile.timing_cache.load_average", lambda: 0.0)
    monkeypatch.setattr("sbrs.compile.timing_cache.cache_dir", lambda kind: tmp_path / "cache" / kind)


def given_times(monkeypatch: pytest.MonkeyPatch, ratio: float) -> GivenTimes:
    given = GivenTimes(ratio)
    monkeypatch.setattr("sbrs.compile.session_choice.measure_session", given)
    return given


def tiny_app(tmp_path: Path, runtime: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "tiny.yaml"
    path.write_text((REPO / "apps" / "tiny.yaml").read_text().replace(
        "initial: full\n", f"initial: full\nruntime: {{{runtime}}}\n"))
    return path


def manifest(app_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((build_dir(app_path) / MANIFEST).read_text())
    return data


@pytest.mark.parametrize(("ratio", "chosen"), [(0.9, "one"), (1.3, "units")])
def test_auto_keeps_the_form_measured_faster_and_it_equals_onnx_runtime(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], quiet_cache: None,
        ratio: float, chosen: str) -> None:
    given = given_times(monkeypatch, ratio)
    app_path = tiny_app(tmp_path, f"session: auto, {FIXED}")
    assert main(["inspect", str(app_path)]) == 0
    assert "session: runtime.session: auto, measured by `sbrs build` (no current build yet" in capsys.readouterr().out
    assert main(["build", str(app_path)]) == 0
    printed = capsys.readouterr().out
    assert given.calls == 1
    session = manifest(app_path)["session"]
    assert (session["session"], session["asked"]) == (chosen, "auto")
    assert session["ratio"] == pytest.approx(ratio) and set(session["figures"]) == {"full", "skip", "exit"}
    form = "as one graph on one ONNX Runtime session" if chosen == "one" else "as execution units, an ONNX Runtime session each"
    assert f"session: runs {form} (runtime.session: auto; {session['reason']}" in printed
    # the chosen form's files alone, and nothing of the other left beside the build
    files = sorted(path.name for path in build_dir(app_path).iterdir())
    assert ("one.onnx" in files) == (chosen == "one") and any(f.startswith("u") for f in files) == (chosen == "units")
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".")) == []
    assert main(["inspect", str(app_path)]) == 0
    assert f"session: runs {form}" in capsys.readouterr().out
    app = load_app(app_path)
    refs = References(app)
    with runtime_for(app_path) as runtime:
        assert runtime.execution == chosen and (runtime.session_count == 1) == (chosen == "one")
        assert_steady_state(runtime, app, refs)
        assert_every_pair(runtime, app, refs)


@pytest.mark.parametrize("asked", ["units", "one"])
def test_a_named_session_wins_and_is_never_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    quiet_cache: None, asked: str) -> None:
    given = given_times(monkeypatch, 0.5 if asked == "units" else 2.0)  # the measurement would choose the other
    app_path = tiny_app(tmp_path, f"session: {asked}, {FIXED}")
    result = build_app(app_path)
    assert given.calls == 0
    assert result.to_dict()["build"]["session"] == {"session": asked, "asked": asked,
                                                    "reason": f"runtime.session: {asked}", "ratio": None,
                                                    "load": None, "figures": None}
    assert result.to_dict()["build"]["execution"] == asked


def one_layer_model(path: Path, opset: int) -> Path:
    weight = numpy_helper.from_array(np.full((4, 3, 1, 1), 0.5, np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["out"])], "m",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), path)
    return path


def two_opsets_app(tmp_path: Path) -> Path:
    path = tmp_path / "two.yaml"
    path.write_text(f"""name: two
input: {{name: x, shape: [1, 3, 8, 8], dtype: float32}}
initial: a
postprocess: {{kind: raw}}
runtime: {{session: auto, {FIXED}}}
scenarios:
  - {{name: a, model: {one_layer_model(tmp_path / "a.onnx", 17)}}}
  - {{name: b, model: {one_layer_model(tmp_path / "b.onnx", 13)}}}
""")
    return path


def test_auto_keeps_units_unmeasured_where_one_graph_cannot_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 quiet_cache: None) -> None:
    given = given_times(monkeypatch, 0.5)  # one graph would win wherever it were measured
    # two streams measured better for the units (1 ms frames on one thread: a switch's wait costs little)
    monkeypatch.setattr("sbrs.compile.unit_streams.measure_streams", lambda _paths, sequences, *a, **k: {
        s: ScenarioStreams(1e-3, 0.5e-3) for s in sequences})
    cases = {"resume": (tiny_app(tmp_path / "resume", f"session: auto, on_switch: resume, {FIXED}"),
                        "on_switch: resume resumes a frame after a step both scenarios share"),
             "limit": (tiny_app(tmp_path / "limit", f"session: auto, {FIXED}"),
                       "a memory limit may need processing by parts, which one graph cannot be"),
             "opsets": (two_opsets_app(tmp_path), "the scenarios cannot share one graph (the scenarios use "
                                                  "different versions of the ONNX operator set (a 17, b 13)"),
             "streams": (tiny_app(tmp_path / "streams", "session: auto, threads: 2"),
                         "the units measured faster on 2 streams (two streams ran 2.00x the frames of one")}
    for name, (app_path, why) in cases.items():
        if name == "limit":
            app_path.write_text(app_path.read_text() + "memory_limit_mb: 100\n")
        session = build_app(app_path).to_dict()["build"]["session"]
        assert (session["session"], session["asked"], session["figures"]) == ("units", "auto", None), name
        assert session["reason"].startswith(why) and session["reason"].endswith(": units, not measured"), name
    assert given.calls == 0


def test_a_rebuild_takes_the_cached_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           quiet_cache: None) -> None:
    given = given_times(monkeypatch, 0.9)
    app_path = tiny_app(tmp_path, f"session: auto, {FIXED}")
    first = build_app(app_path).to_dict()["build"]["session"]
    given.ratio = 2.0  # a measurement now would choose units
    second = build_app(app_path).to_dict()["build"]["session"]
    assert given.calls == 1 and first == second and second["session"] == "one"


def test_auto_keeps_the_units_where_the_one_graph_fails_on_the_machine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        quiet_cache: None) -> None:
    """``auto`` is the default on a GPU provider, where the one graph's path may fail on a machine the units ran on
    (an ``If`` the provider cannot place, say): ONNX Runtime's error while the one graph is timed keeps the units,
    with the error in the reason and a warning, and the build runs equal to ONNX Runtime."""
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail

    def failing(*args: Any, **kwargs: Any) -> None:
        raise Fail("[ONNXRuntimeError] : 1 : FAIL : If node 'branch': no kernel for this provider\nmore lines")

    monkeypatch.setattr("sbrs.compile.session_choice.measure_session", failing)
    app_path = tiny_app(tmp_path, f"session: auto, {FIXED}")
    with caplog.at_level("WARNING", logger="sbrs.artifact.write"):
        session = build_app(app_path).to_dict()["build"]["session"]
    assert (session["session"], session["asked"], session["figures"]) == ("units", "auto", None)
    assert session["reason"] == ("its one graph failed on this machine (Fail: [ONNXRuntimeError] : 1 : FAIL : If node "
                                 "'branch': no kernel for this provider): units, not measured")
    assert "tiny's one graph failed on CPUExecutionProvider" in caplog.text and "keeps its execution units" in caplog.text
    files = sorted(path.name for path in build_dir(app_path).iterdir())
    assert "one.onnx" not in files and any(f.startswith("u") for f in files)
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".")) == []  # no staging left
    app = load_app(app_path)
    with runtime_for(app_path) as runtime:
        assert runtime.execution == "units"
        assert_steady_state(runtime, app, References(app))
