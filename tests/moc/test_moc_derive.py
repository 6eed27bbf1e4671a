"""Algorithm 5's behaviour on hand-made scenarios: what is reused, what is kept apart, and why."""

from __future__ import annotations

import json

import onnx
import pytest

from sbrs.errors import InputError
from sbrs.moc import Moc, assert_round_trip, derive_moc
from sbrs.model import CnnModel, import_model
from tests.moc.cnn_helpers import GraphBuilder, program_model, program_onnx

ALL = ("I", "O", "par")


def shared(moc: Moc, a: tuple[str, str], b: tuple[str, str]) -> bool:
    """Whether layer a[1] of scenario a[0] and layer b[1] of b[0] are captured by one supergraph layer."""
    return moc.layer_capture[a[0]][a[1]] == moc.layer_capture[b[0]][b[1]]


def derive_checked(models: dict[str, CnnModel], adaptive: tuple[str, ...], **options: object) -> Moc:
    moc = derive_moc(models, adaptive, **options)  # type: ignore[arg-type]
    assert_round_trip(moc, models)
    return moc


def test_shared_prefix_is_fully_reused_with_its_edges() -> None:
    models = {
        "big": program_model([("conv", "k1", 3), ("relu",), ("res", "k2"), ("conv", "k3", 3)]),
        "small": program_model([("conv", "k1", 3), ("relu",), ("res", "k2"), ("pool",), ("conv", "k4", 1)]),
    }
    moc = derive_checked(models, ALL)
    for name in ("input:input", "b0.conv", "b1.relu", "b2.res.c1", "b2.res.relu", "b2.res.c2"):
        layer = moc.layer(moc.layer_capture["big"][name])
        assert shared(moc, ("big", name), ("small", name))
        assert layer.reuse == "full", name
    edge = "input:input->b0.conv:input"
    assert moc.edge_capture["big"][edge] == moc.edge_capture["small"][edge]
    assert moc.edge(moc.edge_capture["big"][edge]).reuse == "full"
    # The residual add reads the block input and the second conv: both edges are shared.
    add_edges = [e.name for e in models["big"].edges if e.dst == "b2.res.add"]
    assert len(add_edges) == 2
    assert all(moc.edge_capture["big"][e] == moc.edge_capture["small"][e] for e in add_edges)
    # Where the scenarios diverge the add's O differs (a control parameter, O ∈ A).
    add = moc.layer(moc.layer_capture["big"]["b2.res.add"])
    assert add.reuse == "partial" and list(add.control) == ["O"]


def test_different_weights_merge_only_when_par_is_adaptive() -> None:
    models = {"a": program_model([("conv", "k1", 3), ("relu",)]),
              "b": program_model([("conv", "k2", 3), ("relu",)])}
    moc = derive_checked(models, ALL)
    assert shared(moc, ("a", "b0.conv"), ("b", "b0.conv"))
    layer = moc.layer(moc.layer_capture["a"]["b0.conv"])
    assert layer.reuse == "partial" and list(layer.control) == ["par"]
    param = moc.param(layer.control["par"])
    assert dict(param.values) == {"a": models["a"].layer("b0.conv").param_digests,
                                  "b": models["b"].layer("b0.conv").param_digests}
    assert all(len(v) == 2 for v in param.values.values())  # (W, B) digests, in operand order
    # The layers after it are fully reused: same inputs (the merged conv), same weights.
    assert moc.layer(moc.layer_capture["a"]["b1.relu"]).reuse == "full"

    without_par = derive_checked(models, ("I", "O"))
    assert not shared(without_par, ("a", "b0.conv"), ("b", "b0.conv"))
    assert all(p.attribute != "par" for p in without_par.params)
    # The relus then read different supergraph edges: merged through an I control parameter.
    relu = without_par.layer(without_par.layer_capture["a"]["b1.relu"])
    assert shared(without_par, ("a", "b1.relu"), ("b", "b1.relu")) and list(relu.control) == ["I"]


def _rename_initializers(model: onnx.ModelProto, prefix: str) -> onnx.ModelProto:
    renamed = onnx.ModelProto()
    renamed.CopyFrom(model)
    names = {init.name for init in renamed.graph.initializer}
    for init in renamed.graph.initializer:
        init.name = prefix + init.name
    for node in renamed.graph.node:
        node.input[:] = [prefix + i if i in names else i for i in node.input]
    return renamed


def test_par_is_compared_by_value_not_by_name_or_shape() -> None:
    program = [("conv", "k1", 3), ("relu",)]
    models = {"a": program_model(program),
              "b": import_model(_rename_initializers(program_onnx(program), "other/"), name="b")}
    assert models["a"].layer("b0.conv").params[0].name != models["b"].layer("b0.conv").params[0].name
    moc = derive_checked(models, ("I", "O"))  # par not adaptive: equal contents still merge
    assert all(layer.reuse == "full" for layer in moc.layers)
    assert not moc.params


def test_identical_layers_of_one_scenario_never_merge() -> None:
    # Two convolutions with the same weights and shapes, one after the other, and an Add reading x twice.
    model = program_model([("conv", "k1", 3), ("conv", "k1", 3), ("double",), ("double",)])
    assert model.layer("b0.conv").param_digests == model.layer("b1.conv").param_digests
    moc = derive_checked({"s": model}, ALL)
    assert len(moc.layers) == len(model.layers)
    assert len(set(moc.layer_capture["s"].values())) == len(model.layers)
    assert not moc.params and all(layer.reuse == "none" for layer in moc.layers)


def test_layers_in_parallel_partitions_never_merge() -> None:
    # The two 1x1 convolutions of a branch block are alike (same shapes, key-derived weights differ only by key)
    models = {"s": program_model([("branch", "k1")]), "t": program_model([("branch", "k1")])}
    parallel = {"s": [{"input:input", "b0.branch.l"}, {"b0.branch.r", "b0.branch.cat", "b0.branch.m"}]}
    moc = derive_checked(models, ALL, parallel=parallel)
    assert not shared(moc, ("s", "b0.branch.l"), ("s", "b0.branch.r"))
    # Across scenarios the equal layers are still shared: nothing runs two scenarios at once.
    assert shared(moc, ("s", "b0.branch.l"), ("t", "b0.branch.l"))
    assert all(layer.reuse == "full" for layer in moc.layers)


@pytest.mark.parametrize(("parallel", "message"), [
    ({"nope": [{"x"}]}, "unknown scenario 'nope'"),
    ({"s": [{"ghost"}]}, "has no layer 'ghost'"),
    ({"s": [{"b0.relu"}, {"b0.relu"}]}, "in two partitions"),
])
def test_bad_parallel_annotation_is_an_input_error(parallel: dict[str, list[set[str]]], message: str) -> None:
    with pytest.raises(InputError, match=message):
        derive_moc({"s": program_model([("relu",)])}, ALL, parallel=parallel)


def test_bad_adaptive_set_and_no_scenarios_are_input_errors() -> None:
    with pytest.raises(InputError, match="unknown adaptive attribute"):
        derive_moc({"s": program_model([("relu",)])}, ["I", "weights"])
    with pytest.raises(InputError, match="no scenarios"):
        derive_moc({}, ALL)


def test_operand_structure_and_attributes_are_part_of_equation_5_1() -> None:
    """A conv without bias never captures one with bias; an explicit default attribute is a difference too."""

    def one_conv(bias: bool, dilations: bool) -> CnnModel:
        g = GraphBuilder()
        x = g.conv("input", "k1", 3, 3, 3, "conv", bias=bias)
        if dilations:
            g.nodes[-1].attribute.append(onnx.helper.make_attribute("dilations", [1, 1]))
        return import_model(g.model([("input", (1, 3, 8, 8))], [x]), name="m")

    base = one_conv(bias=True, dilations=False)
    for other in (one_conv(bias=False, dilations=False), one_conv(bias=True, dilations=True)):
        moc = derive_checked({"a": base, "b": other}, ALL)
        assert not shared(moc, ("a", "conv"), ("b", "conv"))
    moc = derive_checked({"a": base, "b": one_conv(bias=True, dilations=False)}, ())
    assert shared(moc, ("a", "conv"), ("b", "conv"))


def test_output_not_adaptive_shares_only_what_feeds_the_same_consumers() -> None:
    """O ∉ A: a layer whose consumers differ between scenarios cannot be shared, nor (transitively) its
    producers; the layers downstream of the divergence can still share, reading through I parameters."""
    models = {"a": program_model([("conv", "k1", 3), ("relu",), ("conv", "k2", 3)]),
              "b": program_model([("conv", "k1", 3), ("sigmoid",), ("conv", "k2", 3)])}
    moc = derive_checked(models, ("I", "par"))
    assert not shared(moc, ("a", "b0.conv"), ("b", "b0.conv"))  # feeds relu in a, sigmoid in b
    assert not shared(moc, ("a", "input:input"), ("b", "input:input"))
    assert shared(moc, ("a", "b2.conv"), ("b", "b2.conv"))  # same weights, I differs: a parameter
    assert [p.attribute for p in moc.params if p.layer == moc.layer_capture["a"]["b2.conv"]] == ["I"]
    full = derive_checked(models, ALL)
    assert shared(full, ("a", "b0.conv"), ("b", "b0.conv"))


def test_nothing_adaptive_still_shares_identical_scenarios_completely() -> None:
    program = [("conv", "k1", 3), ("res", "k2"), ("branch", "k3"), ("pool",), ("double",)]
    models = {"a": program_model(program), "b": program_model(program), "c": program_model(program)}
    for adaptive in [(), ("I",), ("O",), ("par",), ALL]:
        moc = derive_checked(models, adaptive)
        assert len(moc.layers) == len(models["a"].layers) and len(moc.edges) == len(models["a"].edges)
        assert all(layer.reuse == "full" for layer in moc.layers) and not moc.params


def test_reordered_layers_give_a_cyclic_supergraph_that_still_round_trips() -> None:
    models = {"a": program_model([("conv", "k1", 3), ("relu",), ("sigmoid",)]),
              "b": program_model([("conv", "k1", 3), ("sigmoid",), ("relu",)])}
    moc = derive_checked(models, ALL)
    relu, sigmoid = moc.layer_capture["a"]["b1.relu"], moc.layer_capture["a"]["b2.sigmoid"]
    assert moc.layer_capture["b"]["b2.relu"] == relu and moc.layer_capture["b"]["b1.sigmoid"] == sigmoid
    arcs = {(edge.src, edge.dst) for edge in moc.edges}
    assert (relu, sigmoid) in arcs and (sigmoid, relu) in arcs


def test_derivation_is_deterministic_and_json_ready() -> None:
    models = {"a": program_model([("conv", "k1", 3), ("res", "k2"), ("branch", "k3")], extra_output=True),
              "b": program_model([("conv", "k1", 3), ("branch", "k3'"), ("pool",)], extra_output=True)}
    first = derive_checked(models, ALL).to_dict()
    assert derive_moc(models, ["par", "O", "I"]).to_dict() == first
    assert json.loads(json.dumps(first)) == first
    # Scenario order is the visiting order: the first scenario founds the supergraph layers.
    swapped = derive_checked({"b": models["b"], "a": models["a"]}, ALL).to_dict()
    assert swapped["scenarios"] == ["b", "a"]


def test_tie_break_prefers_the_layer_whose_inputs_match() -> None:
    """Scenario b drops block 1 of a. Its conv k3 equals a's conv k2 in attributes and reads the same
    supergraph edge, and a's conv k3 in weights: edge reuse wins, the weights become a par parameter (and O
    one too: in a the conv feeds another conv, in b the head)."""
    models = {"a": program_model([("conv", "k1", 3), ("conv", "k2", 3), ("conv", "k3", 3)]),
              "b": program_model([("conv", "k1", 3), ("conv", "k3", 3)])}
    moc = derive_checked(models, ALL)
    assert shared(moc, ("a", "b1.conv"), ("b", "b1.conv"))
    assert moc.layer(moc.layer_capture["a"]["b1.conv"]).control.keys() == {"par", "O"}
    assert moc.layer(moc.layer_capture["a"]["b2.conv"]).reuse == "none"
