"""The supergraph compiled into one ONNX graph: one session runs every scenario (``sbrs.compile.one_plan``).

ONNX Runtime runs every node of a session whatever outputs are fetched, so scenarios can share one session only
through the graph's own control flow: ``If``, whose condition comes from the ``scenario`` input. The graph is
built from the MoC (Algorithm 5): each scenario's execution sequence φ^s, its steps keyed as the units key
them (``sbrs.compile.layout.step_key``: supergraph layer, weights, sizes), so two scenarios' steps with one key
compute the same function.

Building (``_Builder.emit``, recursive over sets of scenarios S that reach a point of the graph together):

- **Shared steps.** While every scenario of S has the same next step reading the same values, that step is
  one node at this level (outside the ``If`` nodes that follow): the stem of an app runs once per frame
  whatever the scenario.
- **Split.** Where the next steps differ (every place where the supergraph's paths split, Algorithm 5's
  control parameters), the rest of each scenario up to its *rejoin* (the first later step that every scenario
  of S runs, if any: the blocks after a dropped block, a shared classifier) is a *segment*. The scenarios are
  grouped by what their segments share (greedily merging the groups whose common steps hold the most weight
  bytes), and one ``If`` per group but the last chooses the group's branch (a chain: ``If(in G1) then
  [G1's segments] else If(in G2) ...``). Inside a branch the same procedure runs again on the group.
- **Rejoin.** The ``If`` nodes give back, as their outputs, every tensor a segment made that is read after the
  rejoin (or is a graph output): one output per role, a role being the set of later steps (key, operand) that
  read the tensor, so that the rejoining step reads one name in every scenario and is again one shared node.
  A branch gives an empty tensor for a role none of its scenarios has.

Every parameter is one initializer of the outer graph, named by its content digest, whichever branches read it
(ONNX Runtime keeps initializers of the main graph once and places one read only inside subgraphs where it is
used, onnxruntime PRs 12310 and 8642). The scenario's index is checked once, first: ``Gather`` of the index
into ``[0 .. N-1]`` after mapping negative values past the end, so an index outside ``0..N-1`` fails there, in a
node named ``scenario_index_check`` (``Gather``'s own message: indices element out of data bounds), instead of
wrapping around as ``Gather`` does for negative indices.

What cannot become one graph is an ``InputError`` naming the scenario: a model input of another element type
than the app's, scenarios on different versions of the standard ONNX operator set, outputs of one name with
different element types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from sbrs.compile.layout import scenario_tensor_ids, step_key
from sbrs.compile.one_plan import (
    ONE_UNIT,
    SCENARIO_INPUT,
    GraphOutput,
    OneGraphSpec,
    OnePlan,
    ScenarioEntry,
    TensorInfo,
)
from sbrs.compile.units import StepKey, Unit, UnitLayout
from sbrs.errors import InputError
from sbrs.model.cnn import INPUT_OP, OUTPUT_OP, CnnModel, Layer, TensorSpec, params_bytes
from sbrs.model.onnx_export import IR_VERSION, make_nodes

if TYPE_CHECKING:
    from sbrs.app.app import App
    from sbrs.moc.model import Moc

#: The node that checks the scenario index (its name is in ONNX Runtime's error for an index out of range).
INDEX_CHECK = "scenario_index_check"

Initializer = Callable[[np.ndarray, str], onnx.TensorProto]


@dataclass(frozen=True)
class _Step:
    """One compute step of one scenario as the graph builder sees it.

    ``operands``: per ONNX operand of the layer, ``("param", digest)``, ``("data", supergraph tensor)`` or
    ``("", "")``; ``outputs``: the supergraph tensor per output position (``""`` absent); ``identity``: what the
    step computes (its key, op, attributes and parameters), equal for steps that are one node when shared."""

    key: StepKey
    layer: Layer
    operands: tuple[tuple[str, str], ...]
    outputs: tuple[str, ...]
    weight: int
    identity: tuple[Any, ...]
    specs: tuple[TensorSpec, ...]  # per output position with a tensor, in order

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(name for kind, name in self.operands if kind == "data")


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _scenario_steps(model: CnnModel, moc: Moc, scenario: str) -> list[_Step]:
    names = scenario_tensor_ids(model, moc, scenario)
    steps: list[_Step] = []
    for step in moc.steps[scenario]:
        if moc.layer(step.layer_id).op in (INPUT_OP, OUTPUT_OP):
            continue
        layer = model.layer(step.scenario_layer)
        params = {p.name: p for p in layer.params}
        operands = tuple(("param", params[o].digest) if o in params else ("data", names[o]) if o else ("", "")
                         for o in layer.operands)
        identity = (step_key(moc, step), layer.op, layer.domain, _freeze(layer.attributes),
                    tuple(p.digest for p in layer.params), None if layer.qdq is None else repr(layer.qdq),
                    tuple(kind for kind, _ in operands), tuple(bool(o) for o in layer.outputs))
        steps.append(_Step(step_key(moc, step), layer, operands, tuple(names[o] if o else "" for o in layer.outputs),
                           sum(p.nbytes for p in layer.params), identity,
                           tuple(model.tensors[o] for o in layer.outputs if o)))
    return steps


@dataclass
class _Slot:
    """One value that must reach a point of the graph under one name: per scenario, the supergraph tensor."""

    tensors: dict[str, str]
    dtype: str
    shapes: dict[str, tuple[int, ...]]


@dataclass
class _Builder:
    """The graph being built: one node list per graph (the outer one and each branch), names unique in the whole
    model, every parameter one outer initializer."""

    models: Mapping[str, CnnModel]
    order: tuple[str, ...]
    initializer: Initializer
    initializers: dict[str, onnx.TensorProto] = field(default_factory=dict)
    outer: list[onnx.NodeProto] = field(default_factory=list)  # the condition nodes, first in the outer graph
    conditions: dict[frozenset[str], str] = field(default_factory=dict)
    specs: dict[str, dict[str, TensorSpec]] = field(default_factory=dict)  # scenario → tensor → spec
    used: set[str] = field(default_factory=set)
    nodes_made: int = 0
    ifs: int = 0
    index_name: str = ""

    def fresh(self, base: str) -> str:
        name, count = base, 1
        while name in self.used:
            count += 1
            name = f"{base}~{count}"
        self.used.add(name)
        return name

    def weight(self, digest: str, scenario: str) -> str:
        name = f"w.{digest}"
        if name not in self.initializers:
            self.initializers[name] = self.initializer(self.models[scenario].weights[digest], name)
        return name

    def constant(self, name: str, array: np.ndarray) -> str:
        if name not in self.initializers:
            self.initializers[name] = numpy_helper.from_array(array, name)
        return name

    def empty(self, dtype: str) -> str:
        return self.constant(f"sbrs.empty.{dtype}", np.zeros((0,), dtype=np.dtype(dtype)))

    def condition(self, group: Sequence[str]) -> str:
        """A scalar bool, true when the scenario is one of ``group`` (computed once, in the outer graph)."""
        key = frozenset(group)
        if key not in self.conditions:
            table = np.array([name in key for name in self.order], dtype=bool)
            label = "+".join(s for s in self.order if s in key)
            members = self.constant(self.fresh(f"sbrs.in.{label}"), table)
            output = self.fresh(f"is.{label}")
            self.outer.append(helper.make_node("Gather", [members, self.index_name], [output],
                                               name=self.fresh(f"select.{label}")))
            self.conditions[key] = output
        return self.conditions[key]

    # -- steps ------------------------------------------------------------------------------------------

    def emit_step(self, nodes: list[onnx.NodeProto], step: _Step, env: Mapping[str, str],
                  scenario: str) -> dict[str, str]:
        """``step`` as nodes appended to ``nodes``, reading ``env`` (supergraph tensor → value name); returns the
        names of the tensors it writes."""
        operands = tuple(self.weight(name, scenario) if kind == "param" else env[name] if kind == "data" else ""
                         for kind, name in step.operands)
        written = {tensor: self.fresh(tensor) for tensor in step.outputs if tensor}
        outputs = tuple(written[tensor] if tensor else "" for tensor in step.outputs)
        layer = replace(step.layer, name=self.fresh(step.layer.name), operands=operands, outputs=outputs)
        made = make_nodes(layer)
        for node in made:  # a QDQ unit's inner tensors are named after its first output: unique already
            self.used.update(node.output)
        nodes.extend(made)
        self.nodes_made += 1
        return written

    def same_next(self, group: Sequence[str], seqs: Mapping[str, list[_Step]],
                  env: Mapping[str, Mapping[str, str]]) -> bool:
        """Whether every scenario of ``group`` runs the same next step on the same values."""
        first = seqs[group[0]][0]
        reads = [env[group[0]].get(t) for t in first.sources]
        for scenario in group[1:]:
            step = seqs[scenario][0]
            if step.identity != first.identity or [env[scenario].get(t) for t in step.sources] != reads:
                return False
        return True

    # -- the recursion -------------------------------------------------------------------------------------

    def emit(self, nodes: list[onnx.NodeProto], group: tuple[str, ...], seqs: dict[str, list[_Step]],
             env: dict[str, dict[str, str]], demanded: list[_Slot]) -> list[str]:
        """Emit the rest ``seqs`` of every scenario of ``group`` into ``nodes`` (module docstring); returns, per
        slot of ``demanded``, one value name holding its tensor in every scenario of the slot."""
        seqs = {s: list(seqs[s]) for s in group}
        stalled = False  # the last split only chose among values and the rejoining step still differs
        while any(seqs[s] for s in group):
            if all(seqs[s] for s in group) and self.same_next(group, seqs, env):
                step = seqs[group[0]][0]
                written = self.emit_step(nodes, step, env[group[0]], group[0])
                for scenario in group:
                    env[scenario].update(written)
                    seqs[scenario].pop(0)
                stalled = False
                continue
            rejoin = None if stalled else _rejoin(group, seqs)
            if rejoin is None:
                segments, rest = seqs, {s: [] for s in group}
            else:
                at = {s: next(i for i, step in enumerate(seqs[s]) if step.key == rejoin) for s in group}
                segments, rest = {s: seqs[s][:at[s]] for s in group}, {s: seqs[s][at[s]:] for s in group}
            slots = self._carried(group, segments, rest, env, demanded)
            names = self.branch(nodes, group, segments, env, slots, merge=not stalled)
            stalled = not any(segments[s] for s in group)
            for slot, name in zip(slots, names, strict=True):
                for scenario, tensor in slot.tensors.items():
                    env[scenario][tensor] = name
            seqs = rest
        result = []
        unresolved = []
        for slot in demanded:
            values = {env[s][t] for s, t in slot.tensors.items()}
            result.append(values.pop() if len(values) == 1 else "")
            if result[-1] == "":
                unresolved.append(slot)
        if unresolved:  # one value per scenario, different names: an If that only chooses among them
            chosen = iter(self.branch(nodes, group, {s: [] for s in group}, env, unresolved, merge=False))
            result = [name or next(chosen) for name in result]
        return result

    def _carried(self, group: tuple[str, ...], segments: Mapping[str, list[_Step]],
                 rest: Mapping[str, list[_Step]], env: Mapping[str, Mapping[str, str]],
                 demanded: list[_Slot]) -> list[_Slot]:
        """The outputs of the ``If`` for ``segments``: every tensor a segment makes that is read in ``rest`` or
        demanded, and every value read by the rejoining step whose name differs between scenarios; one slot per
        role (the later readers of the tensor, its type)."""
        roles: dict[tuple[Any, ...], _Slot] = {}
        rejoin = {s: rest[s][0] for s in group if rest[s]}
        for scenario in group:
            made = {t for step in segments[scenario] for t in step.outputs if t}
            wanted: dict[str, set[tuple[Any, ...]]] = {}
            for step in rest[scenario]:
                for position, tensor in enumerate(step.sources):
                    wanted.setdefault(tensor, set()).add((step.key, position))
            for number, slot in enumerate(demanded):
                if scenario in slot.tensors:
                    wanted.setdefault(slot.tensors[scenario], set()).add(("demanded", number))
            # the rejoining step's operands: a role per position, so that it reads one name in every scenario
            at_rejoin: dict[str, int] = {}
            differing = set()
            first = rejoin.get(scenario)
            if first is not None and len(rejoin) == len(group):
                for position, tensor in enumerate(first.sources):
                    at_rejoin.setdefault(tensor, position)
                    if len({env[s].get(rejoin[s].sources[position]) for s in group}) > 1:
                        differing.add(tensor)
            for tensor, readers in wanted.items():
                if tensor not in made and tensor not in differing:
                    continue
                spec = self.specs[scenario][tensor]
                role = (("rejoin", at_rejoin[tensor]) if tensor in at_rejoin else tuple(sorted(readers, key=repr)),
                        spec.dtype)
                slot = roles.setdefault(role, _Slot({}, spec.dtype, {}))
                slot.tensors[scenario] = tensor
                slot.shapes[scenario] = spec.shape
        return list(roles.values())

    def branch(self, nodes: list[onnx.NodeProto], group: tuple[str, ...], segments: Mapping[str, list[_Step]],
               env: dict[str, dict[str, str]], slots: list[_Slot], *, merge: bool = True) -> list[str]:
        """The ``If`` chain choosing between the groups of ``group`` (``_partition``; ``merge=False``: each
        scenario a group of its own, but those with nothing left to run) for ``segments``; returns the value name
        of each slot after it."""
        groups = _partition(group, segments, env, slots, merge=merge)
        if len(groups) == 1:  # the segments share a step every scenario runs: no choice to make here yet
            return self.emit(nodes, group, dict(segments), env, slots)
        self.ifs += len(groups) - 1
        return self._chain(nodes, groups, segments, env, slots)

    def _chain(self, nodes: list[onnx.NodeProto], groups: list[tuple[str, ...]],
               segments: Mapping[str, list[_Step]], env: dict[str, dict[str, str]], slots: list[_Slot]) -> list[str]:
        first, others = groups[0], groups[1:]
        then_graph = self._subgraph(first, lambda inner, scope, wanted: self.emit(
            inner, first, {s: segments[s] for s in first}, scope, wanted), env, slots)
        remaining = tuple(s for g in others for s in g)
        if len(others) == 1:
            else_graph = self._subgraph(remaining, lambda inner, scope, wanted: self.emit(
                inner, remaining, {s: segments[s] for s in remaining}, scope, wanted), env, slots)
        else:
            else_graph = self._subgraph(remaining, lambda inner, scope, wanted: self._chain(
                inner, others, segments, scope, wanted), env, slots)
        label = "+".join(first)
        outputs = [self.fresh(f"if.{label}.{number}") for number in range(len(slots))]
        nodes.append(helper.make_node("If", [self.condition(first)], outputs, name=self.fresh(f"if.{label}"),
                                      then_branch=then_graph, else_branch=else_graph))
        return outputs

    def _subgraph(self, group: tuple[str, ...],
                  body: Callable[[list[onnx.NodeProto], dict[str, dict[str, str]], list[_Slot]], list[str]],
                  env: Mapping[str, Mapping[str, str]], slots: list[_Slot]) -> onnx.GraphProto:
        """One branch: ``body`` emits into it for ``group`` (its own copy of the scopes' names), and each slot
        becomes one output (an empty tensor where no scenario of ``group`` has the slot)."""
        inner: list[onnx.NodeProto] = []
        scope = {s: dict(env[s]) for s in group}
        wanted = [_Slot({s: t for s, t in slot.tensors.items() if s in group}, slot.dtype,
                        {s: v for s, v in slot.shapes.items() if s in group}) for slot in slots]
        present = [slot for slot in wanted if slot.tensors]
        names = iter(body(inner, scope, present))
        made = {name for node in inner for name in node.output}
        outputs: list[onnx.ValueInfoProto] = []
        given: set[str] = set()
        for slot in wanted:
            value = next(names) if slot.tensors else self.empty(slot.dtype)
            if value not in made or value in given:  # a value from outside the branch, or given twice: a copy
                copy = self.fresh(f"{value}.out")
                inner.append(helper.make_node("Identity", [value], [copy], name=self.fresh(f"pass.{value}")))
                value = copy
            given.add(value)
            shapes = set(slot.shapes.values())
            shape = list(shapes.pop()) if len(shapes) == 1 else None
            outputs.append(helper.make_tensor_value_info(value, helper.np_dtype_to_tensor_dtype(
                np.dtype(slot.dtype)), shape))
        return helper.make_graph(inner, self.fresh(f"branch.{'+'.join(group)}"), [], outputs)


def _weighted_keys(steps: Sequence[_Step]) -> set[StepKey]:
    """The keys of the steps that hold parameters: the steps worth sharing. A step without any (an activation,
    a pooling) costs no memory when each branch runs its own, and rejoining at it would cut the graph into an
    ``If`` per layer where the scenarios' weights differ layer by layer (two heads exported apart)."""
    return {step.key for step in steps if step.weight > 0}


def _rejoin(group: Sequence[str], seqs: Mapping[str, list[_Step]]) -> StepKey | None:
    """The first step holding parameters (in the first scenario's order) that every scenario of ``group`` still
    runs, or None."""
    if not all(seqs[s] for s in group):
        return None
    common = set.intersection(*(_weighted_keys(seqs[s]) for s in group))
    return next((step.key for step in seqs[group[0]] if step.key in common), None)


def _partition(group: tuple[str, ...], segments: Mapping[str, list[_Step]], env: Mapping[str, Mapping[str, str]],
               slots: list[_Slot], *, merge: bool = True) -> list[tuple[str, ...]]:
    """``group`` split into the groups that share a branch: scenarios with nothing left to run together when
    the values they hand on have the same names; the others (with ``merge``) merged greedily, two groups at a
    time, while the steps holding parameters common to both hold the most bytes (``_rejoin`` then finds one
    inside the merged group, so that a group of several scenarios always shares a step)."""
    idle: dict[tuple[str, ...], list[str]] = {}
    busy: list[list[str]] = []
    for scenario in group:
        if segments[scenario]:
            busy.append([scenario])
        else:
            idle.setdefault(tuple(env[scenario].get(slot.tensors.get(scenario, ""), "") for slot in slots),
                            []).append(scenario)

    def common(members: Sequence[str]) -> int:
        keys = set.intersection(*(_weighted_keys(segments[s]) for s in members))
        weights = {step.key: step.weight for step in segments[members[0]]}
        return sum(weights[key] for key in keys)

    while merge and len(busy) > 1:
        best, pair = 0, None
        for i in range(len(busy)):
            for j in range(i + 1, len(busy)):
                merged = busy[i] + busy[j]
                gain = (len(merged) - 1) * common(merged) - (len(busy[i]) - 1) * common(busy[i]) \
                    - (len(busy[j]) - 1) * common(busy[j])
                if gain > best:
                    best, pair = gain, (i, j)
        if pair is None:
            break
        i, j = pair
        busy[i] = busy[i] + busy.pop(j)
    order = {s: n for n, s in enumerate(group)}
    groups = [tuple(sorted(members, key=order.__getitem__)) for members in (*busy, *idle.values())]
    return sorted(groups, key=lambda members: order[members[0]])


@dataclass(frozen=True)
class OneGraph:
    """The app's one graph (``model``) and its contract (``spec``, the sidecar of ``sbrs export``)."""

    model: onnx.ModelProto
    spec: OneGraphSpec


def _opsets(models: Mapping[str, CnnModel], where: str) -> dict[str, int]:
    """One operator-set version per domain: the standard one must be the same in every scenario (a node means
    what its version says); other domains take the highest version declared."""
    opsets: dict[str, int] = {}
    standard: dict[str, int] = {}
    for scenario, model in models.items():
        for domain, version in model.opset_imports.items():
            if domain in ("", "ai.onnx"):
                standard[scenario] = version
            else:
                opsets[domain] = max(opsets.get(domain, version), version)
    if len(set(standard.values())) > 1:
        listed = ", ".join(f"{s} {v}" for s, v in standard.items())
        raise InputError(f"the scenarios use different versions of the ONNX operator set ({listed}); one graph "
                         "runs one version: export the models with the same opset", file=where, field="scenarios")
    version = next(iter(standard.values()), 0)
    if version < 11:
        raise InputError(f"the scenarios use ONNX operator set {version}; one graph needs 11 or later (If, Where, "
                         "Gather on an int64 index)", file=where, field="scenarios")
    opsets[""] = version
    return opsets


def _shared_contract(app: App) -> tuple[dict[str, int], tuple[GraphOutput, ...]]:
    """The operator sets and outputs the app's scenarios share in one graph; an ``InputError`` naming the scenario
    where they cannot: a model input of another element type than the app's, another operator set version, an
    output name with different element types."""
    config = app.config
    for scenario, model in app.models.items():
        spec = model.tensors[model.graph_inputs[0]]
        if len(model.graph_inputs) != 1 or spec.dtype != config.input.dtype:
            raise InputError(f"scenario '{scenario}': its model's input is {spec.dtype}, the app's "
                             f"{config.input.dtype}; one graph has one input", file=str(config.path),
                             field="scenarios")
    return _opsets(app.models, str(config.path)), _graph_outputs(app.models, config.path)


def check_one_graph(app: App) -> None:
    """Raise the ``InputError`` that says why ``app``'s scenarios cannot share one graph (``_shared_contract``),
    without making the graph (``runtime.session: auto`` keeps units then, ``sbrs.artifact.write``)."""
    _shared_contract(app)


def one_graph(app: App, moc: Moc | None = None, initializer: Initializer = numpy_helper.from_array) -> OneGraph:
    """``app`` as one ONNX graph (module docstring). ``initializer`` makes each weight's tensor from its array
    and name (default: inside the model; ``sbrs build`` writes them to its weights file)."""
    from sbrs.moc import derive_moc

    config = app.config
    if config.memory_limit_mb is not None:
        raise InputError("an app run by parts under a memory limit cannot be one graph (its band calls are "
                         "sessions of their own): remove memory_limit_mb or run it as units",
                         file=str(config.path), field="memory_limit_mb")
    models = app.models
    moc = moc or derive_moc(models, config.adaptive)
    order = tuple(models)
    frame = TensorInfo(config.input.name, tuple(config.input.shape), config.input.dtype)
    opsets, outputs = _shared_contract(app)

    builder = _Builder(models, order, initializer)
    builder.used.update({config.input.name, SCENARIO_INPUT, *(o.info.name for o in outputs)})
    builder.specs = {s: {names: spec for names, spec in _tensor_specs(model, moc, s).items()}
                     for s, model in models.items()}
    seqs = {s: _scenario_steps(models[s], moc, s) for s in order}
    # every scenario's input tensor (its Input layer's output) is the app's input
    env = {s: {scenario_tensor_ids(models[s], moc, s)[models[s].graph_inputs[0]]: config.input.name} for s in order}
    _index_check(builder, len(order))
    demanded = []
    for output in outputs:
        givers = [s for s in order if output.info.name in models[s].graph_outputs]
        demanded.append(_Slot({s: _output_tensor(models[s], moc, s, output.info.name) for s in givers},
                              output.info.dtype, {s: models[s].tensors[output.info.name].shape for s in givers}))
    body: list[onnx.NodeProto] = []
    names = builder.emit(body, order, seqs, env, demanded)
    finals = []
    for output, name in zip(outputs, names, strict=True):
        finals.append(helper.make_node("Identity", [name], [output.info.name],
                                       name=builder.fresh(f"out.{output.info.name}")))
    shared = sum(1 for node in body if node.op_type not in ("If", "Identity"))
    graph = helper.make_graph(
        [*builder.outer, *body, *finals], f"{app.name}.one",
        [helper.make_tensor_value_info(frame.name, helper.np_dtype_to_tensor_dtype(np.dtype(frame.dtype)),
                                       list(frame.shape)),
         helper.make_tensor_value_info(SCENARIO_INPUT, onnx.TensorProto.INT64, [])],
        [helper.make_tensor_value_info(o.info.name, helper.np_dtype_to_tensor_dtype(np.dtype(o.info.dtype)),
                                       None if o.info.shape is None else
                                       [d if d is not None else f"{o.info.name}_{axis}"
                                        for axis, d in enumerate(o.info.shape)]) for o in outputs],
        initializer=list(builder.initializers.values()))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())],
                              ir_version=IR_VERSION, producer_name="sbrs")
    scenarios = _scenario_entries(models)
    spec = OneGraphSpec(app.name, frame, scenarios, outputs, {s: len(seqs[s]) for s in order}, builder.nodes_made,
                        shared, builder.ifs, params_bytes(models.values()),
                        sum(params_bytes([m]) for m in models.values()))
    return OneGraph(model, spec)


def _scenario_entries(models: Mapping[str, CnnModel]) -> tuple[ScenarioEntry, ...]:
    return tuple(ScenarioEntry(index, s, tuple(TensorInfo(name, model.tensors[name].shape, model.tensors[name].dtype)
                                               for name in model.graph_outputs))
                 for index, (s, model) in enumerate(models.items()))


def _index_check(builder: _Builder, count: int) -> None:
    """The checked index (``builder.index_name``): ``Gather([0..N-1], scenario < 0 ? N : scenario)``."""
    negative = builder.fresh("scenario.negative")
    mapped = builder.fresh("scenario.mapped")
    builder.index_name = builder.fresh("scenario.checked")
    zero = builder.constant("sbrs.zero", np.array(0, np.int64))
    past = builder.constant("sbrs.count", np.array(count, np.int64))
    indices = builder.constant("sbrs.indices", np.arange(count, dtype=np.int64))
    builder.outer.extend([
        helper.make_node("Less", [SCENARIO_INPUT, zero], [negative], name=builder.fresh("scenario.less")),
        helper.make_node("Where", [negative, past, SCENARIO_INPUT], [mapped], name=builder.fresh("scenario.where")),
        helper.make_node("Gather", [indices, mapped], [builder.index_name], name=INDEX_CHECK),
    ])
    builder.used.add(INDEX_CHECK)


def _tensor_specs(model: CnnModel, moc: Moc, scenario: str) -> dict[str, TensorSpec]:
    return {tensor: model.tensors[name] for name, tensor in scenario_tensor_ids(model, moc, scenario).items()}


def _output_tensor(model: CnnModel, moc: Moc, scenario: str, name: str) -> str:
    return scenario_tensor_ids(model, moc, scenario)[name]


def _graph_outputs(models: Mapping[str, CnnModel], where: str) -> tuple[GraphOutput, ...]:
    """The union of the scenarios' output names, in order of first appearance (module docstring of
    ``sbrs.compile.one_plan``); one element type per name."""
    found: dict[str, list[tuple[int, str, TensorSpec]]] = {}
    for index, (scenario, model) in enumerate(models.items()):
        for name in model.graph_outputs:
            found.setdefault(name, []).append((index, scenario, model.tensors[name]))
    outputs = []
    for name, entries in found.items():
        dtypes = {spec.dtype for _, _, spec in entries}
        if len(dtypes) > 1:
            listed = ", ".join(f"{s} {spec.dtype}" for _, s, spec in entries)
            raise InputError(f"output '{name}' has different element types ({listed}); one graph gives one type "
                             "per output name", file=str(where), field="scenarios")
        shapes = [spec.shape for _, _, spec in entries]
        ranks = {len(shape) for shape in shapes}
        shape: tuple[int | None, ...] | None = None  # None: the scenarios' ranks differ
        if len(ranks) == 1:
            shape = tuple(dims[0] if len(set(dims)) == 1 else None for dims in zip(*shapes, strict=True))
        outputs.append(GraphOutput(TensorInfo(name, shape, dtypes.pop()), tuple(i for i, _, _ in entries)))
    return tuple(outputs)


def _layout(frame: TensorInfo, scenarios: Sequence[ScenarioEntry]) -> UnitLayout:
    """The one unit every scenario calls, for the runtime: the frame (one slot) in, each scenario's outputs out
    (a slot per output name, or per scenario where their shapes differ)."""
    shapes: dict[str, set[tuple[int | None, ...]]] = {}
    for entry in scenarios:
        for output in entry.outputs:
            shapes.setdefault(output.name, set()).add(output.shape)
    tensor_specs: dict[str, TensorSpec] = {f"{frame.name}": TensorSpec(tuple(int(d) for d in frame.shape), frame.dtype)}
    outputs: dict[str, dict[str, str]] = {}
    for entry in scenarios:
        outputs[entry.name] = {}
        for output in entry.outputs:
            tensor = f"out:{output.name}" if len(shapes[output.name]) == 1 else f"out:{output.name}@{entry.name}"
            tensor_specs[tensor] = TensorSpec(tuple(int(d) for d in output.shape if d is not None), output.dtype)
            outputs[entry.name][output.name] = tensor
    names = tuple(s.name for s in scenarios)
    written = tuple(dict.fromkeys(t for mapping in outputs.values() for t in mapping.values()))
    unit = Unit(ONE_UNIT, (), names, names[0], (frame.name,), {s: (frame.name,) for s in names}, written)
    return UnitLayout((unit,), {s: (ONE_UNIT,) for s in names}, {s: {frame.name: frame.name} for s in names},
                      outputs, tensor_specs)


def one_plan(app: App) -> OnePlan:
    """The runtime's plan of ``app``'s one graph: its one unit, the arena of its frame and outputs placed and
    checked (``sbrs.compile.arena.plan_layout``)."""
    from sbrs.compile.arena import plan_layout

    config = app.config
    frame = TensorInfo(config.input.name, tuple(config.input.shape), config.input.dtype)
    layout = _layout(frame, _scenario_entries(app.models))
    plan = plan_layout(layout, app=app.name, granularity="one", adaptive=tuple(config.adaptive))
    return OnePlan(**{f.name: getattr(plan, f.name) for f in fields(plan)})


def unique_names(graph: onnx.GraphProto, taken: set[str] | None = None,
                 renames: Mapping[str, str] | None = None) -> None:
    """Rename, in place, every value defined in a branch under a name already defined elsewhere in the model
    (``name~2`` ...), and its uses in that branch and the branches inside it.

    ONNX Runtime's optimised form of the one graph (``sbrs.ort_env.save_optimized``) defines its NCHWc reorders
    and folded weights under the same names in several branches (``reorder_token_0``, onnxruntime 1.32), and then
    refuses to load the file it wrote (a graph must be in single static assignment form). Renamed, the file loads
    and computes what the portable one computes (tested)."""
    taken = set() if taken is None else taken
    scope = dict(renames or {})
    defined = [*(t.name for t in graph.initializer), *(i.name for i in graph.input),
               *(name for node in graph.node for name in node.output if name)]
    for name in defined:
        if name in taken:
            count = 2
            while f"{name}~{count}" in taken:
                count += 1
            scope[name] = f"{name}~{count}"
        else:
            scope.pop(name, None)  # defined here: a rename from an outer scope no longer applies
        taken.add(scope.get(name, name))

    def renamed(name: str) -> str:
        return scope.get(name, name) if name else name

    for tensor in graph.initializer:
        tensor.name = renamed(tensor.name)
    for value in (*graph.input, *graph.output, *graph.value_info):
        value.name = renamed(value.name)
    for node in graph.node:
        node.input[:] = [renamed(name) for name in node.input]
        node.output[:] = [renamed(name) for name in node.output]
        for attribute in node.attribute:
            for subgraph in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                unique_names(subgraph, taken, scope)
