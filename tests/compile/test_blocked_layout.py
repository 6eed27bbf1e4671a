"""Units that hand each other ONNX Runtime's blocked layout: the two rewrites on small graphs of the shape ONNX
Runtime's optimiser writes, and on a real build, whose outputs must stay equal to ONNX Runtime on each scenario's
own model."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from sbrs.app import load_app
from sbrs.artifact.read import OPTIMIZED_SUFFIX, load_build
from sbrs.artifact.write import compile_app
from sbrs.compile.blocked_layout import NCHWC, drop_round_trips, fuse_residual_adds, keep_blocked_boundaries
from sbrs.ort_env import save_optimized, session_options
from sbrs.runtime.engine import Runtime

APPS = Path(__file__).resolve().parents[2] / "apps"


def _node(op: str, inputs: list[str], outputs: list[str], domain: str = NCHWC, **attributes: object) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs, domain=domain, **attributes)


def _graph(nodes: list[onnx.NodeProto], inputs: list[str], outputs: list[str]) -> onnx.GraphProto:
    value = [1, 16, 8, 8]
    return helper.make_graph(nodes, "unit",
                             [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, value) for n in inputs],
                             [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, value) for n in outputs])


def _residual_unit(activation: str | None = None, skip_shape: tuple[int, ...] = (1, 16, 8, 8)) -> tuple[
        onnx.GraphProto, dict[str, tuple[int, ...]]]:
    """What ONNX Runtime makes of ``relu(bn(conv(relu(bn(conv(x))))) + x)`` as a unit: the skip ``Add`` in NCHW."""
    conv2 = {"activation": activation} if activation else {}
    nodes = [_node("ReorderInput", ["in0"], ["x_c"], channels_last=0),
             _node("Conv", ["x_c", "w1", "b1"], ["y1_c"], activation="Relu"),
             _node("Conv", ["y1_c", "w2", "b2"], ["y2_c"], **conv2),
             _node("ReorderOutput", ["y2_c"], ["y2"], channels_last=0, channels=16),
             _node("Add", ["y2", "in0"], ["sum"], domain=""),
             _node("Relu", ["sum"], ["out"], domain="")]
    return _graph(nodes, ["in0"], ["out"]), {"in0": skip_shape, "y2": (1, 16, 8, 8), "sum": (1, 16, 8, 8)}


def _ops(graph: onnx.GraphProto) -> list[str]:
    return [node.op_type for node in graph.node]


def test_a_residual_add_and_its_relu_go_into_the_convolution() -> None:
    graph, shapes = _residual_unit()
    assert fuse_residual_adds(graph, shapes) == 1
    assert _ops(graph) == ["ReorderInput", "Conv", "Conv", "ReorderOutput"]
    conv = graph.node[2]
    assert list(conv.input) == ["y1_c", "w2", "b2", "x_c"]  # the skip's blocked form as the sum
    assert {a.name: helper.get_attribute_value(a) for a in conv.attribute} == {"activation": b"Relu"}
    assert list(graph.node[3].output) == ["out"]  # the graph's output is written by the reorder now


@pytest.mark.parametrize("case", ["activation already", "skip of another shape", "no blocked skip"])
def test_an_add_that_is_not_the_pattern_stays(case: str) -> None:
    graph, shapes = _residual_unit(activation="Relu" if case == "activation already" else None,
                                   skip_shape=(1, 16, 1, 1) if case == "skip of another shape" else (1, 16, 8, 8))
    if case == "no blocked skip":  # the skip is never reordered in: the first convolution reads another input
        graph.node[0].input[0] = "in1"
        graph.input.append(helper.make_tensor_value_info("in1", onnx.TensorProto.FLOAT, [1, 16, 8, 8]))
    before = _ops(graph)
    assert fuse_residual_adds(graph, shapes) == 0
    assert _ops(graph) == before


def test_a_sum_is_fused_only_into_a_convolution_that_runs_after_it() -> None:
    """``Add(y, s)``, both made by convolutions: ``s``'s convolution runs after ``y``'s blocked form exists, so it
    takes ``y`` as its sum; ``y``'s convolution runs before ``s``'s blocked form exists and cannot take ``s``.
    The reorder that made ``y`` for the ``Add`` alone goes with it."""
    nodes = [_node("ReorderInput", ["in0"], ["x_c"], channels_last=0),
             _node("Conv", ["x_c", "w1", "b1"], ["y_c"]),
             _node("ReorderOutput", ["y_c"], ["y"], channels_last=0, channels=16),
             _node("Conv", ["x_c", "w2", "b2"], ["s_c"]),
             _node("ReorderOutput", ["s_c"], ["s"], channels_last=0, channels=16),
             _node("Add", ["y", "s"], ["out"], domain="")]
    graph = _graph(nodes, ["in0"], ["out"])
    assert fuse_residual_adds(graph, {name: (1, 16, 8, 8) for name in ("in0", "y", "s", "out")}) == 1
    assert _ops(graph) == ["ReorderInput", "Conv", "Conv", "ReorderOutput"]
    assert list(graph.node[2].input) == ["x_c", "w2", "b2", "y_c"] and list(graph.node[3].output) == ["out"]


@pytest.mark.parametrize("channels", [16, 24])
def test_a_reorder_out_and_back_in_reads_the_blocked_tensor_itself(channels: int) -> None:
    nodes = [_node("Conv", ["in0", "w", "b"], ["y_c"]),
             _node("ReorderOutput", ["y_c"], ["y"], channels_last=0, channels=channels),
             _node("ReorderInput", ["y"], ["y_again"], channels_last=0),
             _node("Conv", ["y_again", "w", "b"], ["z_c"]),
             _node("ReorderOutput", ["z_c"], ["out"], channels_last=0, channels=channels)]
    graph = _graph(nodes, ["in0"], ["out"])
    if channels % 16:  # padding channels: the round trip zeroes them, which the blocked tensor need not have
        assert drop_round_trips(graph) == 0 and len(graph.node) == 5
        return
    assert drop_round_trips(graph) == 1
    assert _ops(graph) == ["Conv", "Conv", "ReorderOutput"] and graph.node[1].input[0] == "y_c"


def _chain(channels: int = 16, reader_extra: bool = False) -> dict[str, onnx.GraphProto]:
    """Two units: ``a`` writes ``t`` through a ``ReorderOutput``, ``b`` reads it through a ``ReorderInput`` (and,
    ``reader_extra``, through a plain ``Relu`` as well)."""
    a = _graph([_node("Conv", ["in0", "w", "b"], ["y_c"]),
                _node("ReorderOutput", ["y_c"], ["t"], channels_last=0, channels=channels)], ["in0"], ["t"])
    b_nodes = [_node("ReorderInput", ["in0"], ["x_c"], channels_last=0),
               _node("Conv", ["x_c", "w", "b"], ["z_c"]),
               _node("ReorderOutput", ["z_c"], ["out"], channels_last=0, channels=channels)]
    if reader_extra:
        b_nodes.append(_node("Relu", ["in0"], ["side"], domain=""))
    return {"a": a, "b": _graph(b_nodes, ["in0"], ["out", *(["side"] if reader_extra else [])])}


def _keep(graphs: dict[str, onnx.GraphProto], channels: int = 16, callers: tuple[str, ...] = ()) -> tuple[str, ...]:
    shape = (1, channels, 8, 8)
    return keep_blocked_boundaries(graphs, {"t": ["a"]}, {"t": [("b", "in0")]}, {"t": shape}, callers,
                                   {"t": "float32"})


def test_a_boundary_tensor_stays_blocked_between_units() -> None:
    graphs = _chain()
    assert _keep(graphs) == ("t",)
    assert _ops(graphs["a"]) == ["Conv"] and list(graphs["a"].node[0].output) == ["t"]
    assert _ops(graphs["b"]) == ["Conv", "ReorderOutput"] and graphs["b"].node[0].input[0] == "in0"


@pytest.mark.parametrize("case", ["read in plain NCHW too", "padded channels", "a scenario's output"])
def test_a_boundary_tensor_stays_plain_where_anything_needs_it_plain(case: str) -> None:
    graphs = _chain(channels=24 if case == "padded channels" else 16, reader_extra=case == "read in plain NCHW too")
    before = {unit: _ops(graph) for unit, graph in graphs.items()}
    kept = _keep(graphs, channels=24 if case == "padded channels" else 16,
                 callers=("t",) if case == "a scenario's output" else ())
    assert kept == () and {unit: _ops(graph) for unit, graph in graphs.items()} == before


def test_an_input_bound_to_two_tensors_is_blocked_for_both_or_neither() -> None:
    """A shared unit reads ``t`` in one scenario and ``u`` in another through the same input: ``u``'s writer
    cannot write it blocked, so ``t`` stays plain too (else the reader would take ``u``'s NCHW bytes as NCHWc)."""
    graphs = _chain()
    graphs["c"] = _graph([_node("Relu", ["in0"], ["u"], domain="")], ["in0"], ["u"])
    kept = keep_blocked_boundaries(graphs, {"t": ["a"], "u": ["c"]}, {"t": [("b", "in0")], "u": [("b", "in0")]},
                                   {"t": (1, 16, 8, 8), "u": (1, 16, 8, 8)}, (), {"t": "float32", "u": "float32"})
    assert kept == ()
    assert _ops(graphs["b"])[0] == "ReorderInput"


@pytest.fixture(scope="module")
def layer_units(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cifar10 app built (one stream, not measured): ResNet-32 scenarios cut into 6 units, whose residual
    blocks' skips ONNX Runtime's optimiser leaves in NCHW inside a unit, and boundaries of 16-64 channels."""
    folder = tmp_path_factory.mktemp("cifar10")
    text = (APPS / "cifar10.yaml").read_text(encoding="utf-8")
    app_path = folder / "cifar10.yaml"
    app_path.write_text(text.replace("runtime: {providers: [CPUExecutionProvider]}",
                                     "runtime: {providers: [CPUExecutionProvider], streams: 1}"), encoding="utf-8")
    compile_app(load_app(app_path))
    return app_path


def _optimised_by_onnx_runtime(portable: Path, target: Path) -> onnx.GraphProto:
    save_optimized(str(portable), str(target), ("CPUExecutionProvider",))
    return onnx.load_model(str(target), load_external_data=False).graph


def test_a_build_keeps_the_blocked_layout_and_equals_onnx_runtime(layer_units: Path, tmp_path: Path) -> None:
    build = load_build(layer_units)
    assert build.optimized_here
    folder = layer_units.with_suffix(".build")
    units = sorted(path.name.removesuffix(OPTIMIZED_SUFFIX) for path in folder.glob(f"u*{OPTIMIZED_SUFFIX}"))
    rewritten = {u: onnx.load_model(str(folder / f"{u}{OPTIMIZED_SUFFIX}"), load_external_data=False).graph
                 for u in units}
    own = {u: _optimised_by_onnx_runtime(folder / f"{u}.onnx", tmp_path / f"{u}{OPTIMIZED_SUFFIX}") for u in units}

    def count(graphs: dict[str, onnx.GraphProto], op: str) -> int:
        return sum(_ops(graph).count(op) for graph in graphs.values())

    # ONNX Runtime's own form keeps 34 skip additions and their ReLUs apart; those whose skip has a blocked form
    # are fused (the others' skips go through Slice and Pad, in NCHW)
    assert count(rewritten, "Add") < count(own, "Add") and count(rewritten, "Relu") < count(own, "Relu")
    assert count(rewritten, "Conv") == count(own, "Conv")
    # some unit reads its input in the blocked layout: no reorder between it and its writer
    assert any(node.domain == NCHWC and node.op_type != "ReorderInput" and graph.input[0].name in node.input
               for graph in rewritten.values() for node in graph.node)
    assert count(rewritten, "ReorderInput") < count(own, "ReorderInput")
    app = load_app(layer_units)
    runtime = Runtime.from_build(build)
    frame = np.random.default_rng(5).standard_normal(tuple(app.config.input.shape)).astype(np.float32)
    try:
        for scenario in app.config.scenarios:
            reference = ort.InferenceSession(scenario.model_path, session_options(), providers=["CPUExecutionProvider"])
            expected = reference.run(None, {reference.get_inputs()[0].name: frame})
            runtime.switch(scenario.name)
            got = runtime.infer(frame)
            for output, value in zip([o.name for o in reference.get_outputs()], expected, strict=True):
                assert np.max(np.abs(got[output] - value)) <= 1e-5 * max(1.0, float(np.max(np.abs(value))))
    finally:
        runtime.close()


def test_no_rewritten_unit_writes_into_its_inputs(layer_units: Path) -> None:
    """A fused sum may share its buffer with the convolution's output (ONNX Runtime allows it in place): where the
    sum is a unit's input, that would write into another unit's tensor in the arena, which the transition tables
    assume only its writer touches. ONNX Runtime never reuses a graph input's buffer; this checks it stays so."""
    folder = layer_units.with_suffix(".build")
    rng = np.random.default_rng(6)
    for path in sorted(folder.glob(f"u*{OPTIMIZED_SUFFIX}")):
        options = session_options()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        binding = session.io_binding()
        inputs = [rng.standard_normal(tuple(i.shape)).astype(np.float32) for i in session.get_inputs()]
        for spec, array in zip(session.get_inputs(), inputs, strict=True):
            binding.bind_input(spec.name, "cpu", 0, np.float32, array.shape, array.ctypes.data)
        outputs = [np.zeros(tuple(o.shape), np.float32) for o in session.get_outputs()]
        for spec, array in zip(session.get_outputs(), outputs, strict=True):
            binding.bind_output(spec.name, "cpu", 0, np.float32, array.shape, array.ctypes.data)
        before = [array.copy() for array in inputs]
        session.run_with_iobinding(binding)
        assert all(np.array_equal(a, b) for a, b in zip(inputs, before, strict=True)), path.name


def test_the_portable_files_of_the_same_build_give_the_same_outputs(layer_units: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Loaded on another machine the build runs its portable units, every one reordering as ONNX Runtime makes it:
    the blocked tensors never meet a unit that expects them plain."""
    copy = tmp_path / "cifar10.yaml"
    shutil.copy(layer_units, copy)
    shutil.copytree(layer_units.with_suffix(".build"), copy.with_suffix(".build"))
    app = load_app(layer_units)
    frame = np.random.default_rng(7).standard_normal(tuple(app.config.input.shape)).astype(np.float32)
    here = Runtime.from_build(load_build(copy))
    monkeypatch.setattr("sbrs.ort_env.machine_key", lambda providers: "another machine")
    elsewhere = Runtime.from_build(load_build(copy))
    try:
        for scenario in app.config.scenarios:
            here.switch(scenario.name)
            elsewhere.switch(scenario.name)
            a, b = here.infer(frame), elsewhere.infer(frame)
            assert all(np.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a)
    finally:
        here.close()
        elsewhere.close()
