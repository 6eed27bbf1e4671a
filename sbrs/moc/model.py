"""The SBRS MoC of thesis Section 5.7 as plain frozen values: what Algorithm 5 returns.

``SBRS(L, E, c, E_c)`` (thesis Section 5.7, lines 1272-1312 of the seed text):

- ``L``: supergraph layers (``SuperLayer``, ids ``l1``, ``l2`` ...), each capturing functionally equivalent
  layers of several scenarios (Section 5.7.1);
- ``E``: supergraph edges (``SuperEdge``, ids ``e1`` ...), each capturing equivalent edges (Equation 5.2);
- ``c``: the control node: the control parameters Π (``ControlParam``, ids ``p1`` ...), the execution
  sequence φ^s of every scenario (``Step`` lists) and the capture tables L^capt and E^capt (Section 5.7.2);
- ``E_c``: one control edge from ``c`` to every supergraph layer (``ControlEdge``, Section 5.7.3).

Every value here is immutable in intent (frozen dataclasses; the mappings inside are never mutated after
``derive_moc`` builds them) and serialises to JSON with ``to_dict()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

from sbrs.model.cnn import Qdq, TensorSpec

#: The run-time adaptive layer attributes Algorithm 5 accepts in A (thesis Section 5.8).
ADAPTIVE_ATTRIBUTES: tuple[str, ...] = ("I", "O", "par")

#: Order in which the attributes of one supergraph layer become control parameters. The thesis example
#: (Table 5.1, line 1278) numbers par_4 = p2 before I_4 = p3, so par comes first.
CONTROL_ORDER: tuple[str, ...] = ("par", "I", "O")

#: A control-parameter value: parameter digests (par) or supergraph edge ids (I, O), in order.
Value = tuple[str, ...]


def _spec_dict(spec: TensorSpec) -> dict[str, Any]:
    return {"shape": list(spec.shape), "dtype": spec.dtype}


@dataclass(frozen=True)
class SuperLayer:
    """A supergraph layer l_n ∈ L with the Table 2.1 attributes of the first layer it captured (Alg. 5, line 7).

    ``par``, ``inputs`` (I) and ``outputs`` (O) hold the representative values; where a control parameter
    covers an attribute (``control`` maps the attribute to the parameter id) the value of each step overrides
    them. ``inputs`` lists supergraph edge ids per data operand (ONNX order, repeated when a tensor is read
    twice); ``outputs`` lists the supergraph edges the layer writes, in edge-id order. ``operand_kinds`` is
    the operand structure: per ONNX input position ``"data"``, ``"param"`` or ``""`` (absent optional input);
    ``output_kinds`` the same per output position (``"data"`` or ``""``). ``reuse`` is ``"full"`` (several
    scenarios, no control parameter), ``"partial"`` (several scenarios, some attributes set by control
    parameters) or ``"none"`` (one scenario), as in the reuse row of Table 5.1. ``qdq``: the QDQ node unit
    of a quantized layer (``sbrs.model.cnn.Qdq``); its operands are then the unit's.
    """

    id: str
    op: str
    type: str
    domain: str
    opset: int
    attributes: Mapping[str, Any]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilation: tuple[int, int]
    groups: int
    input_specs: tuple[TensorSpec, ...]
    output_specs: tuple[TensorSpec, ...]
    operand_kinds: tuple[str, ...]
    output_kinds: tuple[str, ...]
    param_specs: tuple[TensorSpec, ...]
    par: Value
    inputs: Value
    outputs: Value
    scenarios: tuple[str, ...]
    control: Mapping[str, str]
    reuse: str
    qdq: Qdq | None = None
    #: whether the scenarios it runs in give it tensors of different sizes (the same layer at several input sizes,
    #: app.yaml ``input_size``): X and Y above are the first scenario's; each step's come from its I and O edges
    sized: bool = False

    def to_dict(self) -> dict[str, Any]:
        quantized = {"qdq": asdict(self.qdq)} if self.qdq is not None else {}
        data = quantized | {
            "id": self.id,
            "type": self.type,
            "op": self.op,
            "domain": self.domain,
            "opset": self.opset,
            "I": list(self.inputs),
            "O": list(self.outputs),
            "X": [_spec_dict(s) for s in self.input_specs],
            "Y": [_spec_dict(s) for s in self.output_specs],
            "kernel": list(self.kernel),
            "stride": list(self.stride),
            "pads": list(self.pads),
            "dilation": list(self.dilation),
            "groups": self.groups,
            "attributes": dict(self.attributes),
            "operand_kinds": list(self.operand_kinds),
            "output_kinds": list(self.output_kinds),
            "param_specs": [_spec_dict(s) for s in self.param_specs],
            "par": list(self.par),
            "scenarios": list(self.scenarios),
            "control": dict(self.control),
            "reuse": self.reuse,
        }
        return data | {"sized": True} if self.sized else data


@dataclass(frozen=True)
class SuperEdge:
    """A supergraph edge e_kn ∈ E: output ``src_output`` of layer ``src`` read by layer ``dst`` (Equation 5.2).

    ``users`` are the scenarios with an edge captured here; ``reuse`` is ``"full"`` when several scenarios
    use it (Table 5.1, reuse row), else ``"none"``.
    """

    id: str
    src: str
    src_output: int
    dst: str
    spec: TensorSpec
    users: tuple[str, ...]
    reuse: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "src": self.src, "src_output": self.src_output, "dst": self.dst,
                "data": _spec_dict(self.spec), "users": list(self.users), "reuse": self.reuse}


@dataclass(frozen=True)
class ControlParam:
    """A control parameter p_q ∈ Π (Alg. 5, lines 16-23): attribute ``attribute`` (par, I or O) of ``layer``.

    ``values`` maps every scenario using the layer to the value the attribute takes in that scenario
    (a supergraph layer captures at most one layer per scenario, so one value each).
    """

    id: str
    layer: str
    attribute: str
    values: Mapping[str, Value]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "layer": self.layer, "attribute": self.attribute,
                "values": {s: list(v) for s, v in self.values.items()}}


@dataclass(frozen=True)
class Step:
    """A computational step φ^s_i = (l_n, P) of an execution sequence (Alg. 5, lines 26-39).

    ``layer_id`` is l_n, ``values`` is P: (control parameter id, value) pairs. ``scenario_layer`` names the
    captured layer l_i^s, and ``outputs`` the scenario's names of the tensors it writes (ONNX output order,
    ``""`` for an absent output): naming only, so a rebuilt scenario keeps its own tensor names.
    """

    layer_id: str
    values: tuple[tuple[str, Value], ...]
    scenario_layer: str
    outputs: tuple[str, ...] = ()

    def value(self, param_id: str) -> Value | None:
        for key, value in self.values:
            if key == param_id:
                return value
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layer_id, "values": {p: list(v) for p, v in self.values},
                "scenario_layer": self.scenario_layer, "outputs": list(self.outputs)}


@dataclass(frozen=True)
class ControlEdge:
    """A control edge e_cn ∈ E_c from control node c to supergraph layer ``layer`` (Alg. 5, lines 41-44).

    ``params`` are the control parameters it carries (empty for a fully reused or unshared layer).
    """

    layer: str
    params: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"c->{self.layer}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "src": "c", "dst": self.layer, "params": list(self.params)}


@dataclass(frozen=True)
class Moc:
    """SBRS(L, E, c, E_c): the scenarios supergraph, the control node's contents and the control edges.

    ``layer_capture[s]`` maps each layer name of scenario s to the supergraph layer capturing it (L^capt);
    ``edge_capture[s]`` maps each edge name (``Edge.name``) of s to its supergraph edge (E^capt);
    ``steps[s]`` is φ^s in the scenario's execution order.
    """

    scenarios: tuple[str, ...]
    adaptive: tuple[str, ...]
    layers: tuple[SuperLayer, ...]
    edges: tuple[SuperEdge, ...]
    params: tuple[ControlParam, ...]
    steps: Mapping[str, tuple[Step, ...]]
    layer_capture: Mapping[str, Mapping[str, str]]
    edge_capture: Mapping[str, Mapping[str, str]]
    control_edges: tuple[ControlEdge, ...]

    @cached_property
    def _layer_by_id(self) -> Mapping[str, SuperLayer]:  # the layout asks for a layer per step of every scenario
        return {layer.id: layer for layer in self.layers}

    @cached_property
    def _edge_by_id(self) -> Mapping[str, SuperEdge]:
        return {edge.id: edge for edge in self.edges}

    def layer(self, layer_id: str) -> SuperLayer:
        return self._layer_by_id[layer_id]

    def edge(self, edge_id: str) -> SuperEdge:
        return self._edge_by_id[edge_id]

    def param(self, param_id: str) -> ControlParam:
        for param in self.params:
            if param.id == param_id:
                return param
        raise KeyError(param_id)

    def step_specs(self, step: Step) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
        """X and Y of ``step``: its supergraph layer's, or, for a layer run at several sizes (``sized``), those of
        the edges its I and O control values name (an output no edge reads keeps the layer's own)."""
        layer = self.layer(step.layer_id)
        if not layer.sized:
            return layer.input_specs, layer.output_specs

        def value(attribute: str, default: Value) -> Value:
            param = layer.control.get(attribute)
            found = None if param is None else step.value(param)
            return default if found is None else found

        inputs = tuple(self.edge(edge_id).spec for edge_id in value("I", layer.inputs))
        written = {self.edge(edge_id).src_output: self.edge(edge_id).spec for edge_id in value("O", layer.outputs)}
        positions = [index for index, kind in enumerate(layer.output_kinds) if kind == "data"]
        outputs = tuple(written.get(position, own) for position, own in zip(positions, layer.output_specs, strict=True))
        return inputs, outputs

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenarios": list(self.scenarios),
            "adaptive": list(self.adaptive),
            "layers": [layer.to_dict() for layer in self.layers],
            "edges": [edge.to_dict() for edge in self.edges],
            "control_parameters": [param.to_dict() for param in self.params],
            "control_node": {
                "steps": {s: [step.to_dict() for step in steps] for s, steps in self.steps.items()},
                "layer_capture": {s: dict(table) for s, table in self.layer_capture.items()},
                "edge_capture": {s: dict(table) for s, table in self.edge_capture.items()},
            },
            "control_edges": [edge.to_dict() for edge in self.control_edges],
        }
