"""Invariant 2 over random scenario sets: random small CNNs derived from one base (shared, dropped, reweighted,
inserted and repeated blocks; name-keyed weights so kept blocks share weights), random A ⊆ {I, O, par}."""

from __future__ import annotations

import itertools
import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sbrs.moc import Moc, derive_moc, moc_summary, round_trip_differences
from sbrs.moc.derive import param_operands
from sbrs.model import CnnModel
from tests.moc.cnn_helpers import program_model, scenario_programs

ADAPTIVE_SETS = st.sets(st.sampled_from(["I", "O", "par"])).map(sorted)


def _models(programs: list[list[tuple]], extra_output: bool) -> dict[str, CnnModel]:
    return {f"s{i}": program_model(p, name=f"s{i}", extra_output=extra_output) for i, p in enumerate(programs)}


def _sizeless(shapes: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    return tuple(shape if len(shape) < 3 else (*shape[:2], *(-1,) * (len(shape) - 2)) for shape in shapes)


def _members(moc: Moc, models: dict[str, CnnModel]) -> dict[str, list[tuple[str, str]]]:
    members: dict[str, list[tuple[str, str]]] = {layer.id: [] for layer in moc.layers}
    for scenario in models:
        for name, layer_id in moc.layer_capture[scenario].items():
            members[layer_id].append((scenario, name))
    return members


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs=scenario_programs(), adaptive=ADAPTIVE_SETS, extra_output=st.booleans())
# found by this test: a layer at the first scenario's size with other weights joined a supergraph layer that
# already held the same weights at another size (compared with its first member only)
@example(programs=[[("conv", "k1", 1)], [("pool",), ("conv", "k1", 1)], [("conv", "k1'", 1)]],
         adaptive=["I", "O", "par"], extra_output=False)
def test_capture_and_round_trip(programs: list[list[tuple]], adaptive: list[str], extra_output: bool) -> None:
    models = _models(programs, extra_output)
    moc = derive_moc(models, adaptive)
    assert round_trip_differences(moc, models) == []

    # Deterministic and JSON-ready.
    assert derive_moc(models, list(reversed(adaptive))).to_dict() == moc.to_dict()
    json.dumps(moc_summary(moc))

    # Control parameters only for adaptive attributes; what is not adaptive is equal among captured layers.
    assert {p.attribute for p in moc.params} <= set(adaptive)
    by_name = {s: {layer.name: layer for layer in m.layers} for s, m in models.items()}
    for layer_id, members in _members(moc, models).items():
        layers = [by_name[s][n] for s, n in members]
        assert len({s for s, _ in members}) == len(members)  # one layer per scenario
        if {"I", "O"} <= set(adaptive):  # sizes ride on the I/O edges: equal up to H and W, and then same weights
            assert len({(x.op, _sizeless(x.input_shapes), _sizeless(x.output_shapes), str(x.attributes))
                        for x in layers}) == 1
            if len({(x.input_shapes, x.output_shapes) for x in layers}) > 1:
                assert len({tuple(p.digest for p in param_operands(x)) for x in layers}) == 1
                assert moc.layer(layer_id).sized
        else:
            assert len({(x.op, x.input_shapes, x.output_shapes, str(x.attributes)) for x in layers}) == 1
        if "par" not in adaptive:
            assert len({tuple(p.digest for p in param_operands(x)) for x in layers}) == 1
        layer = moc.layer(layer_id)
        assert (layer.reuse == "none") == (len(members) == 1)
        assert (layer.reuse == "partial") == bool(layer.control)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs=scenario_programs(), adaptive=ADAPTIVE_SETS)
def test_a_copied_scenario_is_captured_by_the_same_layers(programs: list[list[tuple]], adaptive: list[str]) -> None:
    """A scenario equal to an earlier one (under another name) reuses exactly that one's supergraph layers."""
    models = _models(programs, extra_output=False)
    models["copy"] = program_model(programs[0], name="copy")
    moc = derive_moc(models, adaptive)
    assert round_trip_differences(moc, models) == []
    assert moc.layer_capture["copy"] == moc.layer_capture["s0"]
    assert moc.edge_capture["copy"] == moc.edge_capture["s0"]
    for step_a, step_b in itertools.zip_longest(moc.steps["s0"], moc.steps["copy"]):
        assert step_a.layer_id == step_b.layer_id and step_a.values == step_b.values
