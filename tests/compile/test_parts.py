"""Execution by parts on ONNX Runtime: invariant 1 under reduction, arena safety.

The calls ``sbrs.compile.parts`` compiles run on the one runtime (``sbrs.runtime.engine``), made
from models (``Runtime.from_models``) or from an example app (``app_parts``). Every zoo CNN at a
small resolution runs with the maximal reduction the planner allows (1-row bands in every row-local layer)
and with a mixed configuration (band heights 1, 2, 4, 8 and whole, by layer), and must equal its own
unreduced model run by ONNX Runtime (max abs diff <= 1e-5 * max(1, max |ref|)). Every example app runs under
a reduction, every scenario, with switches. Every arena plan is checked with ``check_plan``.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from sbrs import zoo
from sbrs.compile.fit import app_parts
from sbrs.compile.parts import call_model, compile_parts, executable_bands
from sbrs.compile.parts_plan import PartsPlan, edge_operands
from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.memory import check_plan
from sbrs.model import CnnModel
from sbrs.model.fold import fold_model
from sbrs.model.onnx_export import to_onnx
from sbrs.reduction import cut_genes, maximal_bands, plan_reduction, reduction_genes
from sbrs.reduction.tiles import tile_groups
from sbrs.runtime.engine import Runtime
from tests.conftest import APPS, ort_session, zoo_model
from tests.runtime.conftest import References, assert_equivalent, random_frame

ZOO = [entry.name for entry in zoo.list_models()]


def mixed_bands(model: CnnModel) -> dict[str, int]:
    """Band heights 1, 2, 4, 8 and whole in turn over the genes (tied followers share their producer's)."""
    choices = (1, 2, 4, 8, 0)
    bands: dict[str, int] = {}
    for index, gene in enumerate(reduction_genes({"m": model}, tie_followers=True)):
        band = choices[index % len(choices)] or gene.height
        bands.update(dict.fromkeys(gene.layers, band))
    return bands


def reference(model: CnnModel, frame: np.ndarray) -> dict[str, np.ndarray]:
    session = ort_session(to_onnx(model))
    values = session.run(None, {model.graph_inputs[0]: frame})
    return {out.name: value for out, value in zip(session.get_outputs(), values, strict=True)}


def frame_of(model: CnnModel, seed: int = 0) -> np.ndarray:
    spec = model.tensors[model.graph_inputs[0]]
    return np.random.default_rng(seed).standard_normal(spec.shape).astype(spec.dtype)


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if name == "resnet50" else name
                                  for name in ZOO])  # resnet50: 4-5 s a case; resnet18 has the same blocks' kinds
@pytest.mark.parametrize("config", ["maximal", "mixed"])
def test_zoo_by_parts_equals_unreduced(name: str, config: str) -> None:
    model = zoo_model(name)
    bands = maximal_bands(model) if config == "maximal" else mixed_bands(model)
    frame = frame_of(model)
    want = reference(model, frame)
    with Runtime.from_models({name: model}, {name: bands}) as runtime:
        compiled = source(runtime)
        parts = compiled.scenarios[name]
        assert parts.band_calls > 0, "nothing ran by parts"
        assert check_plan(compiled.problem, compiled.arena) == []
        for repeat in range(2):  # the second frame reuses line buffers left by the first
            assert_equivalent(runtime.infer(frame), want, f"{name} {config} frame {repeat}")
        other = frame_of(model, 1)
        assert_equivalent(runtime.infer(other), reference(model, other), f"{name} {config} second frame")
    reduced = plan_reduction({name: model}, {name: bands})
    assert check_plan(reduced.problem, reduced.arena) == []


def test_band_calls_fuse_conv_batchnorm_activation_and_use_pad_variants() -> None:
    model = zoo_model("mobilenet_v2")
    parts = compile_parts({"m": model}, {"m": maximal_bands(model)}).scenarios["m"]
    head = parts.calls[0]
    assert head.layers == ("features.0.0",)  # conv, batch norm, clip: folded into one layer, one call
    variants = {call.pads for call in parts.calls if call.layers == head.layers}
    assert variants == {(("features.0.0", 0, 0),), (("features.0.0", 1, 0),)}  # 224 rows, stride 2: no bottom pad
    assert len({call.key for call in parts.calls if call.layers == head.layers}) == 2
    with pytest.raises(SbrsRuntimeError, match="folded"):
        call_model(model, parts, head)
    proto = call_model(fold_model(model), parts, head)
    dims = [d.dim_param for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert dims[0] == "h0" and proto.graph.node[0].op_type == "Transpose"
    assert [n.op_type for n in proto.graph.node] == ["Transpose", "Conv", "Clip", "Transpose"]
    assert "features.0.0" not in rows_of(parts) and "features.0.1" not in rows_of(parts)  # no BN, no conv tensor
    rows = {b.tensor: b for b in parts.buffers}
    assert rows["features.0.2"].layout == "rows" and rows["features.0.2"].capacity < 112
    assert any(call.moves for call in parts.calls)  # sliding line buffers move their kept rows


@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet18"])
def test_rare_band_variants_share_one_edge_model(name: str) -> None:
    """A tiled block's calls come as first, middle and last bands: the middle keeps its model, the others share
    one edge model whose pads and slice rows are inputs (fewer sessions), and every output still equals ORT's."""
    model = fold_model(zoo_model(name))
    tiles = {name: [(g, 1) for g in tile_groups(model)]}
    bands = {name: {model.layers[0].name: 2}}
    frame = frame_of(model)
    with Runtime.from_models({name: model}, bands, tiles=tiles) as runtime:
        parts = source(runtime).scenarios[name]
        edge = [call for call in parts.calls if call.edge]
        assert edge and all(model.layer(n).op == "Conv" for call in edge for n in call.edge_pads)
        assert all(model.layer(n).attributes["kernel_shape"][0] > 1 for call in edge for n in call.edge_pads)
        variants = {(call.layers, call.pads, call.slices) for call in parts.calls if not call.feed}
        assert parts.sessions < len(variants) and runtime.session_count == parts.sessions
        for layers in {call.layers for call in edge}:
            group = [call for call in parts.calls if call.layers == layers]
            assert len({call.key for call in group if call.edge}) == 1  # one edge model per group
            assert len({call.key for call in group}) == 2  # beside the middle bands' own model
            fixed = {(call.pads, call.slices) for call in group if not call.edge}
            assert len(fixed) == 1 and not fixed & {(call.pads, call.slices) for call in group if call.edge}
        proto = call_model(model, parts, edge[0])
        pads = [node for node in proto.graph.node if node.op_type == "Pad"]
        assert len(pads) == len(edge[0].edge_pads) > 0  # a 1x1 convolution's band needs no rows of zeros
        assert {i.name for i in proto.graph.input} >= {operand for operand, _ in edge_operands(edge[0])}
        assert_equivalent(runtime.infer(frame), reference(model, frame), f"{name} with edge models")
        stored = PartsPlan.from_dict(json.loads(json.dumps(source(runtime).to_dict())))  # as a build keeps it
        assert stored.scenarios[name].calls == parts.calls


def test_edge_models_need_pad_with_input_pads() -> None:
    """Below opset 11 ``Pad`` takes its pads as an attribute: every variant keeps a model of its own."""
    model = fold_model(zoo_model("mobilenet_v2"))
    old = replace(model, opset_imports={**model.opset_imports, "": 10})
    tiles = {"m": [(g, 1) for g in tile_groups(model)]}
    bands = {"m": {model.layers[0].name: 2}}
    assert any(call.edge for call in compile_parts({"m": model}, bands, tiles=tiles).scenarios["m"].calls)
    assert not any(call.edge for call in compile_parts({"m": old}, bands, tiles=tiles).scenarios["m"].calls)


def test_max_pool_band_variants_are_never_edge_calls() -> None:
    """A zero ``Pad`` is not MaxPool's padding: ResNet-18's stem pool keeps a model per variant."""
    model = fold_model(zoo_model("resnet18"))
    parts = compile_parts({"m": model}, {"m": maximal_bands(model)}).scenarios["m"]
    pools = {call.layers for call in parts.calls if any(model.layer(n).op == "MaxPool" for n, _, _ in call.pads)}
    assert pools
    assert not any(call.edge for call in parts.calls if call.layers in pools)


def source(runtime: Runtime) -> PartsPlan:
    """What ``compile_parts`` compiled for ``runtime`` (kept in memory by a runtime not loaded from a build)."""
    assert runtime.plan.problem is not None and runtime.plan.arena is not None
    return runtime.plan


def rows_of(parts: object) -> set[str]:
    return {b.tensor for b in parts.buffers}  # type: ignore[attr-defined]


def test_whole_configuration_is_one_native_call() -> None:
    model = zoo_model("resnet18")
    parts = compile_parts({"m": model}).scenarios["m"]
    assert len(parts.calls) == 1 and not parts.calls[0].banded
    assert {b.layout for b in parts.buffers} == {"nchw"}


def test_unsupported_ops_run_whole() -> None:
    model = zoo_model("efficientnet_b0")
    bands = executable_bands(model, maximal_bands(model))
    for layer in model.layers:
        if layer.op in ("Input", "GlobalAveragePool", "Gemm", "Flatten"):
            assert bands[layer.name] == (layer.output_shapes[0][2] if len(layer.output_shapes[0]) == 4 else 1)


def example_bands(app_models: dict[str, CnnModel]) -> dict[str, dict[str, int]]:
    """Per scenario: 8-row bands in layers at least a quarter of the input high, 2-row bands in the layer after."""
    result: dict[str, dict[str, int]] = {}
    for scenario, model in app_models.items():
        genes = reduction_genes({scenario: model}, tie_followers=True)
        tallest = max((g.height for g in genes), default=1)
        bands: dict[str, int] = {}
        for gene in genes:
            band = 8 if gene.height >= tallest // 2 else (2 if gene.height >= tallest // 4 else gene.height)
            bands.update(dict.fromkeys(gene.layers, band))
        result[scenario] = bands
    return result


@pytest.mark.parametrize("path", [pytest.param(path, marks=pytest.mark.slow) if path.stem in ("drone", "multi-cnn")
                                  else path for path in APPS], ids=[p.stem for p in APPS])  # 4-6 s each
def test_example_apps_under_reduction(path, load_example) -> None:
    app = load_example(path.stem)
    references = References(app)
    bands = example_bands(dict(app.models))
    with Runtime.from_app(app, parts=app_parts(app, bands, {})) as runtime:
        assert check_plan(source(runtime).problem, source(runtime).arena) == []
        assert runtime.scenario == app.config.initial
        order = [*runtime.scenarios, app.config.initial]
        for index, scenario in enumerate(order):  # every scenario, switching between frames
            runtime.switch(scenario)
            frame = random_frame(app, index)
            assert_equivalent(runtime.infer(frame), references.outputs(scenario, frame), f"{path.stem}/{scenario}")


def test_api_errors_leave_the_runtime_usable() -> None:
    model = zoo_model("squeezenet1_1")
    runtime = Runtime.from_models({"sq": model}, {"sq": maximal_bands(model)})
    frame = frame_of(model)
    with pytest.raises(InputError):
        runtime.switch("nope")
    with pytest.raises(InputError):
        runtime.infer(frame[:, :, :10])
    with pytest.raises(InputError):
        runtime.infer({"wrong": frame})
    assert_equivalent(runtime.infer({model.graph_inputs[0]: frame}), reference(model, frame), "after errors")
    with pytest.raises(InputError):
        compile_parts({"sq": model}, {"other": {}})
    with pytest.raises(InputError, match="other"):
        Runtime.from_models({"sq": model}, cuts={"other": ()})
    with pytest.raises(InputError, match="initial"):
        Runtime.from_models({"sq": model}, initial="other")
    with pytest.raises(InputError, match="share one input"):  # as an app's scenarios, they share its input
        Runtime.from_models({"sq": model, "cifar": zoo_model("cifar_resnet")})
    runtime.close()
    with pytest.raises(SbrsRuntimeError):
        runtime.infer(frame)


def test_timed_calls_time_every_step_feeds_included_and_change_nothing() -> None:
    """What the cost table (``sbrs.compile.costs``) splits over the layers: one figure per step."""
    model = zoo_model("squeezenet1_1")
    frame = frame_of(model)
    with Runtime.from_models({"sq": model}, {"sq": maximal_bands(model, stream_input=True)}) as runtime:
        calls = runtime.plan.scenarios["sq"].calls
        seconds = runtime.timed_calls(frame, 2, reduce="min")
        assert len(seconds) == len(calls) and all(s > 0 for s in seconds)
        assert any(call.feed for call in calls)  # the frame streamed: its feeds are steps too
        assert len(runtime.timed_calls(frame, 1)) == len(calls)
        with pytest.raises(InputError):
            runtime.timed_calls(frame, reduce="mean")
        with pytest.raises(InputError):
            runtime.timed_calls(frame[:, :, :10])
        assert_equivalent(runtime.infer(frame), reference(model, frame), "after timing")


@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet18", "efficientnet_b0"])
def test_partitions_and_a_streamed_input_keep_outputs_and_lower_the_arena(name: str) -> None:
    """1-row bands everywhere, the frame streamed row by row into a line buffer (the input layer banded),
    and cuts at every tensor the search may cut: same outputs, the arena at its lower bound (and smaller for
    MobileNetV2)."""
    model = fold_model(zoo_model(name))
    bands = {layer.name: 1 for layer in model.layers}
    cuts = {name: [g.layer for g in cut_genes({name: model})]}
    assert cuts[name]
    frame = frame_of(model)
    want = reference(model, frame)
    with Runtime.from_models({name: model}, {name: bands}) as plain, \
            Runtime.from_models({name: model}, {name: bands}, cuts=cuts) as cut:
        parts = source(cut).scenarios[name]
        assert any(call.feed for call in parts.calls) and parts.buffer(model.graph_inputs[0]).capacity < 64
        assert cut.plan.scenarios[name].streamed
        assert check_plan(source(cut).problem, source(cut).arena) == []
        assert cut.arena_bytes == cut.plan.lower_bound_bytes
        if name == "mobilenet_v2":  # cuts pay where the CNN narrows; elsewhere the search leaves them out
            assert cut.arena_bytes < plain.arena_bytes
        for runtime in (plain, cut):
            for repeat in range(2):
                assert_equivalent(runtime.infer(frame), want, f"{name} frame {repeat}")
    reduced = plan_reduction({name: model}, {name: bands}, cuts=cuts)
    assert reduced.cuts[name] and check_plan(reduced.problem, reduced.arena) == []


@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet18", "efficientnet_b0"])
@pytest.mark.parametrize("band", [1, 3])
def test_tiled_groups_recompute_halos_and_equal_unreduced(name: str, band: int) -> None:
    """The receptive-field tiling of Zhuang et al. 2023: every candidate group runs as one call per band (members with their own band
    pads, a Slice where a member reads fewer rows than the call holds); outputs equal ORT's, internal
    tensors get no line buffer, and the plan counts them as transients of each firing."""
    model = fold_model(zoo_model(name))
    groups = tile_groups(model)
    tiles = {name: [(g, band) for g in groups]}
    bands = {model.layers[0].name: 2}  # the frame streamed two rows at a time
    frame = frame_of(model)
    want = reference(model, frame)
    with Runtime.from_models({name: model}, {name: bands}, tiles=tiles) as runtime:
        parts = source(runtime).scenarios[name]
        assert check_plan(source(runtime).problem, source(runtime).arena) == []
        internal = {model.layer(n).outputs[0] for g in groups for n in g[:-1]}
        assert not internal & {b.tensor for b in parts.buffers}
        tiled = [call for call in parts.calls if len(call.layers) > 1 and call.layers in {tuple(g) for g in groups}]
        assert tiled and any(call.slices for call in tiled) == (name != "efficientnet_b0")
        for repeat in range(2):
            assert_equivalent(runtime.infer(frame), want, f"{name} tiles of {band} frame {repeat}")
    reduced = plan_reduction({name: model}, {name: bands}, tiles=tiles)
    assert check_plan(reduced.problem, reduced.arena) == []
    assert reduced.schedules[name].transients
