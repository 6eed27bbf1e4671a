"""Algorithm 5 of the thesis: automated derivation of the SBRS MoC (Section 5.8).

``derive_moc(models, adaptive, parallel)`` follows the listing of Algorithm 5 (thesis Section 5.8):

1. Lines 2-9: visit the scenarios in the given order and each scenario's layers in topological order; capture
   every layer l_i^s by an existing supergraph layer l_n when ``eq(l_i^s, l_n, A)`` (Equation 5.1) holds and
   l_n captures no layer run in parallel with l_i^s, else by a new supergraph layer.
2. Lines 10-15: capture every edge by the supergraph edge between the capturing layers (Equation 5.2).
3. Lines 16-23: give a shared supergraph layer one control parameter per adaptive attribute on which the
   layers it captures differ.
4. Lines 24-44: the control node (each scenario's execution sequence φ^s, the capture tables) and one
   control edge per supergraph layer.

What the listing leaves open, decided here (and tested in ``tests/moc``):

- Equation 5.1 compares all of Table 2.1 except the attributes in A: type, op, domain and opset version,
  X and Y (shapes and dtypes), kernel, stride, pads, dilation, groups, every ONNX attribute, the QDQ node unit
  of a quantized layer (``Layer.qdq``: which operands are dequantized, with which attributes), the operand
  structure (which ONNX input positions are data, parameters or absent, and the parameters' shapes and
  dtypes) and, unless adaptive, par, I and O.
- With both I and O in A, X and Y are compared without their spatial sizes (every dimension after N and C):
  the size of a tensor is the edge's, and the edges are what I and O set. So the same layer at several input
  sizes (app.yaml ``input_size``) is one supergraph layer (``SuperLayer.sized``), provided its weights are
  the same (equal par; a layer of other weights at another size stays apart even with par in A). Edges are
  captured per tensor size (below), so such a layer always has I and O control parameters, and each step's X
  and Y are those of its edges (``Moc.step_specs``).
- ``par`` is compared by value: the content digests of the parameter operands in ONNX operand order. Equal
  shapes never make two parameters equal.
- I is compared structurally, since layers of different scenarios have no common edge names: two layers have
  equal I when, operand by operand, they read the same output position of layers captured by the same
  supergraph layer (so their input edges are captured by the same supergraph edges). Producers come earlier
  in topological order, so this is known when the layer is visited.
- O is compared the same way on the consumer side: equal O means the output edges are captured by the same
  supergraph edges. Consumers are not captured yet when a layer is visited, so with O ∉ A the derivation runs
  to a fixpoint: after a pass, every pair of layers captured together whose O differ is forbidden to share a
  supergraph layer, and the pass is repeated (each round forbids at least one new pair, so it terminates).
  A consequence worth knowing: with O ∉ A a layer is shared only when its consumers are shared too, so
  sharing spreads backwards from the graph outputs; two scenarios that diverge after a common prefix share
  that prefix only when O ∈ A (the thesis' evaluated settings, A = {I, O, par} and {I, O}, both have O).
- A supergraph layer captures at most one layer of each scenario (invariant 2 of DESIGN.md): two identical
  layers of one scenario never merge. This also makes the thesis' parallel-execution test of line 4 hold
  for every annotation; it is still checked as written.
- ``parallel[s]`` lists the pipeline partitions of scenario s as sets of layer names: layers in different
  sets run concurrently (each partition on its own processor, Section 2.2), layers in one set one after
  another. Layers not listed run sequentially.
- Tie-break when several supergraph layers qualify: the one already holding the most of this layer's input
  edges (edge reuse: fewer supergraph edges, fewer buffers), then the one whose representative has the same
  I (no I control parameter), then the same par (no par control parameter), then the earliest created.
  Parameter memory is the same either way: parameters are stored once per digest whatever the capture.
- Ids are given after capture, in a topological order of the supergraph (Kahn's algorithm, ties and cycles
  broken by creation order): layers ``l1``.., edges ``e1``.. by (source, destination, output position),
  control parameters ``p1``.. by layer and then par, I, O. On the thesis example this reproduces Table 5.1's
  numbering exactly (see ``tests/moc/test_moc_thesis_example.py``).
- Data layers (ops ``Input`` and ``Output``) are layers like any other, as in the thesis' figures.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from sbrs.errors import InputError
from sbrs.moc.model import (
    ADAPTIVE_ATTRIBUTES,
    CONTROL_ORDER,
    ControlEdge,
    ControlParam,
    Moc,
    Step,
    SuperEdge,
    SuperLayer,
    Value,
)
from sbrs.model.cnn import CnnModel, Layer, ParamRef, TensorSpec

#: A scenario layer as (scenario name, layer name).
LayerKey = tuple[str, str]
#: An input/output of a layer relative to the supergraph under construction: (group index, output position).
_Port = tuple[int, int]
#: A supergraph edge while being built: (source group, source output position, destination group, data): two
#: scenarios' edges between the same layers are one supergraph edge only when their tensors are alike (a layer
#: shared at two input sizes reads and writes tensors of two sizes: two edges, set by its I/O control parameters).
_EdgeKey = tuple[int, int, int, TensorSpec]


def freeze(value: Any) -> Any:
    """A hashable, type-exact form of an ONNX attribute value (so ``1`` and ``1.0`` differ, NaN equals NaN)."""
    if isinstance(value, Mapping):
        return ("dict", tuple(sorted((str(k), freeze(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(freeze(v) for v in value))
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, (bool, int, str, bytes)) or value is None:
        return (type(value).__name__, value)
    if hasattr(value, "SerializeToString"):  # an ONNX TensorProto or GraphProto attribute
        return (type(value).__name__, value.SerializeToString(deterministic=True))
    return (type(value).__name__, repr(value))


@dataclass(frozen=True)
class _Fixed:
    """The Table 2.1 attributes Equation 5.1 always compares (everything but par, I and O); hashable."""

    type: str
    op: str
    domain: str
    opset: int
    attributes: Any
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
    qdq: Any = None  # the frozen QDQ node unit: which operands are dequantized how, and the output's quantization


@dataclass(frozen=True)
class _View:
    """One scenario layer l_i^s as Algorithm 5 sees it.

    ``par`` holds the parameter digests per parameter operand (ONNX order); ``sources`` holds, per data
    operand, the producing layer's name and output position within the scenario.
    """

    scenario: str
    layer: Layer
    fixed: _Fixed
    par: Value
    sources: tuple[tuple[str, int], ...]
    input_specs: tuple[TensorSpec, ...] = ()  # X and Y as they are (``fixed`` may leave out their sizes)
    output_specs: tuple[TensorSpec, ...] = ()

    @property
    def key(self) -> LayerKey:
        return (self.scenario, self.layer.name)

    @property
    def sizes(self) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
        return (self.input_specs, self.output_specs)


@dataclass
class _Group:
    """A supergraph layer while lines 2-9 build it (working state local to one ``_capture_layers`` call).

    ``founder`` is the first layer captured: it gives the supergraph layer its attributes (line 7).
    ``in_ports`` collects the inputs of every layer captured so far, for the edge-reuse tie-break.
    """

    index: int
    founder: _View
    founder_inputs: tuple[_Port, ...]
    members: dict[str, _View] = field(default_factory=dict)
    in_ports: set[_Port] = field(default_factory=set)


@dataclass(frozen=True)
class _Capture:
    """The outcome of lines 2-9: the groups and, per scenario, layer name → group index (L^capt)."""

    groups: tuple[_Group, ...]
    layer_group: Mapping[str, Mapping[str, int]]


def derive_moc(models: Mapping[str, CnnModel], adaptive: Iterable[str],
               parallel: Mapping[str, Sequence[Set[str]]] | None = None) -> Moc:
    """Algorithm 5: the SBRS MoC capturing ``models`` (scenario name → CNN), reusing per the adaptive set A.

    ``adaptive`` is A ⊆ {"I", "O", "par"}. ``parallel`` optionally annotates each scenario's manner of
    execution with its pipeline partitions (sets of layer names running concurrently with the other sets).
    Raises ``InputError`` on an unknown adaptive attribute, scenario or layer name. See the module docstring
    for how Equation 5.1 is read and how ties are broken.
    """
    adaptive_set = _check_adaptive(adaptive)
    if not models:
        raise InputError("no scenarios to derive a MoC from", field="scenarios")
    sizes_adaptive = {"I", "O"} <= adaptive_set
    views = {name: _layer_views(name, model, sizes_adaptive) for name, model in models.items()}
    partitions = _check_partitions(models, parallel or {})

    forbidden: set[frozenset[LayerKey]] = set()
    while True:  # the fixpoint for O ∉ A; a single pass when O is adaptive
        capture = _capture_layers(views, adaptive_set, partitions, forbidden)
        conflicts = set() if "O" in adaptive_set else _output_conflicts(models, capture)
        if not conflicts:
            break
        forbidden |= conflicts
    return _assemble(models, views, capture, adaptive_set)


def _check_adaptive(adaptive: Iterable[str]) -> frozenset[str]:
    values = tuple(adaptive)
    unknown = [value for value in values if value not in ADAPTIVE_ATTRIBUTES]
    if unknown:
        raise InputError(f"unknown adaptive attribute(s) {unknown}; allowed: {list(ADAPTIVE_ATTRIBUTES)}",
                         field="adaptive")
    return frozenset(values)


def _check_partitions(models: Mapping[str, CnnModel],
                      parallel: Mapping[str, Sequence[Set[str]]]) -> dict[str, dict[str, int]]:
    """Per scenario, layer name → index of its pipeline partition; every name must exist, at most once."""
    partitions: dict[str, dict[str, int]] = {}
    for scenario, sets in parallel.items():
        if scenario not in models:
            raise InputError(f"parallel: unknown scenario '{scenario}'", field="parallel")
        names = {layer.name for layer in models[scenario].layers}
        table: dict[str, int] = {}
        for index, members in enumerate(sets):
            for name in sorted(members):
                if name not in names:
                    raise InputError(f"parallel: scenario '{scenario}' has no layer '{name}'", field="parallel")
                if name in table:
                    raise InputError(f"parallel: layer '{name}' of scenario '{scenario}' is in two partitions",
                                     field="parallel")
                table[name] = index
        partitions[scenario] = table
    return partitions


def param_operands(layer: Layer) -> tuple[ParamRef, ...]:
    """The parameters of a layer per parameter operand, in ONNX operand order (repeated if read twice)."""
    params = {p.name: p for p in layer.params}
    return tuple(params[o] for o in layer.operands if o in params)


def output_positions(model: CnnModel) -> dict[tuple[str, str], int]:
    """(producer layer name, tensor name) → position of the tensor among the producer's ONNX outputs."""
    return {(layer.name, tensor): position for layer in model.layers
            for position, tensor in enumerate(layer.outputs) if tensor}


def _sizeless(spec: TensorSpec) -> TensorSpec:
    """``spec`` without its spatial extent (every dimension after N and C of a tensor of rank 3 or more)."""
    return spec if len(spec.shape) < 3 else TensorSpec((*spec.shape[:2], *(-1 for _ in spec.shape[2:])), spec.dtype)


def _layer_views(scenario: str, model: CnnModel, sizes_adaptive: bool = False) -> list[_View]:
    """The layers of one scenario in topological order, with the attributes Equation 5.1 compares; with
    ``sizes_adaptive`` (I and O both in A) the spatial sizes of X and Y are left to the I/O control parameters."""
    producers: dict[str, tuple[str, int]] = {}
    views: list[_View] = []
    for layer in model.layers:
        params = {p.name: p for p in layer.params}
        missing = [t for t in layer.inputs if t not in producers]
        if missing:
            raise InputError(f"layer '{layer.name}' reads '{missing[0]}' before any layer produces it",
                             file=model.source)
        parameters = param_operands(layer)
        input_specs = tuple(model.tensors[t] for t in layer.inputs)
        output_specs = tuple(model.tensors[o] for o in layer.outputs if o)
        compared = _sizeless if sizes_adaptive else (lambda spec: spec)
        fixed = _Fixed(
            type=layer.type,
            op=layer.op,
            domain=layer.domain,
            opset=0 if layer.type == "data" else model.opset_imports.get(layer.domain, model.opset),
            attributes=freeze(layer.attributes),
            kernel=layer.kernel,
            stride=layer.stride,
            pads=layer.pads,
            dilation=layer.dilation,
            groups=layer.groups,
            input_specs=tuple(compared(spec) for spec in input_specs),
            output_specs=tuple(compared(spec) for spec in output_specs),
            operand_kinds=tuple("" if not o else "param" if o in params else "data" for o in layer.operands),
            output_kinds=tuple("data" if o else "" for o in layer.outputs),
            param_specs=tuple(TensorSpec(p.shape, p.dtype) for p in parameters),
            qdq=None if layer.qdq is None else freeze(asdict(layer.qdq)),
        )
        views.append(_View(scenario, layer, fixed, tuple(p.digest for p in parameters),
                           tuple(producers[t] for t in layer.inputs), input_specs, output_specs))
        for position, tensor in enumerate(layer.outputs):
            if tensor:
                producers[tensor] = (layer.name, position)
    return views


def _capture_layers(views: Mapping[str, list[_View]], adaptive: frozenset[str],
                    partitions: Mapping[str, Mapping[str, int]], forbidden: Set[frozenset[LayerKey]]) -> _Capture:
    """Algorithm 5, lines 2-9: capture every scenario layer by a new or an equivalent supergraph layer."""
    groups: list[_Group] = []
    by_fixed: dict[_Fixed, list[_Group]] = {}
    layer_group: dict[str, dict[str, int]] = {scenario: {} for scenario in views}
    for scenario, scenario_views in views.items():  # line 2
        captured = layer_group[scenario]
        for view in scenario_views:  # line 3
            inputs = tuple((captured[name], position) for name, position in view.sources)
            candidates = [group for group in by_fixed.get(view.fixed, [])  # line 4
                          if _can_capture(group, view, inputs, adaptive, partitions, forbidden)]
            if candidates:
                group = min(candidates, key=lambda g: _preference(g, view, inputs))
            else:  # lines 5-8
                group = _Group(index=len(groups), founder=view, founder_inputs=inputs)
                groups.append(group)
                by_fixed.setdefault(view.fixed, []).append(group)
            group.members[scenario] = view  # line 9
            group.in_ports.update(inputs)
            captured[view.layer.name] = group.index
    return _Capture(tuple(groups), layer_group)


def _can_capture(group: _Group, view: _View, inputs: tuple[_Port, ...], adaptive: frozenset[str],
                 partitions: Mapping[str, Mapping[str, int]], forbidden: Set[frozenset[LayerKey]]) -> bool:
    """Line 4 for a supergraph layer whose fixed attributes already equal the layer's (Equation 5.1)."""
    if view.scenario in group.members:  # at most one layer per scenario (invariant 2)
        return False
    if "par" not in adaptive and view.par != group.founder.par:
        return False
    if any(view.sizes != member.sizes and view.par != member.par for member in group.members.values()):
        return False  # a layer at another size is the same layer only with the same weights: every member's
    if "I" not in adaptive and inputs != group.founder_inputs:
        return False
    # both tests below go over the group's members (one per scenario): asked only where they can fail
    if view.scenario in partitions and any(_run_in_parallel(member, view, partitions)
                                           for member in group.members.values()):
        return False
    return not forbidden or not any(frozenset((member.key, view.key)) in forbidden
                                    for member in group.members.values())


def _run_in_parallel(a: _View, b: _View, partitions: Mapping[str, Mapping[str, int]]) -> bool:
    """Whether the manner of execution runs a and b concurrently: same scenario, different partitions."""
    if a.scenario != b.scenario:
        return False
    table = partitions.get(a.scenario, {})
    return a.layer.name in table and b.layer.name in table and table[a.layer.name] != table[b.layer.name]


def _preference(group: _Group, view: _View, inputs: tuple[_Port, ...]) -> tuple[int, bool, bool, int]:
    """Sort key among qualifying supergraph layers (smallest wins): edge reuse, then no I, no par parameter."""
    reused_edges = sum(1 for port in inputs if port in group.in_ports)
    return (-reused_edges, inputs != group.founder_inputs, view.par != group.founder.par, group.index)


def _output_conflicts(models: Mapping[str, CnnModel], capture: _Capture) -> set[frozenset[LayerKey]]:
    """Pairs of layers captured together whose O differ (output edges captured by different supergraph edges)."""
    signature: dict[LayerKey, set[_Port]] = {}
    for scenario, model in models.items():
        positions = output_positions(model)
        groups = capture.layer_group[scenario]
        for edge in model.edges:
            port = (positions[(edge.src, edge.tensor)], groups[edge.dst])
            signature.setdefault((scenario, edge.src), set()).add(port)
    conflicts: set[frozenset[LayerKey]] = set()
    for group in capture.groups:
        keys = [view.key for view in group.members.values()]
        for a, b in itertools.combinations(keys, 2):
            if signature.get(a, set()) != signature.get(b, set()):
                conflicts.add(frozenset((a, b)))
    return conflicts


def _topological_ranks(count: int, arcs: Iterable[tuple[int, int]]) -> list[int]:
    """Rank of each group in a topological order of the supergraph (Kahn; ties, cycles by creation index).

    The supergraph of several scenarios can contain a cycle (scenario 1 runs A then B, scenario 2 B then A,
    each captured together under I ∈ A); the earliest created remaining layer then goes next.
    """
    successors: dict[int, set[int]] = {i: set() for i in range(count)}
    for src, dst in arcs:
        successors[src].add(dst)
    indegree = [0] * count
    for targets in successors.values():
        for dst in targets:
            indegree[dst] += 1
    ready = [i for i in range(count) if indegree[i] == 0]
    heapq.heapify(ready)
    placed: list[int] = []
    done: set[int] = set()
    while len(placed) < count:
        if ready:
            current = heapq.heappop(ready)
            if current in done:
                continue
        else:  # a cycle: break it at the earliest created layer not placed yet
            current = min(i for i in range(count) if i not in done)
        done.add(current)
        placed.append(current)
        for dst in sorted(successors[current]):
            if dst not in done:
                indegree[dst] -= 1
                if indegree[dst] == 0:
                    heapq.heappush(ready, dst)
    ranks = [0] * count
    for rank, group in enumerate(placed):
        ranks[group] = rank
    return ranks


def _assemble(models: Mapping[str, CnnModel], views: Mapping[str, list[_View]], capture: _Capture,
              adaptive: frozenset[str]) -> Moc:
    """Lines 10-44 once the layers are captured: edges, control parameters, control node and control edges."""
    groups, layer_group = capture.groups, capture.layer_group

    # Lines 10-15: one supergraph edge per (source layer, output position, destination layer), Equation 5.2.
    edge_users: dict[_EdgeKey, list[str]] = {}
    edge_spec: dict[_EdgeKey, TensorSpec] = {}
    scenario_edge_key: dict[str, dict[str, _EdgeKey]] = {}
    for scenario, model in models.items():
        positions = output_positions(model)
        table = scenario_edge_key[scenario] = {}
        for edge in model.edges:
            key = (layer_group[scenario][edge.src], positions[(edge.src, edge.tensor)], layer_group[scenario][edge.dst],
                   edge.spec)
            table[edge.name] = key
            edge_users.setdefault(key, []).append(scenario)
            edge_spec.setdefault(key, edge.spec)
    first_seen = {key: number for number, key in enumerate(edge_users)}  # ties of one pair: in scenario order

    ranks = _topological_ranks(len(groups), ((src, dst) for src, _, dst, _ in edge_users))
    layer_id = {group.index: f"l{ranks[group.index] + 1}" for group in groups}
    edge_order = sorted(edge_users, key=lambda k: (ranks[k[0]], ranks[k[2]], k[1], first_seen[k]))
    edge_id = {key: f"e{number}" for number, key in enumerate(edge_order, start=1)}

    def value(view: _View, attribute: str) -> Value:
        """The value of par, I or O of one scenario layer in supergraph terms (lines 30-37)."""
        group_of = layer_group[view.scenario]
        this = group_of[view.layer.name]
        if attribute == "par":
            return view.par
        if attribute == "I":
            return tuple(edge_id[(group_of[name], position, this, spec)]
                         for (name, position), spec in zip(view.sources, view.input_specs, strict=True))
        outgoing = {edge_id[key] for key in scenario_edge_key[view.scenario].values() if key[0] == this}
        return tuple(sorted(outgoing, key=lambda e: int(e[1:])))

    # Lines 16-23: one control parameter per attribute in A that differs among the captured layers.
    params: list[ControlParam] = []
    control: dict[int, dict[str, str]] = {}
    for group in sorted(groups, key=lambda g: ranks[g.index]):
        control[group.index] = {}
        if len(group.members) < 2:
            continue
        for attribute in (a for a in CONTROL_ORDER if a in adaptive):
            values = {scenario: value(view, attribute) for scenario, view in group.members.items()}
            if len(set(values.values())) > 1:
                param = ControlParam(f"p{len(params) + 1}", layer_id[group.index], attribute, values)
                params.append(param)
                control[group.index][attribute] = param.id

    layers = tuple(_super_layer(group, layer_id[group.index], control[group.index], value)
                   for group in sorted(groups, key=lambda g: ranks[g.index]))
    edges = tuple(SuperEdge(
        id=edge_id[key], src=layer_id[key[0]], src_output=key[1], dst=layer_id[key[2]], spec=edge_spec[key],
        users=tuple(dict.fromkeys(edge_users[key])), reuse="full" if len(edge_users[key]) > 1 else "none",
    ) for key in edge_order)

    # Lines 24-39: the execution sequence φ^s of every scenario; line 40: the control node's tables.
    steps: dict[str, tuple[Step, ...]] = {}
    for scenario, scenario_views in views.items():
        sequence = []
        for view in scenario_views:
            group_index = layer_group[scenario][view.layer.name]
            pairs = tuple((param_id, value(view, attribute)) for attribute, param_id in control[group_index].items())
            sequence.append(Step(layer_id[group_index], pairs, view.layer.name, view.layer.outputs))
        steps[scenario] = tuple(sequence)
    layer_capture = {s: {name: layer_id[g] for name, g in table.items()} for s, table in layer_group.items()}
    edge_capture = {s: {name: edge_id[key] for name, key in table.items()} for s, table in scenario_edge_key.items()}

    # Lines 41-44: a control edge from the control node to every supergraph layer.
    control_edges = tuple(ControlEdge(layer.id, tuple(layer.control.values())) for layer in layers)
    return Moc(
        scenarios=tuple(models),
        adaptive=tuple(a for a in ADAPTIVE_ATTRIBUTES if a in adaptive),
        layers=layers,
        edges=edges,
        params=tuple(params),
        steps=steps,
        layer_capture=layer_capture,
        edge_capture=edge_capture,
        control_edges=control_edges,
    )


def _super_layer(group: _Group, layer_id: str, control: Mapping[str, str],
                 value: Callable[[_View, str], Value]) -> SuperLayer:
    """Line 7: a supergraph layer with the attributes of its first captured layer (the founder)."""
    founder = group.founder
    fixed = founder.fixed
    shared = len(group.members) > 1
    return SuperLayer(
        id=layer_id,
        op=fixed.op,
        type=fixed.type,
        domain=fixed.domain,
        opset=fixed.opset,
        attributes=dict(founder.layer.attributes),
        kernel=fixed.kernel,
        stride=fixed.stride,
        pads=fixed.pads,
        dilation=fixed.dilation,
        groups=fixed.groups,
        input_specs=founder.input_specs,
        output_specs=founder.output_specs,
        operand_kinds=fixed.operand_kinds,
        output_kinds=fixed.output_kinds,
        param_specs=fixed.param_specs,
        par=founder.par,
        inputs=value(founder, "I"),
        outputs=value(founder, "O"),
        scenarios=tuple(group.members),
        control=dict(control),
        reuse="none" if not shared else "partial" if control else "full",
        qdq=founder.layer.qdq,
        sized=len({view.sizes for view in group.members.values()}) > 1,
    )
