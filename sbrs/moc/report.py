"""Inspection of a derived MoC: the capture table of thesis Table 5.1 (Section 5.7.1), control parameters and φ^s.

``capture_table`` gives Table 5.1 as a JSON-ready dict; ``format_capture_table`` prints it for people (rows:
scenarios, columns: supergraph layers then edges, each scenario as a "component" row and a "control par." row,
then the "reuse" row). With more than ``MAX_COLUMNS`` components the table is printed transposed, one row per
component, and the header says so. ``moc_summary`` is the JSON ``sbrs inspect --json`` can print.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from sbrs.moc.model import Moc, Step, Value

#: Above this many supergraph components the text table is transposed (one row per component).
MAX_COLUMNS = 12
#: Characters of a parameter digest shown in text (JSON keeps whole digests).
DIGEST_CHARS = 8


def _captured(moc: Moc) -> dict[str, dict[str, str]]:
    """Per scenario: supergraph component id → name of the scenario component it captures."""
    table: dict[str, dict[str, str]] = {}
    for scenario in moc.scenarios:
        row = {layer_id: name for name, layer_id in moc.layer_capture[scenario].items()}
        row.update({edge_id: name for name, edge_id in moc.edge_capture[scenario].items()})
        table[scenario] = row
    return table


def capture_table(moc: Moc) -> dict[str, Any]:
    """Thesis Table 5.1 as data.

    ``columns``: supergraph layers then edges. ``rows[scenario][component]``: ``None`` when the scenario does
    not use the component, else ``{"component": captured name, "control": [{"param", "attribute",
    "value"}...]}``. ``reuse[component]``: ``{"kind": full|partial|none, "varies": [attributes set by
    control parameters]}``.
    """
    captured = _captured(moc)
    params = {param.id: param for param in moc.params}
    columns = [{"id": layer.id, "kind": "layer", "op": layer.op if layer.qdq is None else f"{layer.op} (QDQ)"}
               for layer in moc.layers]  # a quantized layer is its op inside Q/DQ nodes (Layer.qdq)
    columns += [{"id": edge.id, "kind": "edge", "src": edge.src, "dst": edge.dst} for edge in moc.edges]
    rows: dict[str, dict[str, Any]] = {}
    for scenario in moc.scenarios:
        row: dict[str, Any] = {}
        for layer in moc.layers:
            name = captured[scenario].get(layer.id)
            row[layer.id] = None if name is None else {"component": name, "control": [
                {"param": pid, "attribute": attribute, "value": list(params[pid].values[scenario])}
                for attribute, pid in layer.control.items()]}
        for edge in moc.edges:
            name = captured[scenario].get(edge.id)
            row[edge.id] = None if name is None else {"component": name, "control": []}
        rows[scenario] = row
    reuse = {layer.id: {"kind": layer.reuse, "varies": list(layer.control)} for layer in moc.layers}
    reuse.update({edge.id: {"kind": edge.reuse, "varies": []} for edge in moc.edges})
    return {"scenarios": list(moc.scenarios), "columns": columns, "rows": rows, "reuse": reuse}


def format_value(attribute: str, value: Value) -> str:
    """A control-parameter value as text: ``{e3}`` for edges, ``{1a2b3c4d,...}`` for parameter digests."""
    items = [v[:DIGEST_CHARS] for v in value] if attribute == "par" else list(value)
    return "{" + ",".join(items) + "}"


def format_step(moc: Moc, step: Step) -> str:
    """φ^s_i = (l_n, P) as text, e.g. ``(l4, {p2={1a2b3c4d}, p3={e3}})`` or ``(l1, ∅)``."""
    if not step.values:
        return f"({step.layer_id}, ∅)"
    params = {param.id: param for param in moc.params}
    pairs = ", ".join(f"{pid}={format_value(params[pid].attribute, value)}" for pid, value in step.values)
    return f"({step.layer_id}, {{{pairs}}})"


def _control_cell(moc: Moc, layer_id: str, scenario: str) -> str:
    layer = moc.layer(layer_id)
    params = {param.id: param for param in moc.params}
    if scenario not in layer.scenarios or not layer.control:
        return "-"
    return "; ".join(f"{attribute}={pid}={format_value(attribute, params[pid].values[scenario])}"
                     for attribute, pid in layer.control.items())


def _reuse_cell(kind: str, varies: Sequence[str]) -> str:
    return f"partial ({','.join(varies)} vary)" if kind == "partial" else kind


def _render(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    return lines


def format_capture_table(moc: Moc) -> str:
    """Thesis Table 5.1 as text, then the control parameters and every execution sequence φ^s."""
    table = capture_table(moc)
    captured = _captured(moc)
    ids = [column["id"] for column in table["columns"]]
    reuse = [_reuse_cell(table["reuse"][i]["kind"], table["reuse"][i]["varies"]) for i in ids]
    layer_ids = {layer.id for layer in moc.layers}
    header = (f"SBRS MoC: {len(moc.scenarios)} scenarios, A = {{{', '.join(moc.adaptive)}}}, "
              f"{len(moc.layers)} supergraph layers, {len(moc.edges)} supergraph edges, "
              f"{len(moc.params)} control parameters")
    if len(ids) <= MAX_COLUMNS:
        title = "Capture table (thesis Table 5.1): rows are scenarios, columns supergraph components"
        rows = [["scenario", "", *ids]]
        for scenario in moc.scenarios:
            rows.append([scenario, "component", *(captured[scenario].get(i, "-") for i in ids)])
            rows.append(["", "control par.", *(_control_cell(moc, i, scenario) if i in layer_ids else "-"
                                               for i in ids)])
        rows.append(["", "reuse", *reuse])
    else:
        title = (f"Capture table (thesis Table 5.1), transposed ({len(ids)} components > {MAX_COLUMNS}): "
                 "one row per supergraph component, one column per scenario")
        rows = [["component", "op / edge", *moc.scenarios, "reuse"]]
        for column, reuse_cell in zip(table["columns"], reuse, strict=True):
            i = column["id"]
            what = column["op"] if column["kind"] == "layer" else f"{column['src']}->{column['dst']}"
            cells = []
            for scenario in moc.scenarios:
                name = captured[scenario].get(i, "-")
                control = _control_cell(moc, i, scenario) if i in layer_ids else "-"
                cells.append(name if control == "-" else f"{name} [{control}]")
            rows.append([i, what, *cells, reuse_cell])
    lines = [header, "", title, *_render(rows), "", f"Control parameters: {len(moc.params)}"]
    for param in moc.params:
        values = ", ".join(f"{s}: {format_value(param.attribute, v)}" for s, v in param.values.items())
        lines.append(f"  {param.id} = {param.attribute} of {param.layer}: {values}")
    lines.append("")
    for scenario in moc.scenarios:
        steps = " ".join(format_step(moc, step) for step in moc.steps[scenario])
        lines.extend(textwrap.wrap(f"φ^{scenario} ({len(moc.steps[scenario])} steps) = {steps}", width=120,
                                   subsequent_indent="    ", break_long_words=False, break_on_hyphens=False))
    return "\n".join(lines)


def moc_summary(moc: Moc) -> dict[str, Any]:
    """The JSON summary of a MoC: counts, reuse, capture table, control parameters and steps per scenario."""

    def count(kinds: Sequence[str]) -> dict[str, int]:
        return {kind: sum(1 for k in kinds if k == kind) for kind in ("full", "partial", "none")}

    return {
        "scenarios": list(moc.scenarios),
        "adaptive": list(moc.adaptive),
        "supergraph_layers": len(moc.layers),
        "supergraph_edges": len(moc.edges),
        "control_parameters": len(moc.params),
        "scenario_layers": {s: len(moc.steps[s]) for s in moc.scenarios},
        "scenario_edges": {s: len(moc.edge_capture[s]) for s in moc.scenarios},
        "reuse": {"layers": count([layer.reuse for layer in moc.layers]),
                  "edges": count([edge.reuse for edge in moc.edges])},
        "params": [param.to_dict() for param in moc.params],
        "capture": capture_table(moc),
        "steps": {s: [step.to_dict() for step in moc.steps[s]] for s in moc.scenarios},
    }
