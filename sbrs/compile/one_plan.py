"""The app as one ONNX graph (``runtime.session: one``, ``sbrs export``): what the build keeps and the runtime reads.

``sbrs.compile.one_graph`` compiles the supergraph into one ONNX model: every weight once, an outer-graph
initializer; the scenario an int64 scalar input named ``scenario`` (its index in the app file, from 0); ``If``
nodes where the scenarios' paths split. This module holds the plain values around that model, light enough for
a run of a build (no onnx, no MoC):

- ``OneGraphSpec``: the model's contract with whoever runs it, the JSON sidecar ``sbrs export`` writes beside it
  (``to_dict``): the inputs, each scenario's index and outputs, the graph's outputs and which scenarios give
  them, and how much the graph shares.
- ``OnePlan``: the same model as what the engine executes, a ``UnitPlan`` of one unit (``one``) that every
  scenario calls once per frame, with the frame input, each scenario's outputs and their arena slots
  (``execution`` is ``one``): the arena, the shadow slots of SBRS-TP and the transition tables are then those
  of any unit plan, and the runtime binds the ``scenario`` input of each scenario to its index
  (``sbrs.runtime.one_session.bind_one``).

Outputs (the contract ``If`` imposes: every branch gives the same number of outputs, each of one element type
in every branch): the graph's outputs are the union of the scenarios' output names, in the order they first
appear in the app file. Scenarios that name an output alike must give it one element type (shapes may
differ; the graph declares a dimension only where every scenario agrees). A scenario gives, for an output it
does not have, an empty tensor (shape ``[0]``) of that type; ``OneGraphSpec.scenarios[k].outputs`` lists what
scenario k gives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from sbrs.compile.units import UnitPlan

#: The name of the model input holding the scenario's index (scripts depend on it).
SCENARIO_INPUT = "scenario"
#: The unit id of the one session (its build file is ``one.onnx``).
ONE_UNIT = "one"
#: Version of the sidecar's JSON form.
SIDECAR_FORMAT = 1


@dataclass(frozen=True)
class TensorInfo:
    """A named tensor: shape (a dimension None where scenarios differ, the whole shape None where their ranks
    differ) and element type."""

    name: str
    shape: tuple[int | None, ...] | None
    dtype: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": None if self.shape is None else list(self.shape), "dtype": self.dtype}


@dataclass(frozen=True)
class ScenarioEntry:
    """Scenario ``name``: the value of the ``scenario`` input that selects it, and the outputs it gives."""

    index: int
    name: str
    outputs: tuple[TensorInfo, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "outputs": [o.to_dict() for o in self.outputs]}


@dataclass(frozen=True)
class GraphOutput:
    """One output of the graph: its declared shape and type and the indices of the scenarios that give it
    (the others give an empty tensor of that type)."""

    info: TensorInfo
    scenarios: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return self.info.to_dict() | {"scenarios": list(self.scenarios)}


@dataclass(frozen=True)
class OneGraphSpec:
    """What ``sbrs export`` writes beside the model (``to_dict``, the JSON sidecar).

    ``steps``: the layers each scenario runs; ``nodes``: the layer nodes the graph holds (a layer inside several
    branches counts once per branch), ``shared``: those outside every ``If`` (run by every scenario, once per
    frame); ``branches``: the ``If`` nodes. ``params_bytes``: the weights held, each distinct tensor once;
    ``params_sum_bytes``: the scenarios' own models' weights summed."""

    app: str
    input: TensorInfo
    scenarios: tuple[ScenarioEntry, ...]
    outputs: tuple[GraphOutput, ...]
    steps: Mapping[str, int]
    nodes: int
    shared: int
    branches: int
    params_bytes: int
    params_sum_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": SIDECAR_FORMAT,
            "app": self.app,
            "inputs": [self.input.to_dict(), {"name": SCENARIO_INPUT, "shape": [], "dtype": "int64",
                                              "values": f"0..{len(self.scenarios) - 1}, the scenario's index"}],
            "scenarios": [s.to_dict() for s in self.scenarios],
            "outputs": [o.to_dict() for o in self.outputs],
            "contract": ("run(None, {input: frame, 'scenario': int64 index}) gives every output of the graph; "
                         "scenario k's are those its entry lists, the others are empty tensors (shape [0]); an "
                         "index outside 0..N-1 fails in the node 'scenario_index_check' (Gather: indices "
                         "element out of data bounds)"),
            "sharing": {"steps": dict(self.steps), "nodes": self.nodes, "shared_nodes": self.shared,
                        "if_nodes": self.branches, "params_bytes": self.params_bytes,
                        "params_sum_bytes": self.params_sum_bytes},
        }


@dataclass(frozen=True)
class OnePlan(UnitPlan):
    """A ``UnitPlan`` of the one unit ``ONE_UNIT``, the app's one graph: every scenario's sequence is that unit,
    its input the frame (``inputs``), its outputs the scenario's own (``outputs``: output name → tensor, a
    tensor per scenario where the shapes differ). The scenario index the runtime binds to ``SCENARIO_INPUT`` is
    the scenario's position in ``sequences`` (the app file's order)."""

    execution: ClassVar[str] = "one"

    def index(self, scenario: str) -> int:
        return list(self.sequences).index(scenario)

    def to_dict(self) -> dict[str, Any]:
        return super().to_dict() | {"execution": self.execution}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OnePlan:
        plan = UnitPlan.from_dict(data)
        return cls(**{f.name: getattr(plan, f.name) for f in fields(plan)})


def plan_from_dict(data: Mapping[str, Any]) -> UnitPlan:
    """A build's unit plan from its JSON form: the one graph's (``execution: one``) or units'."""
    return OnePlan.from_dict(data) if data.get("execution") == OnePlan.execution else UnitPlan.from_dict(data)
