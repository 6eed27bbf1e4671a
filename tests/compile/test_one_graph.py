"""The app as one ONNX graph (``sbrs.compile.one_graph``, ``sbrs export``): plain ONNX Runtime running the exported
file with ``{input: frame, "scenario": k}`` gives scenario k's outputs, equal to ONNX Runtime running the
scenario's own model (invariant 1); the file holds each distinct weight once; ``onnx.checker`` passes with its full
check; scenarios share the nodes of the layers they run alike; bad input is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from sbrs.app import load_app
from sbrs.cli import main
from sbrs.compile.one_graph import INDEX_CHECK, one_graph
from sbrs.model import params_bytes
from tests.conftest import REPO, assert_one_line_error, write_derived_app
from tests.runtime.conftest import References, assert_equivalent, random_frame

TORCHVISION = REPO / "tests" / "data" / "torchvision"
#: Models nobody here wrote: MobileNetV3 with 10 and with 5 classes (one output name, two shapes; exported with
#: weights of their own), another family, and ONNX Runtime's QOperator int8 form of the first (com.microsoft ops
#: inside a branch).
TORCHVISION_APP = f"""name: torchvision
input: {{name: input, shape: [1, 3, 64, 64], dtype: float32}}
initial: ten
scenarios:
  - {{name: ten, model: {TORCHVISION / "mobilenet_v3_small-legacy-64.onnx"}}}
  - {{name: five, model: {TORCHVISION / "mobilenet_v3_small-5classes-legacy-64.onnx"}}}
  - {{name: shuffle, model: {TORCHVISION / "shufflenet_v2_x0_5-legacy-64.onnx"}}}
  - {{name: ten-int8, model: {TORCHVISION / "quantized" / "mobilenet_v3_small-legacy-64-qoperator.onnx"}}}
"""


def export(app: Path, target: Path) -> dict:
    """``sbrs export APP -o target`` (exit 0), and the sidecar it wrote."""
    assert main(["export", str(app), "-o", str(target), "-q"]) == 0
    sidecar = json.loads(target.with_suffix(".json").read_text())
    assert sidecar["model"] == target.name
    return sidecar


def assert_exported_equal(app_path: Path, target: Path, frames: int = 2) -> dict:
    """Export ``app_path``; the file passes the full check, plain ONNX Runtime runs it with the documented feed
    and gives every scenario's outputs equal to its own model's; the sidecar's scenarios and outputs say so."""
    sidecar = export(app_path, target)
    onnx.checker.check_model(str(target), full_check=True)
    app = load_app(app_path)
    refs = References(app)
    session = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == [app.config.input.name, "scenario"]
    names = [o.name for o in session.get_outputs()]
    assert [s["name"] for s in sidecar["scenarios"]] == list(app.models)
    for entry in sidecar["scenarios"]:
        for seed in range(frames):
            frame = random_frame(app, seed)
            values = dict(zip(names, session.run(None, {app.config.input.name: frame,
                                                         "scenario": np.array(entry["index"], np.int64)}),
                              strict=True))
            want = refs.outputs(entry["name"], frame)
            assert [o["name"] for o in entry["outputs"]] == list(want)
            assert_equivalent({name: values[name] for name in want}, want, f"{entry['name']} frame {seed}")
            for name in set(names) - set(want):  # outputs of other scenarios only: empty for this one
                assert values[name].size == 0, name
    return sidecar


def assert_weights_once(target: Path, app_path: Path) -> None:
    """The file's size is the app's unique parameters (plus its graph), not their sum over the scenarios."""
    app = load_app(app_path)
    unique, summed = params_bytes(app.models.values()), sum(params_bytes([m]) for m in app.models.values())
    size = target.stat().st_size
    assert unique <= size <= unique * 1.01 + 200_000, (size, unique)
    model = onnx.load(str(target), load_external_data=False)
    weights = [t for t in model.graph.initializer if t.name.startswith("w.")]
    assert len({t.name for t in weights}) == len(weights)
    for node in model.graph.node:  # branches read the outer graph's weights: none holds an initializer itself
        for attribute in node.attribute:
            if attribute.HasField("g"):
                assert not _subgraph_initializers(attribute.g), node.name
    if summed > unique * 1.01 + 200_000:  # where the scenarios share weights, the file is smaller than their sum
        assert size < summed


def _subgraph_initializers(graph: onnx.GraphProto) -> list[str]:
    found = [t.name for t in graph.initializer]
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                found.extend(_subgraph_initializers(attribute.g))
    return found


@pytest.mark.parametrize("name", ["tiny", "pamap2", "cifar10"])
def test_example_apps_export_equal_to_each_scenario(name: str, tmp_path: Path) -> None:
    app_path = REPO / "apps" / f"{name}.yaml"
    target = tmp_path / f"{name}.onnx"
    sidecar = assert_exported_equal(app_path, target)
    assert_weights_once(target, app_path)
    sharing = sidecar["sharing"]
    assert sharing["shared_nodes"] > 0 and sharing["if_nodes"] >= 1
    assert sharing["nodes"] < sum(sharing["steps"].values())  # layers run alike are one node


@pytest.mark.slow
@pytest.mark.parametrize("name", ["drone", "detect", "adaptive", "multi-cnn"])
def test_big_example_apps_export_equal_to_each_scenario(name: str, tmp_path: Path) -> None:
    app_path = REPO / "apps" / f"{name}.yaml"
    target = tmp_path / f"{name}.onnx"
    assert_exported_equal(app_path, target, frames=1)
    assert_weights_once(target, app_path)


def test_drone_holds_its_weights_once(tmp_path: Path) -> None:
    """Five ResNet-18 scenarios sharing the layers they keep: 44.8 MB of unique weights, 159 MB as five models."""
    app = load_app(REPO / "apps" / "drone.yaml")
    graph = one_graph(app)
    assert graph.spec.params_bytes < 0.3 * graph.spec.params_sum_bytes
    assert graph.spec.params_bytes <= graph.model.ByteSize() <= graph.spec.params_bytes + 100_000
    assert graph.spec.nodes < 0.4 * sum(graph.spec.steps.values())


def test_derived_scenarios_are_branches_like_any_other(tmp_path: Path) -> None:
    """int8 (QDQ, fused by ONNX Runtime into integer kernels inside its branch) and fp16 forms of one model."""
    app_path = write_derived_app(tmp_path, frames=2, seed=3100)
    assert_exported_equal(app_path, tmp_path / "derived.onnx")
    assert_weights_once(tmp_path / "derived.onnx", app_path)


def test_models_nobody_here_wrote(tmp_path: Path) -> None:
    app_path = tmp_path / "torchvision.yaml"
    app_path.write_text(TORCHVISION_APP)
    sidecar = assert_exported_equal(app_path, tmp_path / "tv.onnx")
    assert_weights_once(tmp_path / "tv.onnx", app_path)
    (logits,) = sidecar["outputs"]  # one name, one type, two shapes: the dimension that differs is left open
    assert logits["name"] == "logits" and logits["shape"] == [1, None] and logits["scenarios"] == [0, 1, 2, 3]


def test_a_scenario_index_out_of_range_fails_inside_onnx_runtime(tmp_path: Path) -> None:
    target = tmp_path / "tiny.onnx"
    export(REPO / "apps" / "tiny.yaml", target)
    session = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    frame = np.zeros((1, 3, 32, 32), np.float32)
    for index in (3, -1, 1 << 40):  # a negative index is out of range too, not the last scenario
        with pytest.raises(Exception, match=INDEX_CHECK) as caught:
            session.run(None, {"input": frame, "scenario": np.array(index, np.int64)})
        assert "out of data bounds" in str(caught.value)


def test_one_scenario_app_is_a_graph_without_if(tmp_path: Path) -> None:
    app_path = tmp_path / "single.yaml"
    text = (REPO / "apps" / "tiny.yaml").read_text()
    app_path.write_text(text[:text.index("  - name: skip")])
    sidecar = assert_exported_equal(app_path, tmp_path / "single.onnx")
    assert sidecar["sharing"]["if_nodes"] == 0


def _tiny_model(path: Path, opset: int, cast_to: int | None = None) -> Path:
    """A one-layer model of the app's input; its output ``out`` cast to ``cast_to`` (an ONNX type) if given."""
    weight = numpy_helper.from_array(np.full((4, 3, 1, 1), 0.5, np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["conv" if cast_to else "out"])]
    if cast_to is not None:
        nodes.append(helper.make_node("Cast", ["conv"], ["out"], to=cast_to))
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("out", cast_to or onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
                              [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), path)
    return path


def _two_model_app(tmp_path: Path, first: Path, second: Path, extra: str = "") -> Path:
    path = tmp_path / "two.yaml"
    path.write_text(f"""name: two
input: {{name: x, shape: [1, 3, 8, 8], dtype: float32}}
initial: a
postprocess: {{kind: raw}}
scenarios:
  - {{name: a, model: {first}}}
  - {{name: b, model: {second}}}
{extra}""")
    return path


def test_what_cannot_be_one_graph_is_one_line_naming_the_field(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    float_model = _tiny_model(tmp_path / "f.onnx", 17)
    cases = {"output 'out' has different element types (a float32, b int32)":
             _tiny_model(tmp_path / "i.onnx", 17, onnx.TensorProto.INT32),
             "different versions of the ONNX operator set (a 17, b 13)": _tiny_model(tmp_path / "old.onnx", 13)}
    for fragment, second in cases.items():
        app_path = _two_model_app(tmp_path, float_model, second)
        capsys.readouterr()
        assert main(["export", str(app_path), "-o", str(tmp_path / "out.onnx")]) == 2
        err = capsys.readouterr().err
        assert_one_line_error(err, fragment, file=str(app_path))
        assert f"{app_path}: scenarios: " in err
        assert not (tmp_path / "out.onnx").exists()
    limited = _two_model_app(tmp_path, float_model, float_model, "memory_limit_mb: 1\n")
    assert main(["export", str(limited), "-o", str(tmp_path / "out.onnx")]) == 2
    assert_one_line_error(capsys.readouterr().err, "memory_limit_mb: an app run by parts")


def test_session_one_is_refused_where_it_cannot_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    float_model = _tiny_model(tmp_path / "f.onnx", 17)
    for extra, fragment in (("memory_limit_mb: 1\nruntime: {session: one}\n", "memory_limit_mb"),
                            ("runtime: {session: one, on_switch: resume}\n", "on_switch: resume")):
        app_path = _two_model_app(tmp_path, float_model, float_model, extra)
        capsys.readouterr()
        assert main(["check", str(app_path)]) == 2
        err = capsys.readouterr().err
        assert_one_line_error(err, fragment, file=str(app_path))
        assert "runtime.session: 'one'" in err


def test_an_unwritable_target_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app_path = str(REPO / "apps" / "tiny.yaml")
    # no such folder, a folder, a name the sidecar would take, a folder nobody may write in (root neither)
    for target in (tmp_path / "missing" / "x.onnx", tmp_path, tmp_path / "x.json", Path("/proc/x.onnx")):
        capsys.readouterr()
        assert main(["export", app_path, "-o", str(target)]) == 2
        assert_one_line_error(capsys.readouterr().err, "--output: ")
    assert list(tmp_path.iterdir()) == []


#: A family of small CNNs in the inline layer language: each scenario keeps some of the blocks (same names and
#: seed: the same weights) and ends in one of two heads.
BLOCKS = ("b0", "b1", "b2", "b3")


def _family_app(folder: Path, members: list[tuple[frozenset[int], int]]) -> Path:
    lines = ["name: family", "input: {name: input, shape: [1, 3, 16, 16], dtype: float32}", "initial: s0",
             "scenarios:"]
    for index, (kept, head) in enumerate(members):
        lines += [f"  - name: s{index}", "    seed: 7", "    layers:",
                  "      - {name: stem, op: conv, out: 8, kernel: 3, pad: 1, bn: true, act: relu}"]
        lines += [f"      - {{name: {BLOCKS[b]}, op: residual, layers: [{{op: conv, out: 8, kernel: 3, pad: 1, "
                  f"bn: true, act: relu}}], act: relu}}" for b in sorted(kept)]
        lines += ["      - {name: pool, op: gap}", "      - {name: flat, op: flatten}",
                  f"      - {{name: head{head}, op: fc, out: {4 + head}}}"]
    path = folder / "family.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(members=st.lists(st.tuples(st.frozensets(st.integers(0, len(BLOCKS) - 1)), st.integers(0, 1)),
                        min_size=1, max_size=4, unique=True))
def test_any_family_of_scenarios_is_one_graph_equal_to_each(members: list[tuple[frozenset[int], int]],
                                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    """Merging (a property): scenarios dropping any blocks of one backbone, with either of two heads (outputs of
    one name and two shapes), are one graph giving every scenario its own outputs."""
    folder = tmp_path_factory.mktemp("family")
    app_path = _family_app(folder, members)
    app = load_app(app_path)
    graph = one_graph(app)
    onnx.checker.check_model(graph.model, full_check=True)
    session = ort.InferenceSession(graph.model.SerializeToString(), providers=["CPUExecutionProvider"])
    refs = References(app)
    frame = random_frame(app, 0)
    for index, scenario in enumerate(app.models):
        values = session.run(["output"], {"input": frame, "scenario": np.array(index, np.int64)})
        assert_equivalent({"output": values[0]}, refs.outputs(scenario, frame), scenario)
    # the stem, and the blocks every scenario keeps right after it, run outside any If
    prefix = 0
    while prefix < len(BLOCKS) and all(prefix in kept for kept, _ in members):
        prefix += 1
    outer = [node for node in graph.model.graph.node if node.op_type == "Conv"]
    assert len(outer) >= 1 + prefix


def test_a_memory_limit_that_needs_parts_is_refused_for_one_graph(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    app_path = tmp_path / "tiny.yaml"
    app_path.write_text((REPO / "apps" / "tiny.yaml").read_text().replace(
        "initial: full\n", "initial: full\nruntime: {session: one}\n"))
    assert main(["build", str(app_path), "--memory-limit", "0.25", "--cost", "analytic", "--generations", "2",
                 "--population", "4", "-q"]) == 2
    assert_one_line_error(capsys.readouterr().err, "runtime.session: the memory limit 0.25 MB needs processing by "
                                                   "parts", file=str(app_path))
    assert not (tmp_path / "tiny.build").exists()
