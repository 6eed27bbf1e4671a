"""The supergraph as files graph viewers open: an ONNX graph for Netron, and the MoC as JSON.

The ONNX file is a picture of the supergraph, not a model to run: one node per supergraph layer with its
operator (so Netron draws and colours it as it draws any CNN), its data edges named after the supergraph edges
(``e12``), and no weights (a drone app's would be tens of MB for a diagram). What Netron cannot know from an
operator is written on each node: the scenarios that run it, its reuse kind and its control parameters (as
string attributes and the node's documentation), so clicking a node answers "who shares this layer".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from sbrs.model.cnn import INPUT_OP, OUTPUT_OP

if TYPE_CHECKING:
    from sbrs.moc.model import Moc

#: The opset the export declares (Netron reads the operator's documentation of this version).
OPSET = 17


def supergraph_onnx(moc: Moc, app_name: str, path: Path) -> Path:
    """Write the supergraph as an ONNX graph (module docstring); the pseudo-layers Input and Output become the
    graph's inputs and outputs."""
    import numpy as np
    import onnx
    from onnx import helper

    edges = {edge.id: edge for edge in moc.edges}

    def value_info(edge_id: str) -> onnx.ValueInfoProto:
        edge = edges[edge_id]
        dtype = helper.np_dtype_to_tensor_dtype(np.dtype(edge.spec.dtype))
        return helper.make_tensor_value_info(edge_id, dtype, list(edge.spec.shape))

    nodes, inputs, outputs = [], [], []
    for layer in moc.layers:
        if layer.op == INPUT_OP:
            inputs.extend(value_info(e) for e in layer.outputs[:1])
            if len(layer.outputs) > 1:  # an input read by several layers: one graph input, copies for the rest
                nodes.extend(helper.make_node("Identity", [layer.outputs[0]], [e], name=f"{layer.id}_{e}")
                             for e in layer.outputs[1:])
            continue
        if layer.op == OUTPUT_OP:
            outputs.extend(value_info(e) for e in layer.inputs)
            continue
        control = ", ".join(f"{attribute}={pid}" for attribute, pid in layer.control.items()) or "none"
        doc = (f"supergraph layer {layer.id}: run by {', '.join(layer.scenarios)}; reuse {layer.reuse}; "
               f"control parameters {control}")
        nodes.append(helper.make_node(
            layer.op, list(layer.inputs), list(layer.outputs), name=layer.id, doc_string=doc,
            sbrs_scenarios=", ".join(layer.scenarios), sbrs_reuse=layer.reuse, sbrs_control=control))
    graph = helper.make_graph(nodes, f"{app_name} supergraph", inputs, outputs,
                              doc_string=f"sbrs supergraph of app {app_name}: scenarios {', '.join(moc.scenarios)}"
                                         " (a diagram: no weights)")
    model = helper.make_model(graph, producer_name="sbrs report", opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.save_model(model, str(path))
    return path


def supergraph_json(moc: Moc, path: Path) -> Path:
    """The MoC (supergraph, control node, control edges) as JSON: ``Moc.to_dict``, for scripts and viewers."""
    path.write_text(json.dumps(moc.to_dict(), indent=1) + "\n", encoding="utf-8")
    return path
