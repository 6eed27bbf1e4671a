"""The inspection output (Table 5.1 form, summary JSON) and the invariant checkers catching broken MoCs."""

from __future__ import annotations

import dataclasses
import json

from sbrs.moc import (
    Moc,
    Step,
    capture_table,
    check_capture,
    check_control,
    derive_moc,
    format_capture_table,
    moc_summary,
    round_trip_differences,
)
from sbrs.moc.report import MAX_COLUMNS
from sbrs.model import CnnModel, import_model
from tests.moc.cnn_helpers import GraphBuilder, program_model


def two_scenarios() -> dict[str, CnnModel]:
    return {"a": program_model([("conv", "k1", 3), ("relu",)]), "b": program_model([("conv", "k2", 3), ("relu",)])}


def one_conv(key: str) -> CnnModel:
    g = GraphBuilder()
    x = g.node("Relu", [g.conv("input", key, 3, 4, 3, "conv")], "relu")
    return import_model(g.model([("input", (1, 3, 8, 8))], [x]), name=key)


def test_small_table_has_scenario_rows_and_a_reuse_row() -> None:
    models = {"a": one_conv("k1"), "b": one_conv("k2")}
    moc = derive_moc(models, ["I", "O", "par"])
    text = format_capture_table(moc)
    lines = text.splitlines()
    assert lines[0].startswith("SBRS MoC: 2 scenarios, A = {I, O, par}")
    header = next(line for line in lines if line.startswith("scenario"))
    assert [cell.strip() for cell in header.split(" | ")][2:4] == ["l1", "l2"]
    assert any(line.startswith("a ") and "component" in line for line in lines)
    assert any("control par." in line and "par=p1={" in line for line in lines)
    reuse = [[cell.strip() for cell in line.split(" | ")] for line in lines if " | reuse " in line]
    assert reuse == [["", "reuse", "full", "partial (par vary)", "full", "full", "full", "full", "full"]]
    assert "p1 = par of l2:" in text
    assert "φ^a (4 steps) = (l1, ∅) (l2, {p1={" in text


def test_wide_table_is_transposed_and_says_so() -> None:
    models = {"a": program_model([("res", "k1"), ("res", "k2")]), "b": program_model([("res", "k1")])}
    moc = derive_moc(models, ["I", "O", "par"])
    assert len(moc.layers) + len(moc.edges) > MAX_COLUMNS
    text = format_capture_table(moc)
    assert "transposed" in text and "one row per supergraph component" in text
    rows = [line for line in text.splitlines() if line.startswith(("l", "e")) and " | " in line]
    assert len(rows) == len(moc.layers) + len(moc.edges)


def test_summary_json() -> None:
    models = two_scenarios()
    moc = derive_moc(models, ["I", "O"])
    summary = json.loads(json.dumps(moc_summary(moc)))
    assert summary["scenarios"] == ["a", "b"] and summary["adaptive"] == ["I", "O"]
    assert summary["supergraph_layers"] == len(moc.layers) and summary["supergraph_edges"] == len(moc.edges)
    assert summary["control_parameters"] == len(moc.params)
    assert [s["scenario_layer"] for s in summary["steps"]["a"]] == [layer.name for layer in models["a"].layers]
    assert summary["capture"] == json.loads(json.dumps(capture_table(moc)))
    assert sum(summary["reuse"]["layers"].values()) == len(moc.layers)


def _replace_step(moc: Moc, scenario: str, index: int, step: Step) -> Moc:
    steps = dict(moc.steps)
    steps[scenario] = (*steps[scenario][:index], step, *steps[scenario][index + 1:])
    return dataclasses.replace(moc, steps=steps)


def test_checkers_catch_broken_mocs() -> None:
    models = two_scenarios()
    moc = derive_moc(models, ["I", "O", "par"])
    assert round_trip_differences(moc, models) == []

    # A supergraph layer capturing two layers of one scenario.
    table = dict(moc.layer_capture["a"])
    table["b1.relu"] = table["b0.conv"]
    broken = dataclasses.replace(moc, layer_capture={**moc.layer_capture, "a": table})
    assert any("captures both" in p for p in check_capture(broken, models))

    # A step with the other scenario's weights: the rebuilt scenario differs, the control check says why.
    index = next(i for i, s in enumerate(moc.steps["a"]) if s.values)
    step = moc.steps["a"][index]
    wrong = moc.steps["b"][index].values
    broken = _replace_step(moc, "a", index, dataclasses.replace(step, values=wrong))
    assert any("par of" in p for p in check_control(broken, models))
    assert any("operands" in p for p in round_trip_differences(broken, models))

    # A missing edge capture.
    edges = dict(moc.edge_capture["b"])
    edges.pop(next(iter(edges)))
    broken = dataclasses.replace(moc, edge_capture={**moc.edge_capture, "b": edges})
    assert check_capture(broken, models)


def test_a_quantized_layer_is_labelled_as_its_op_inside_qdq_nodes() -> None:
    """A QDQ node unit imports as one layer (``Layer.qdq``); the capture table says it is quantized."""
    import onnx

    from tests.conftest import REPO

    path = REPO / "tests" / "data" / "torchvision" / "quantized" / "shufflenet_v2_x0_5-legacy-64-qdq-per-tensor-u8.onnx"
    model = import_model(onnx.load(str(path)), name="q")
    moc = derive_moc({"q": model}, ["I", "O", "par"])
    ops = {column["op"] for column in capture_table(moc)["columns"] if column["kind"] == "layer"}
    quantized = {layer.op for layer in model.layers if layer.qdq is not None}
    assert "Conv" in quantized and "Conv (QDQ)" in ops
    assert ops >= {f"{op} (QDQ)" for op in quantized}
    assert "Conv (QDQ)" in format_capture_table(moc)
