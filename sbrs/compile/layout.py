"""How the SBRS MoC is cut into execution units (:mod:`sbrs.compile.units` holds the result).

Step keys and sharing
    A step's identity is its *step key*: the supergraph layer and the value of its ``par`` control parameter
    (same layer, same weights). Steps with equal keys compute the same function; they compute the same
    *data* when they also read the same input tensors. The ``I`` and ``O`` values are wiring: ``O`` only says
    which edges carry the result on, and ``I`` matters only inside a unit. So a unit may be shared by
    scenarios whose steps read *different* tensors at the unit's boundary (e.g. the block after a block that
    one scenario drops): its graph inputs are placeholders (``in0``, ``in1`` ...) bound per scenario to that
    scenario's tensors. Inside a unit the wiring must be identical in every user (checked while fusing). This
    is a refinement of "share only where (layer, all control values) are equal": it never shares a different
    computation, and it halves the units of apps whose scenarios drop blocks (drone: 16 → 8 calls per frame
    for the accurate scenario; cifar10: 15 → 11).

Supergraph tensors
    Data crossing units is identified by supergraph tensor ``"<layer id>:<output position>"`` (e.g. ``l4:0``):
    the output of a supergraph layer. A unit's outputs are the same supergraph tensors for every user. A
    tensor may hold different values in different scenarios (a shared layer downstream of a
    scenario-specific one); only one scenario runs at a time, so they share its arena slot.

Fusion (granularity ``auto``)
    Step ``b`` joins the run that ends with step ``a`` when the same set of scenarios uses both, ``b`` directly
    follows ``a`` in every one of them, and each operand of ``b`` reads, in every user, either the same tensor
    produced inside the run or a tensor from outside it. Whether a step joins depends only on the run and
    its users, so every shared run appears contiguously and in the same order in each user, cut at the same
    places. Boundaries fall where scenarios diverge or rejoin or where the weights differ. An app whose
    scenarios share nothing gets one unit per scenario: its own whole model, at native speed. Granularity
    ``layer`` makes one unit per step (the thesis' fine-grained model, for comparison).

Unit outputs are the tensors a unit produces that another unit of any user reads, or that are graph outputs
of a user.

Adaptive parameters (``par`` ∈ A)
    A supergraph layer whose weights differ per scenario has different step keys per weight value, so it
    becomes separate units, one per distinct value, each with its weights as initializers. The weights differ
    anyway, so no weight memory is duplicated, only one session's overhead per value. The alternative, one
    unit with the weights as graph inputs bound per scenario, loses ONNX Runtime's weight prepacking and
    constant folding (batch norm is no longer folded into the conv). Measured here (2-core x86, onnxruntime
    1.31, global thread pool, one 3x3 conv 64→64 channels at 56x56 followed by batch norm and ReLU, median of
    200 ``run_with_iobinding`` calls, two runs): weights as initializers 0.77 ms, weights as graph inputs
    1.26 ms (1.65x slower; DESIGN.md measured 2.4x on a whole MobileNetV2). Separate units it is.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sbrs.compile.units import GRANULARITIES, StepKey, Unit, UnitLayout
from sbrs.errors import InputError
from sbrs.memory.tensors import sized_outputs, tensor_id
from sbrs.moc.model import Moc, Step
from sbrs.model.cnn import INPUT_OP, OUTPUT_OP, CnnModel, Layer, TensorSpec, layer_work

if TYPE_CHECKING:
    import numpy as np
    import onnx

#: The control-parameter attributes in a step key: the weights (``I`` and ``O`` are wiring, see the docstring).
_KEY_ATTRIBUTES: frozenset[str] = frozenset({"par"})


def step_key(moc: Moc, step: Step) -> StepKey:
    """The step key of ``step``: its layer and its ``par`` control-parameter value (the weights it uses), and for
    a layer run at several sizes (``SuperLayer.sized``) the step's own sizes: an ONNX Runtime session has one."""
    layer = moc.layer(step.layer_id)
    weight_params = {param for attribute, param in layer.control.items() if attribute in _KEY_ATTRIBUTES}
    sizes = ""
    if layer.sized:
        inputs, outputs = moc.step_specs(step)
        sizes = ",".join("x".join(map(str, spec.shape)) for spec in inputs) + "->" + ",".join(
            "x".join(map(str, spec.shape)) for spec in outputs)
    return StepKey(step.layer_id, tuple((param, value) for param, value in step.values if param in weight_params),
                   sizes=sizes)


def scenario_tensor_ids(model: CnnModel, moc: Moc, scenario: str) -> dict[str, str]:
    """Scenario tensor name → supergraph tensor id (capturing layer of its producer, output position, and its
    shape where that output has several, ``sbrs.memory.tensors.sized_outputs``)."""
    layer_capture, sized = moc.layer_capture[scenario], sized_outputs(moc)

    def shape_of(layer_id: str, position: int, name: str) -> tuple[int, ...] | None:
        return model.tensors[name].shape if (layer_id, position) in sized else None

    return {name: tensor_id(layer_capture[layer.name], position, shape_of(layer_capture[layer.name], position, name))
            for layer in model.layers for position, name in enumerate(layer.outputs) if name}


@dataclass(frozen=True)
class _ScenarioSteps:
    """One scenario's compute steps as the fusion sees them: keys, layers, operand sources, positions."""

    keys: tuple[StepKey, ...]
    layers: tuple[Layer, ...]
    sources: Mapping[StepKey, tuple[str, ...]]  # per data operand, the supergraph tensor it reads
    position: Mapping[StepKey, int]
    names: Mapping[str, str]  # the scenario's tensor name → its supergraph tensor


def _scenario_steps(model: CnnModel, moc: Moc, scenario: str, names: Mapping[str, str],
                    private: frozenset[StepKey]) -> _ScenarioSteps:
    steps = [step for step in moc.steps[scenario] if moc.layer(step.layer_id).op not in (INPUT_OP, OUTPUT_OP)]
    keys = tuple(replace(key, private_to=scenario) if key in private else key
                 for key in (step_key(moc, step) for step in steps))
    layers = tuple(model.layer(step.scenario_layer) for step in steps)
    sources = {key: tuple(names[t] for t in layer.inputs) for key, layer in zip(keys, layers, strict=True)}
    return _ScenarioSteps(keys, layers, sources, {key: index for index, key in enumerate(keys)}, names)


def layout_units(models: Mapping[str, CnnModel], moc: Moc, granularity: str,
                 share_min_bytes: int = 0, switch_steps: int = 1, min_step_work: int = 0,
                 resume: bool = False, input_name: str | None = None) -> UnitLayout:
    """Cut each scenario's execution sequence into units (module docstring), shared units listed once.

    ``input_name``: the app's input (``input.name``), the key of every scenario's frame input in
    ``UnitLayout.inputs``, whatever its model calls that input (default: each model's own name).

    Sharing threshold (``auto`` only; with ``layer`` every step is its own unit anyway, so privatising would
    only duplicate weights): a shared run whose weights total less than ``share_min_bytes`` is made private to
    each of its users (its steps get a scenario-specific key) and the cut is redone, until every shared unit
    holds at least that much; at most one pass per step key, so it ends.

    Switch points (``auto`` only): ``switch_steps`` > 1 cuts every unit whose work exceeds 1/``switch_steps`` of
    a user's frame into pieces of about that share, never smaller than ``min_step_work`` multiply-accumulates
    (``_cut_for_switching``).

    ``resume`` (``runtime.on_switch: resume``, beyond the thesis): the steps of a unit on the shared prefix of two
    scenarios' sequences are never made private, whatever their weights: a frame stopped on one scenario
    continues on the other from that prefix (``sbrs.compile.transitions.ResumeTable``), which a private copy
    would hide (drone: the stem and first block, 0.33 MB of weights, are what all five scenarios share).

    float16 and int8 tensors: steps that read or write one are always private, and never cut for switching
    (``_whole_steps``): a unit boundary there would change what ONNX Runtime computes (rounding, kernels).
    """
    if granularity not in GRANULARITIES:
        raise InputError(f"unknown granularity '{granularity}' (allowed: {', '.join(GRANULARITIES)})",
                         field="runtime.granularity")
    private = _whole_steps(moc)
    kept: set[StepKey] | None = None  # under ``resume``: the steps of the shared prefixes, from the first cut
    while True:
        layout, scenario_steps = _layout(models, moc, granularity, private, switch_steps, min_step_work,
                                          input_name)
        if granularity != "auto":
            return layout
        if kept is None:
            kept = shared_prefix_keys(layout) if resume else set()
        small = {replace(key, private_to="") for unit in layout.units if len(unit.scenarios) > 1
                 and _weight_bytes(unit, scenario_steps) < share_min_bytes for key in unit.steps} - kept
        if not small:
            return layout
        private |= small


#: Element types of tensors that a unit boundary must not cut (``_whole_steps``).
WHOLE_DTYPES: frozenset[str] = frozenset({"float16", "int8"})


def _whole_steps(moc: Moc) -> frozenset[StepKey]:
    """The steps that read or write a tensor of a type in ``WHOLE_DTYPES``: each scenario runs its own, and
    SBRS-TP never cuts at such a tensor (``_cut_for_switching``), so a scenario made of them is one unit.

    float16: ONNX Runtime's CPU provider has few float16 kernels; inside one session it computes a float16
    model in float32 and drops the Cast pairs between nodes, so most float16 tensors are never rounded to
    float16 there. A unit boundary on one rounds it (MobileNetV2 fp16 from two converters, sharing 151 layers:
    1.6e-4 off ONNX Runtime's output; keeping the tensor as float32 at the boundary only helps where it has one
    reader). int8: ONNX Runtime on x86 fuses a QDQ node unit with int8 activations into its integer kernel only
    after turning the QuantizeLinear → DequantizeLinear pair around the tensor to uint8, which needs both in one
    session: with a boundary there, the unit runs as a float convolution (MobileNetV2 s8 by layer: no
    QLinearConv left, against 37 of 52 in one session). uint8 tensors (the other QDQ and QOperator forms) can
    be cut anywhere, like float32."""
    keys: set[StepKey] = set()
    for steps in moc.steps.values():
        for step in steps:
            layer = moc.layer(step.layer_id)
            if layer.op not in (INPUT_OP, OUTPUT_OP) and any(
                    spec.dtype in WHOLE_DTYPES for spec in (*layer.input_specs, *layer.output_specs)):
                keys.add(step_key(moc, step))
    return frozenset(keys)


def shared_prefixes(layout: UnitLayout) -> dict[tuple[str, str], int]:
    """(o, n) → how many leading units o and n call alike: the same unit bound to the same tensors, hence the
    same computation on the same values (``sbrs.compile.transitions.common_prefix`` says the same of bytes)."""
    units = {unit.id: unit for unit in layout.units}
    prefixes: dict[tuple[str, str], int] = {}
    for old, a in layout.sequences.items():
        for new, b in layout.sequences.items():
            count = 0
            while (old != new and count < min(len(a), len(b)) and a[count] == b[count]
                   and units[a[count]].input_tensors[old] == units[a[count]].input_tensors[new]):
                count += 1
            if old != new:
                prefixes[(old, new)] = count
    return prefixes


def shared_prefix_keys(layout: UnitLayout) -> set[StepKey]:
    """The step keys of every unit on the shared prefix of two scenarios (``shared_prefixes``)."""
    units = {unit.id: unit for unit in layout.units}
    return {key for (old, _), count in shared_prefixes(layout).items()
            for unit_id in layout.sequences[old][:count] for key in units[unit_id].steps}


def _cut_for_switching(runs: Mapping[tuple[StepKey, ...], str], sequences: Mapping[str, tuple[str, ...]],
                       users: Mapping[StepKey, tuple[str, ...]], scenario_steps: Mapping[str, _ScenarioSteps],
                       models: Mapping[str, CnnModel], switch_steps: int,
                       min_step_work: int) -> tuple[dict[tuple[StepKey, ...], str], dict[str, tuple[str, ...]]]:
    """Cut fused runs so that a switch request waits for at most about 1/``switch_steps`` of the old frame.

    SBRS-TP (Algorithm 7, line 2) lets the new scenario start only when the old step in flight ends, so one
    whole-model unit makes every switch wait for the whole old frame. A run gets ``ceil(work / limit)`` pieces,
    ``limit`` = ``work(frame) / switch_steps`` of its smallest user's frame but at least ``min_step_work``
    multiply-accumulates (a session boundary costs ~10-30 µs on CPU, DESIGN.md, which a small piece would not
    repay). Each cut goes where the fewest bytes cross it (the session boundary converts every crossing tensor
    out of and back into ONNX Runtime's blocked layout) among the step boundaries within a quarter of a piece
    of the ideal, work-balanced position. Pieces of a shared run stay shared.
    """
    frame_work = {s: sum(layer_work(layer) for layer in steps.layers) for s, steps in scenario_steps.items()}
    pieces_of: dict[str, list[tuple[StepKey, ...]]] = {}
    for run, unit_id in runs.items():
        owner = users[run[0]][0]
        steps = scenario_steps[owner]
        layers = [steps.layers[steps.position[key]] for key in run]
        prefix = [0]
        for layer in layers:
            prefix.append(prefix[-1] + layer_work(layer))
        limit = max(min(frame_work[s] for s in users[run[0]]) / switch_steps, min_step_work)
        count = min(math.ceil(prefix[-1] / limit), max(prefix[-1] // max(min_step_work, 1), 1))
        crossing = _crossing_bytes(run, layers, steps, models[owner])
        whole = _crossing_bytes(run, layers, steps, models[owner], dtypes=WHOLE_DTYPES)
        cuts: list[int] = []
        for piece in range(1, count):
            ideal = piece * prefix[-1] / count
            window = 0.25 * prefix[-1] / count
            start = cuts[-1] if cuts else 0
            candidates = [k for k in range(start + 1, len(run))
                          if abs(prefix[k] - ideal) <= window and prefix[k] - prefix[start] >= min_step_work
                          and prefix[-1] - prefix[k] >= min_step_work and not whole[k]]
            if candidates:
                cuts.append(min(candidates, key=lambda k: (crossing[k], abs(prefix[k] - ideal))))
        bounds = [0, *cuts, len(run)]
        pieces_of[unit_id] = [run[a:b] for a, b in itertools.pairwise(bounds)]
    cut: dict[tuple[StepKey, ...], str] = {}
    for pieces in pieces_of.values():
        for piece_steps in pieces:
            cut.setdefault(piece_steps, f"u{len(cut) + 1}")
    return cut, {s: tuple(cut[p] for unit_id in calls for p in pieces_of[unit_id]) for s, calls in sequences.items()}


def _crossing_bytes(run: Sequence[StepKey], layers: Sequence[Layer], steps: _ScenarioSteps,
                    model: CnnModel, dtypes: frozenset[str] | None = None) -> list[int]:
    """``crossing[k]``: bytes of the tensors (of an element type in ``dtypes``, if given) produced before
    position k of ``run`` and read at k or later."""
    produced: dict[str, tuple[int, int]] = {}  # supergraph tensor → (position, bytes)
    last_read: dict[str, int] = {}
    for position, (key, layer) in enumerate(zip(run, layers, strict=True)):
        for source in steps.sources[key]:
            last_read[source] = position
        for name in layer.outputs:
            if name and (dtypes is None or model.tensors[name].dtype in dtypes):
                produced[steps.names[name]] = (position, model.tensors[name].nbytes)
    crossing = [0] * (len(run) + 1)
    for tensor, (made, size) in produced.items():
        for k in range(made + 1, last_read.get(tensor, made) + 1):
            crossing[k] += size
    return crossing


def _weight_bytes(unit: Unit, scenario_steps: Mapping[str, _ScenarioSteps]) -> int:
    """Bytes of the distinct parameter tensors of ``unit``'s layers."""
    steps = scenario_steps[unit.scenarios[0]]
    params = {p.digest: p.nbytes for key in unit.steps for p in steps.layers[steps.position[key]].params}
    return sum(params.values())


def _layout(models: Mapping[str, CnnModel], moc: Moc, granularity: str, private: frozenset[StepKey],
            switch_steps: int = 1, min_step_work: int = 0,
            input_name: str | None = None) -> tuple[UnitLayout, dict[str, _ScenarioSteps]]:
    names = {s: scenario_tensor_ids(models[s], moc, s) for s in moc.scenarios}
    scenario_steps = {s: _scenario_steps(models[s], moc, s, names[s], private) for s in moc.scenarios}
    users: dict[StepKey, tuple[str, ...]] = {}
    for scenario, steps in scenario_steps.items():
        for key in steps.keys:
            users[key] = (*users.get(key, ()), scenario)

    follows: dict[tuple[StepKey, StepKey], bool] = {}  # asked once per user of a step: kept, not recomputed

    def next_in_every_user(first: StepKey, second: StepKey) -> bool:
        if (first, second) not in follows:
            follows[first, second] = users[first] == users[second] and all(
                scenario_steps[s].position[second] == scenario_steps[s].position[first] + 1 for s in users[first])
        return follows[first, second]

    def same_wiring(run: Sequence[StepKey], added: StepKey) -> bool:
        """Each operand of ``added`` reads, in every user, the same tensor of ``run``, or a tensor from outside."""
        produced = {key.layer for key in run}
        per_user = [scenario_steps[s].sources[added] for s in users[added]]
        for operand_sources in zip(*per_user, strict=True):
            inside = [source.split(":")[0] in produced for source in operand_sources]
            if any(inside) and (not all(inside) or len(set(operand_sources)) > 1):
                return False
        return True

    runs: dict[tuple[StepKey, ...], str] = {}
    sequences: dict[str, tuple[str, ...]] = {}
    for scenario, steps in scenario_steps.items():
        calls: list[str] = []
        run: list[StepKey] = []
        for key in steps.keys:
            if run and not (granularity == "auto" and next_in_every_user(run[-1], key) and same_wiring(run, key)):
                calls.append(runs.setdefault(tuple(run), f"u{len(runs) + 1}"))
                run = []
            run.append(key)
        calls.append(runs.setdefault(tuple(run), f"u{len(runs) + 1}"))
        sequences[scenario] = tuple(calls)
    if switch_steps > 1 and granularity == "auto":
        runs, sequences = _cut_for_switching(runs, sequences, users, scenario_steps, models, switch_steps,
                                             min_step_work)

    specs: dict[str, TensorSpec] = {}
    for scenario, model in models.items():
        for name, spec in model.tensors.items():
            if name in names[scenario]:
                specs.setdefault(names[scenario][name], spec)
    # keyed by the app's input name, which the runtime binds frames by; a model may call its input otherwise
    inputs = {s: {input_name or models[s].graph_inputs[0]: names[s][models[s].graph_inputs[0]]}
              for s in moc.scenarios}
    outputs = {s: {name: names[s][name] for name in models[s].graph_outputs} for s in moc.scenarios}
    units = tuple(_unit(unit_id, run, users[run[0]], scenario_steps, outputs) for run, unit_id in runs.items())
    return UnitLayout(units, sequences, inputs, outputs, specs), scenario_steps


def _unit(unit_id: str, run: tuple[StepKey, ...], scenarios: tuple[str, ...],
          scenario_steps: Mapping[str, _ScenarioSteps], outputs: Mapping[str, Mapping[str, str]]) -> Unit:
    """A unit's input placeholders and their tensors per user, and its outputs (read outside or graph outputs)."""
    layers_in_run = {key.layer for key in run}
    external: dict[tuple[str, ...], str] = {}  # the tensors an operand reads in each user → placeholder
    produced: list[str] = []
    for key in run:
        per_user = [scenario_steps[s].sources[key] for s in scenarios]
        for operand_sources in zip(*per_user, strict=True):
            if operand_sources[0].split(":")[0] not in layers_in_run:
                external.setdefault(operand_sources, f"in{len(external)}")
        source = scenario_steps[scenarios[0]]
        produced.extend(source.names[name] for name in source.layers[source.position[key]].outputs if name)
    read_outside: set[str] = set()
    for scenario in scenarios:
        read_outside.update(outputs[scenario].values())
        steps = scenario_steps[scenario]
        for key in steps.keys:
            if key.layer not in layers_in_run:
                read_outside.update(steps.sources[key])
    unit_outputs = tuple(t for t in produced if t in read_outside)
    if not unit_outputs:
        raise InputError(f"unit {unit_id} ({', '.join(k.layer for k in run)}) computes nothing any scenario uses")
    input_tensors = {s: tuple(sources[index] for sources in external) for index, s in enumerate(scenarios)}
    return Unit(unit_id, run, scenarios, scenarios[0], tuple(external.values()), input_tensors, unit_outputs)


def unit_model(models: Mapping[str, CnnModel], moc: Moc, unit: Unit, tensor_specs: Mapping[str, TensorSpec],
               app_name: str = "sbrs", initializer: Callable[[np.ndarray, str], onnx.TensorProto] | None = None,
               ) -> onnx.ModelProto:
    """The ONNX model of ``unit`` (``UnitModels``, for one unit)."""
    return UnitModels(models, moc, tensor_specs, app_name, initializer)(unit)


class UnitModels:
    """The ONNX models of a plan's units, built from each unit's source scenario's layers: data tensors produced
    inside the unit are named by supergraph tensor id, operands read from outside by the unit's input
    placeholders. Each scenario's steps and tensor ids are worked out once for all its units (per unit, they cost
    a compile of cifar10's 115 units 2.9 s of 7)."""

    def __init__(self, models: Mapping[str, CnnModel], moc: Moc, tensor_specs: Mapping[str, TensorSpec],
                 app_name: str = "sbrs", initializer: Callable[[np.ndarray, str], onnx.TensorProto] | None = None,
                 ) -> None:
        self.models, self.moc, self.tensor_specs = models, moc, tensor_specs
        self.app_name, self.initializer = app_name, initializer
        self.tensor_ids: dict[str, dict[str, str]] = {}
        self.steps: dict[tuple[str, frozenset[StepKey]], _ScenarioSteps] = {}

    def scenario_steps(self, scenario: str, private: frozenset[StepKey]) -> _ScenarioSteps:
        if scenario not in self.tensor_ids:
            self.tensor_ids[scenario] = scenario_tensor_ids(self.models[scenario], self.moc, scenario)
        key = (scenario, private)
        if key not in self.steps:
            self.steps[key] = _scenario_steps(self.models[scenario], self.moc, scenario, self.tensor_ids[scenario],
                                              private)
        return self.steps[key]

    def __call__(self, unit: Unit) -> onnx.ModelProto:
        from onnx import numpy_helper

        from sbrs.model.onnx_export import build_graph_model

        tensor_specs = self.tensor_specs
        private = frozenset(replace(key, private_to="") for key in unit.steps if key.private_to)
        users = {s: self.scenario_steps(s, private) for s in unit.scenarios}
        placeholder_of = {tuple(unit.input_tensors[s][index] for s in unit.scenarios): name
                          for index, name in enumerate(unit.inputs)}
        tensor_spec_of = {name: tensor_specs[unit.input_tensors[unit.source][index]]
                          for index, name in enumerate(unit.inputs)}
        source = users[unit.source]
        layers = []
        for key in unit.steps:
            layer = source.layers[source.position[key]]
            per_operand = list(zip(*(users[s].sources[key] for s in unit.scenarios), strict=True))
            data_names = iter(tensors[0] if tensors[0].split(":")[0] in unit.layers else placeholder_of[tensors]
                              for tensors in per_operand)
            params = {p.name for p in layer.params}
            operands = tuple(o if not o or o in params else next(data_names) for o in layer.operands)
            outputs = tuple(source.names[o] if o else "" for o in layer.outputs)
            layers.append(replace(layer, operands=operands, outputs=outputs))
        model = self.models[unit.source]
        return build_graph_model(
            layers,
            [(name, tensor_spec_of[name]) for name in unit.inputs],
            [(t, tensor_specs[t]) for t in unit.outputs],
            model.weights, model.opset_imports, f"{self.app_name}.{unit.id}",
            initializer=self.initializer or numpy_helper.from_array,
        )
