"""The thesis' own example: scenarios CNN^1, CNN^2 of Figure 5.3, the MoC of Figure 5.4 and Table 5.1.

Encoded from the text of thesis Sections 5.6-5.7.1: CNN^1 = l1^1 → l2^1 → l3^1 → l4^1 → l5^1 and CNN^2 = l1^2 → ... →
l6^2, both chains. l2^1 and l2^2 are equal (same weights); l3^2 exists only in CNN^2 (here a 1x1 convolution);
l3^1 and l4^2 have the same operator, stride and kernel but different weights ({W_3^1, B_3^1} vs
{W_4^2, B_4^2}); the two last layers are equal. Data layers l1 (input) and the last layer (output) are layers
too. With A = {par, I, O} Algorithm 5 must give Table 5.1: layers l1..l6, edges e12, e23, e24, e34, e45, e56
(here e1..e6), control parameters p1 = O_2, p2 = par_4, p3 = I_4, and the execution sequence
φ^1 = (l1, ∅), (l2, {p1}), (l4, {p2, p3}), (l5, ∅), (l6, ∅).
"""

from __future__ import annotations

import json

import pytest

from sbrs.moc import assert_round_trip, capture_table, derive_moc, format_capture_table, moc_summary
from sbrs.model import CnnModel, import_model
from tests.moc.cnn_helpers import GraphBuilder


def cnn1() -> CnnModel:
    g = GraphBuilder()
    x = g.conv("input", "l2", 3, 4, 3, "l2^1")
    x = g.conv(x, "W3^1", 4, 4, 3, "l3^1")
    x = g.node("Relu", [x], "l4^1")
    return import_model(g.model([("input", (1, 3, 8, 8))], [x]), name="CNN1")


def cnn2() -> CnnModel:
    g = GraphBuilder()
    x = g.conv("input", "l2", 3, 4, 3, "l2^2")
    x = g.conv(x, "W3^2", 4, 4, 1, "l3^2")
    x = g.conv(x, "W4^2", 4, 4, 3, "l4^2")
    x = g.node("Relu", [x], "l5^2")
    return import_model(g.model([("input", (1, 3, 8, 8))], [x]), name="CNN2")


@pytest.fixture(scope="module")
def models() -> dict[str, CnnModel]:
    return {"CNN1": cnn1(), "CNN2": cnn2()}


def test_table_5_1(models: dict[str, CnnModel]) -> None:
    moc = derive_moc(models, ["par", "I", "O"])
    assert_round_trip(moc, models)
    c1, c2 = moc.layer_capture["CNN1"], moc.layer_capture["CNN2"]
    # Row "component", layer columns l1..l6 (Column 5: l3 captures nothing of CNN^1).
    assert [c1[n] for n in ("input:input", "l2^1", "l3^1", "l4^1")] == ["l1", "l2", "l4", "l5"]
    assert [c2[n] for n in ("input:input", "l2^2", "l3^2", "l4^2", "l5^2")] == ["l1", "l2", "l3", "l4", "l5"]
    assert [layer.id for layer in moc.layers] == [f"l{i}" for i in range(1, 7)]
    assert moc.layer("l6").op == "Output" and moc.layer("l6").scenarios == ("CNN1", "CNN2")
    # Row "reuse": l1, l5, l6 full; l2 partial (O); l3 unshared; l4 partial (par, I).
    assert {layer.id: layer.reuse for layer in moc.layers} == {
        "l1": "full", "l2": "partial", "l3": "none", "l4": "partial", "l5": "full", "l6": "full"}
    assert moc.layer("l2").control == {"O": "p1"}
    assert moc.layer("l4").control == {"par": "p2", "I": "p3"}

    # Edge columns e12, e23, e24, e34, e45, e56 are e1..e6 here.
    endpoints = {edge.id: (edge.src, edge.dst, edge.users) for edge in moc.edges}
    assert endpoints == {
        "e1": ("l1", "l2", ("CNN1", "CNN2")),
        "e2": ("l2", "l3", ("CNN2",)),
        "e3": ("l2", "l4", ("CNN1",)),
        "e4": ("l3", "l4", ("CNN2",)),
        "e5": ("l4", "l5", ("CNN1", "CNN2")),
        "e6": ("l5", "l6", ("CNN1", "CNN2")),
    }

    # Control parameters: p1 = O_2 ∈ {{e24}, {e23}}, p2 = par_4 ∈ {{W_3^1, B_3^1}, {W_4^2, B_4^2}},
    # p3 = I_4 ∈ {{e24}, {e34}}.
    p1, p2, p3 = moc.params
    assert (p1.layer, p1.attribute, dict(p1.values)) == ("l2", "O", {"CNN1": ("e3",), "CNN2": ("e2",)})
    assert (p3.layer, p3.attribute, dict(p3.values)) == ("l4", "I", {"CNN1": ("e3",), "CNN2": ("e4",)})
    w3 = models["CNN1"].layer("l3^1").param_digests
    w4 = models["CNN2"].layer("l4^2").param_digests
    assert (p2.layer, p2.attribute, dict(p2.values)) == ("l4", "par", {"CNN1": w3, "CNN2": w4})
    assert len(w3) == 2 and w3 != w4  # {W, B}

    # φ^1 of Section 5.7.2.
    phi1 = [(step.layer_id, step.values) for step in moc.steps["CNN1"]]
    assert phi1 == [("l1", ()), ("l2", (("p1", ("e3",)),)), ("l4", (("p2", w3), ("p3", ("e3",)))),
                    ("l5", ()), ("l6", ())]
    assert [c.layer for c in moc.control_edges] == [f"l{i}" for i in range(1, 7)]


def test_table_5_1_text(models: dict[str, CnnModel]) -> None:
    moc = derive_moc(models, ["par", "I", "O"])
    text = format_capture_table(moc)
    assert "rows are scenarios" in text
    assert "O=p1={e3}" in text and "I=p3={e4}" in text
    assert "partial (par,I vary)" in text and "partial (O vary)" in text
    assert "Control parameters: 3" in text
    assert "φ^CNN1 (5 steps) = (l1, ∅) (l2, {p1={e3}}) (l4, {p2=" in text
    table = capture_table(moc)
    assert table["rows"]["CNN1"]["l3"] is None and table["rows"]["CNN1"]["e2"] is None
    assert table["rows"]["CNN2"]["l4"]["component"] == "l4^2"
    assert [c["attribute"] for c in table["rows"]["CNN2"]["l4"]["control"]] == ["par", "I"]
    summary = moc_summary(moc)
    assert summary["supergraph_layers"] == 6 and summary["supergraph_edges"] == 6
    assert summary["control_parameters"] == 3
    json.dumps(summary)


def test_without_par_the_weights_keep_layers_apart(models: dict[str, CnnModel]) -> None:
    """A = {I, O}: l3^1 and l4^2 differ in weights, so they are not merged (the thesis' second setting)."""
    moc = derive_moc(models, ["I", "O"])
    assert_round_trip(moc, models)
    assert moc.layer_capture["CNN1"]["l3^1"] != moc.layer_capture["CNN2"]["l4^2"]
    assert all(param.attribute != "par" for param in moc.params)
    # The prefix (input, l2) is still fully shared, and so is its input edge.
    assert moc.layer_capture["CNN1"]["l2^1"] == moc.layer_capture["CNN2"]["l2^2"]
    assert moc.edge_capture["CNN1"]["input:input->l2^1:input"] == moc.edge_capture["CNN2"]["input:input->l2^2:input"]
