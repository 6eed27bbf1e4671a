"""Invariant 2 of DESIGN.md ("Capture") for a derived MoC: checks and the scenario round trip.

- ``check_capture``: every layer and edge of every scenario is captured by exactly one supergraph component,
  consistently with the supergraph's endpoints, and no supergraph layer captures two layers of one scenario
  (thesis Section 5.7.1, the scenarios supergraph, and its Table 5.1).
- ``check_control``: the control node is consistent: each step φ^s_i sets exactly the control parameters of
  its layer, with the values that make the supergraph layer equal to l_i^s (Alg. 5, lines 24-39).
- ``rebuild_scenario``: scenario s rebuilt from φ^s and its control-parameter values alone (plus each step's
  tensor names), as a ``CnnModel``; ``model_differences`` compares it with the original; ``assert_round_trip``
  does all of the above for every scenario.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np

from sbrs.moc.derive import freeze, output_positions, param_operands
from sbrs.moc.model import Moc, Step, SuperLayer, Value
from sbrs.model.cnn import INPUT_OP, OUTPUT_OP, CnnModel, Edge, Layer, ParamRef, TensorSpec, WeightStore

_FIELD_OF_ATTRIBUTE = {"par": "par", "I": "inputs", "O": "outputs"}


def resolved_value(layer: SuperLayer, step: Step, attribute: str) -> Value:
    """The value attribute par, I or O of supergraph layer ``layer`` takes at ``step``.

    A control parameter's value from the step where the layer has one for the attribute (Alg. 5, line 29),
    else the layer's own (representative) value.
    """
    param_id = layer.control.get(attribute)
    if param_id is None:
        return tuple(getattr(layer, _FIELD_OF_ATTRIBUTE[attribute]))
    value = step.value(param_id)
    if value is None:
        raise ValueError(f"step of '{step.scenario_layer}' sets no value for {param_id} ({attribute} of {layer.id})")
    return value


def rebuild_scenario(moc: Moc, scenario: str, weights: Mapping[str, np.ndarray] | None = None) -> CnnModel:
    """Scenario ``scenario`` rebuilt from its execution sequence φ^s and control-parameter values.

    Each step contributes one layer: the supergraph layer's attributes, its par and I resolved for the step
    (``resolved_value``), the scenario's layer name and output tensor names recorded in the step. Data
    operands are found through the I edges: edge ``e`` names output ``e.src_output`` of the step that ran
    ``e.src``. Parameters are named ``param_<digest>``; ``weights`` (digest → array), when given, fills the
    rebuilt model's weight store. Raises ``KeyError``/``ValueError`` if the MoC is inconsistent.
    """
    layers_by_id = {layer.id: layer for layer in moc.layers}
    edges_by_id = {edge.id: edge for edge in moc.edges}
    steps = moc.steps[scenario]
    step_of_layer = {step.layer_id: step for step in steps}

    layers: list[Layer] = []
    tensors: dict[str, TensorSpec] = {}
    graph_inputs: list[str] = []
    graph_outputs: list[str] = []
    opsets: dict[str, int] = {}
    digests: set[str] = set()
    for step in steps:
        sl = layers_by_id[step.layer_id]
        data_operands = []
        for edge_id in resolved_value(sl, step, "I"):
            edge = edges_by_id[edge_id]
            data_operands.append(step_of_layer[edge.src].outputs[edge.src_output])
        parameters = list(zip(resolved_value(sl, step, "par"), sl.param_specs, strict=True))
        operands, params = _operands(sl, data_operands, parameters)
        digests.update(p.digest for p in params)
        outputs = tuple(step.outputs)
        if tuple("data" if o else "" for o in outputs) != sl.output_kinds:
            raise ValueError(f"step of '{step.scenario_layer}': outputs {outputs} do not fit {sl.id}")
        input_specs, output_specs = moc.step_specs(step)
        tensors.update(zip((o for o in outputs if o), output_specs, strict=True))
        if sl.op == INPUT_OP:
            graph_inputs.extend(o for o in outputs if o)
        elif sl.op == OUTPUT_OP:
            graph_outputs.extend(data_operands)
        else:
            opsets[sl.domain] = sl.opset
        layers.append(Layer(
            name=step.scenario_layer, op=sl.op, type=sl.type, operands=operands, outputs=outputs,
            input_shapes=tuple(spec.shape for spec in input_specs),
            output_shapes=tuple(spec.shape for spec in output_specs),
            kernel=sl.kernel, stride=sl.stride, pads=sl.pads, dilation=sl.dilation, groups=sl.groups,
            attributes=dict(sl.attributes), params=tuple(dict.fromkeys(params)), domain=sl.domain, qdq=sl.qdq,
        ))
    store = WeightStore((d, weights[d]) for d in sorted(digests) if weights is not None and d in weights)
    return CnnModel(
        name=scenario, source=f"moc:{scenario}", opset=opsets.get("", 0), layers=tuple(layers),
        edges=_edges(layers, tensors), tensors=tensors, graph_inputs=tuple(graph_inputs),
        graph_outputs=tuple(graph_outputs), opset_imports=opsets, weights=store,
    )


def _operands(sl: SuperLayer, data: list[str],
              parameters: list[tuple[str, TensorSpec]]) -> tuple[tuple[str, ...], list[ParamRef]]:
    """ONNX operands of a rebuilt layer from its operand structure, data tensor names and parameters."""
    if len(data) != sl.operand_kinds.count("data") or len(parameters) != sl.operand_kinds.count("param"):
        raise ValueError(f"{sl.id}: {len(data)} data operands and {len(parameters)} parameters do not fit "
                         f"its operand structure {sl.operand_kinds}")
    data_iter, param_iter = iter(data), iter(parameters)
    operands: list[str] = []
    params: list[ParamRef] = []
    for kind in sl.operand_kinds:
        if kind == "data":
            operands.append(next(data_iter))
        elif kind == "param":
            digest, spec = next(param_iter)
            params.append(ParamRef(f"param_{digest}", spec.shape, spec.dtype, digest))
            operands.append(params[-1].name)
        else:
            operands.append("")
    return tuple(operands), params


def _edges(layers: list[Layer], tensors: Mapping[str, TensorSpec]) -> tuple[Edge, ...]:
    """One edge per (producer, consumer, tensor), in consumer order: the same rule as the ONNX import."""
    producer = {tensor: layer.name for layer in layers for tensor in layer.outputs if tensor}
    edges: dict[tuple[str, str, str], Edge] = {}
    for layer in layers:
        for tensor in layer.inputs:
            key = (producer[tensor], layer.name, tensor)
            edges.setdefault(key, Edge(key[0], key[1], tensor, tensors[tensor]))
    return tuple(edges.values())


def _canonical_layer(layer: Layer, producers: Mapping[str, tuple[str, int]]) -> dict[str, Any]:
    """Everything a layer computes with, parameter names left out (parameters are compared by content)."""
    params = {p.name: p for p in layer.params}
    operands: list[tuple[Any, ...]] = []
    for operand in layer.operands:
        if not operand:
            operands.append(("absent",))
        elif operand in params:
            p = params[operand]
            operands.append(("param", p.digest, p.shape, p.dtype))
        else:
            operands.append(("data", operand, producers.get(operand)))
    return {
        "name": layer.name, "op": layer.op, "type": layer.type, "domain": layer.domain,
        "attributes": freeze(layer.attributes), "kernel": layer.kernel, "stride": layer.stride,
        "pads": layer.pads, "dilation": layer.dilation, "groups": layer.groups,
        "input_shapes": layer.input_shapes, "output_shapes": layer.output_shapes,
        "outputs": layer.outputs, "operands": tuple(operands),
        "qdq": None if layer.qdq is None else freeze(asdict(layer.qdq)),
    }


def _producers(model: CnnModel) -> dict[str, tuple[str, int]]:
    return {tensor: (name, position) for (name, tensor), position in output_positions(model).items()}


def model_differences(original: CnnModel, rebuilt: CnnModel) -> list[str]:
    """How ``rebuilt`` differs from ``original`` (empty when equal): layers in order with every attribute,
    operands (data by tensor and producer, parameters by digest, shape and dtype), tensors, edges, graph
    inputs and outputs, the opset of every compute layer's domain, and weight arrays present in both stores.
    """
    label = original.name
    problems: list[str] = []
    if len(original.layers) != len(rebuilt.layers):
        problems.append(f"{label}: {len(original.layers)} layers, rebuilt {len(rebuilt.layers)}")
    original_producers, rebuilt_producers = _producers(original), _producers(rebuilt)
    for index, (a, b) in enumerate(zip(original.layers, rebuilt.layers, strict=False)):
        ca, cb = _canonical_layer(a, original_producers), _canonical_layer(b, rebuilt_producers)
        for key in ca:
            if ca[key] != cb[key]:
                problems.append(f"{label}: layer {index} '{a.name}': {key} {ca[key]!r} != rebuilt {cb[key]!r}")
        if a.type != "data":
            version_a = original.opset_imports.get(a.domain, original.opset)
            version_b = rebuilt.opset_imports.get(b.domain, rebuilt.opset)
            if version_a != version_b:
                problems.append(f"{label}: layer '{a.name}': opset {version_a} != rebuilt {version_b}")
    if dict(original.tensors) != dict(rebuilt.tensors):
        problems.append(f"{label}: tensors differ: {_dict_diff(original.tensors, rebuilt.tensors)}")
    if set(original.edges) != set(rebuilt.edges):
        missing = sorted(e.name for e in set(original.edges) - set(rebuilt.edges))
        extra = sorted(e.name for e in set(rebuilt.edges) - set(original.edges))
        problems.append(f"{label}: edges differ: missing {missing[:5]}, extra {extra[:5]}")
    if original.graph_inputs != rebuilt.graph_inputs or original.graph_outputs != rebuilt.graph_outputs:
        problems.append(f"{label}: graph inputs/outputs {original.graph_inputs}/{original.graph_outputs} != "
                        f"rebuilt {rebuilt.graph_inputs}/{rebuilt.graph_outputs}")
    for digest in set(original.weights) & set(rebuilt.weights):
        if not np.array_equal(original.weights[digest], rebuilt.weights[digest]):
            problems.append(f"{label}: weight {digest} differs")
    return problems


def _dict_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return ", ".join(f"{k}: {a.get(k)} vs {b.get(k)}" for k in keys[:5])


def check_capture(moc: Moc, models: Mapping[str, CnnModel]) -> list[str]:
    """Invariant 2 (capture part): the problems found, empty when the capture tables are sound.

    Every layer and edge of every scenario is captured by exactly one supergraph layer/edge that exists; no
    supergraph component captures two components of one scenario; every supergraph edge joins the layers
    capturing its scenario edges' endpoints, from the right output position and with the same tensor spec;
    the ``scenarios``/``users`` lists match the tables; every supergraph component captures something.
    """
    problems: list[str] = []
    if tuple(moc.scenarios) != tuple(models):
        problems.append(f"scenarios {list(moc.scenarios)} != models {list(models)}")
    layers_by_id = {layer.id: layer for layer in moc.layers}
    edges_by_id = {edge.id: edge for edge in moc.edges}
    layer_users: dict[str, list[str]] = {layer_id: [] for layer_id in layers_by_id}
    edge_users: dict[str, list[str]] = {edge_id: [] for edge_id in edges_by_id}
    for scenario, model in models.items():
        table = moc.layer_capture.get(scenario, {})
        names = [layer.name for layer in model.layers]
        if sorted(table) != sorted(names):
            problems.append(f"{scenario}: captured layers {sorted(set(table) ^ set(names))} differ from the model's")
        for name in names:
            layer_id = table.get(name)
            if layer_id not in layers_by_id:
                problems.append(f"{scenario}: layer '{name}' captured by unknown supergraph layer {layer_id}")
            else:
                layer_users[layer_id].append(scenario)
        seen: dict[str, str] = {}
        for name, layer_id in table.items():
            if layer_id in seen:
                problems.append(f"{scenario}: supergraph layer {layer_id} captures both '{seen[layer_id]}' and "
                                f"'{name}'")
            seen[layer_id] = name

        edge_table = moc.edge_capture.get(scenario, {})
        if sorted(edge_table) != sorted(e.name for e in model.edges):
            problems.append(f"{scenario}: captured edges differ from the model's edges")
        positions = output_positions(model)
        seen_edges: dict[str, str] = {}
        for edge in model.edges:
            edge_id = edge_table.get(edge.name)
            sup = edges_by_id.get(edge_id or "")
            if sup is None:
                problems.append(f"{scenario}: edge '{edge.name}' captured by unknown supergraph edge {edge_id}")
                continue
            edge_users[sup.id].append(scenario)
            if sup.id in seen_edges:
                problems.append(f"{scenario}: supergraph edge {sup.id} captures both '{seen_edges[sup.id]}' and "
                                f"'{edge.name}'")
            seen_edges[sup.id] = edge.name
            expected = (table.get(edge.src), positions[(edge.src, edge.tensor)], table.get(edge.dst), edge.spec)
            if (sup.src, sup.src_output, sup.dst, sup.spec) != expected:
                problems.append(f"{scenario}: edge '{edge.name}' captured by {sup.id} = {sup.src}[{sup.src_output}]"
                                f"->{sup.dst} {sup.spec}, expected {expected}")
    for layer_id, users in layer_users.items():
        if tuple(users) != layers_by_id[layer_id].scenarios:
            problems.append(f"{layer_id}: scenarios {layers_by_id[layer_id].scenarios} but captured by {users}")
    for edge_id, users in edge_users.items():
        if tuple(users) != edges_by_id[edge_id].users:
            problems.append(f"{edge_id}: users {edges_by_id[edge_id].users} but captured by {users}")
    return problems


def check_control(moc: Moc, models: Mapping[str, CnnModel]) -> list[str]:
    """Invariant 2 (control part): the problems found in the control node, empty when sound.

    φ^s lists the scenario's layers once each, in the model's order, each with the supergraph layer capturing
    it; each step sets exactly its layer's control parameters, to the parameter's value for the scenario;
    with those values the layer's par equals the scenario layer's parameter digests, its I the captures of
    the layer's input edges (operand order) and its O the captures of its output edges (Alg. 5, lines 29-38).
    Control parameters only cover attributes in A, and every supergraph layer has one control edge.
    """
    problems: list[str] = []
    layers_by_id = {layer.id: layer for layer in moc.layers}
    params_by_id = {param.id: param for param in moc.params}
    for param in moc.params:
        if param.attribute not in moc.adaptive:
            problems.append(f"{param.id}: attribute {param.attribute} is not adaptive (A = {list(moc.adaptive)})")
        if layers_by_id.get(param.layer) is None or layers_by_id[param.layer].control.get(param.attribute) != param.id:
            problems.append(f"{param.id}: not the {param.attribute} parameter of {param.layer}")
    for scenario, model in models.items():
        steps = moc.steps.get(scenario, ())
        if [s.scenario_layer for s in steps] != [layer.name for layer in model.layers]:
            problems.append(f"{scenario}: steps do not list the scenario's layers in order")
            continue
        edge_table = moc.edge_capture.get(scenario, {})
        producer = {tensor: name for (name, tensor) in output_positions(model)}
        by_name = {layer.name: layer for layer in model.layers}
        for step in steps:
            layer = by_name[step.scenario_layer]
            sl = layers_by_id.get(step.layer_id)
            if sl is None or moc.layer_capture.get(scenario, {}).get(layer.name) != step.layer_id:
                problems.append(f"{scenario}: step of '{layer.name}' runs {step.layer_id}, not its capturing layer")
                continue
            if {p for p, _ in step.values} != set(sl.control.values()) or len(step.values) != len(sl.control):
                problems.append(f"{scenario}: step of '{layer.name}' sets {[p for p, _ in step.values]}, "
                                f"{sl.id} has {list(sl.control.values())}")
                continue
            for param_id, value in step.values:
                if params_by_id[param_id].values.get(scenario) != value:
                    problems.append(f"{scenario}: step of '{layer.name}': {param_id} = {value}, parameter says "
                                    f"{params_by_id[param_id].values.get(scenario)}")
            expected = {
                "par": tuple(p.digest for p in param_operands(layer)),
                "I": tuple(edge_table.get(f"{producer[t]}->{layer.name}:{t}", "?") for t in layer.inputs),
                "O": tuple(sorted({edge_table[e.name] for e in model.edges if e.src == layer.name},
                                  key=lambda e: int(e[1:]))),
            }
            for attribute, wanted in expected.items():
                got = resolved_value(sl, step, attribute)
                if got != wanted:
                    problems.append(f"{scenario}: step of '{layer.name}': {attribute} of {sl.id} is {got}, "
                                    f"the scenario layer has {wanted}")
    if [edge.layer for edge in moc.control_edges] != [layer.id for layer in moc.layers]:
        problems.append("control edges do not join the control node to every supergraph layer once")
    return problems


def round_trip_differences(moc: Moc, models: Mapping[str, CnnModel]) -> list[str]:
    """All of invariant 2: ``check_capture``, ``check_control`` and every scenario rebuilt equal to its model."""
    problems = check_capture(moc, models) + check_control(moc, models)
    weights: dict[str, np.ndarray] = {}
    for model in models.values():
        weights.update(model.weights.items())
    for scenario, model in models.items():
        try:
            rebuilt = rebuild_scenario(moc, scenario, weights)
        except (KeyError, ValueError, IndexError) as exc:
            problems.append(f"{scenario}: cannot rebuild: {type(exc).__name__}: {exc}")
            continue
        problems.extend(model_differences(model, rebuilt))
    return problems


def assert_round_trip(moc: Moc, models: Mapping[str, CnnModel]) -> None:
    """Raise ``AssertionError`` listing every problem ``round_trip_differences`` finds."""
    problems = round_trip_differences(moc, models)
    if problems:
        raise AssertionError(f"{len(problems)} problem(s):\n" + "\n".join(problems[:40]))
