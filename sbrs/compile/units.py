"""Execution units: the SBRS MoC compiled into the ONNX Runtime sessions the runtime calls, and their plan.

ONNX Runtime cannot run part of a graph, so a merged supergraph cannot be one session (DESIGN.md, "Running on
ONNX Runtime"). The runtime therefore cuts every scenario's execution sequence φ^s into *units*: maximal runs
of consecutive steps that compile to one ONNX model and one session, called in order for each frame.

The units are cut from the MoC by :mod:`sbrs.compile.layout` (step keys, sharing, fusion). This module holds
what the cut produces: a plain frozen ``UnitPlan`` (JSON via ``to_dict``) that also carries the arena offsets
of every boundary tensor (``sbrs.compile.arena``). A compiled build reads it without the MoC or the models.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from sbrs.moc.model import Value
    from sbrs.model.cnn import TensorSpec

GRANULARITIES: tuple[str, ...] = ("auto", "layer")

#: The least work (multiply-accumulates) of a piece cut for switching: ~0.4 ms on the 2-core CPU of DESIGN.md,
#: so the ~15 µs of the extra session boundary stays under ~4 % of the piece.
MIN_SWITCH_STEP_WORK = 25_000_000

@dataclass(frozen=True)
class StepKey:
    """What a step computes: supergraph layer ``layer`` with the ``par``/``I`` control values ``values``."""

    layer: str
    values: tuple[tuple[str, Value], ...] = ()
    private_to: str = ""  # a scenario name when this step is not shared (see "Sharing threshold")
    sizes: str = ""  # the step's input and output shapes, for a layer run at several sizes (``SuperLayer.sized``)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"layer": self.layer, "values": {param: list(value) for param, value in self.values}}
        return data | ({"private_to": self.private_to} if self.private_to else {}) | (
            {"sizes": self.sizes} if self.sizes else {})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepKey:
        return cls(str(data["layer"]), tuple((str(p), tuple(v)) for p, v in data.get("values", {}).items()),
                   str(data.get("private_to", "")), str(data.get("sizes", "")))


@dataclass(frozen=True)
class BoundaryTensor:
    """A supergraph tensor crossing a unit boundary (or the frame input, or a graph output) and its arena slot."""

    id: str
    shape: tuple[int, ...]
    dtype: str
    offset: int

    @property
    def spec(self) -> TensorSpec:
        from sbrs.model.cnn import TensorSpec  # the model stage's type; a compiled build's run never needs it

        return TensorSpec(self.shape, self.dtype)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "shape": list(self.shape), "dtype": self.dtype, "offset": self.offset,
                "bytes": self.nbytes}


@dataclass(frozen=True)
class Unit:
    """One execution unit: consecutive steps compiled into one ONNX Runtime session, loaded once.

    ``scenarios`` are the users (each runs exactly these steps, contiguously, in this order); ``source`` is the
    scenario whose layers (and weights) build the unit's graph. ``inputs`` are the graph's input placeholders
    (``in0``, ``in1`` ...) and ``input_tensors[s]`` the supergraph tensors they are bound to when scenario s
    runs the unit (they may differ per scenario). ``outputs`` are supergraph tensor ids, the same for every user.
    """

    id: str
    steps: tuple[StepKey, ...]
    scenarios: tuple[str, ...]
    source: str
    inputs: tuple[str, ...]
    input_tensors: Mapping[str, tuple[str, ...]]
    outputs: tuple[str, ...]

    @property
    def layers(self) -> tuple[str, ...]:
        return tuple(step.layer for step in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "layers": list(self.layers), "steps": [s.to_dict() for s in self.steps],
                "scenarios": list(self.scenarios), "source": self.source, "inputs": list(self.inputs),
                "input_tensors": {s: list(t) for s, t in self.input_tensors.items()},
                "outputs": list(self.outputs)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Unit:
        return cls(str(data["id"]), tuple(StepKey.from_dict(s) for s in data["steps"]),
                   tuple(data["scenarios"]), str(data["source"]), tuple(data["inputs"]),
                   {s: tuple(t) for s, t in data["input_tensors"].items()}, tuple(data["outputs"]))


@dataclass(frozen=True)
class UnitPlan:
    """How the runtime executes an app: units, each scenario's unit sequence and the boundary-tensor arena.

    ``sequences[s]`` lists the unit ids scenario s calls per frame; ``inputs[s]`` maps the app's input name to
    the frame-input tensor and ``outputs[s]`` each of s's graph output names to its tensor. ``tensors`` are
    the boundary tensors with their offsets in one arena of ``arena_bytes`` (``alignment``-aligned), planned
    with ``sbrs.memory`` (``arena_strategy``; ``arena_lower_bound`` is the proven minimum). Only boundary
    tensors live in the arena: tensors inside a unit are ONNX Runtime's own memory (``inner_memory``).
    """

    app: str
    granularity: str
    adaptive: tuple[str, ...]
    units: tuple[Unit, ...]
    sequences: Mapping[str, tuple[str, ...]]
    inputs: Mapping[str, Mapping[str, str]]
    outputs: Mapping[str, Mapping[str, str]]
    tensors: tuple[BoundaryTensor, ...]
    arena_bytes: int
    alignment: int
    arena_lower_bound: int
    arena_strategy: str
    inner_memory: str = "onnxruntime"
    #: How a runtime executes the plan (``PartsPlan.execution`` is ``parts``).
    execution: ClassVar[str] = "units"

    def unit(self, unit_id: str) -> Unit:
        for unit in self.units:
            if unit.id == unit_id:
                return unit
        raise KeyError(unit_id)

    def tensor(self, tensor_name: str) -> BoundaryTensor:
        for tensor in self.tensors:
            if tensor.id == tensor_name:
                return tensor
        raise KeyError(tensor_name)

    @property
    def scenarios(self) -> tuple[str, ...]:
        return tuple(self.sequences)

    def to_dict(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "granularity": self.granularity,
            "adaptive": list(self.adaptive),
            "units": [unit.to_dict() for unit in self.units],
            "sequences": {s: list(seq) for s, seq in self.sequences.items()},
            "inputs": {s: dict(m) for s, m in self.inputs.items()},
            "outputs": {s: dict(m) for s, m in self.outputs.items()},
            "tensors": [tensor.to_dict() for tensor in self.tensors],
            "arena_bytes": self.arena_bytes,
            "alignment": self.alignment,
            "arena_lower_bound": self.arena_lower_bound,
            "arena_strategy": self.arena_strategy,
            "inner_memory": self.inner_memory,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UnitPlan:
        return cls(
            app=str(data["app"]), granularity=str(data["granularity"]), adaptive=tuple(data["adaptive"]),
            units=tuple(Unit.from_dict(u) for u in data["units"]),
            sequences={s: tuple(seq) for s, seq in data["sequences"].items()},
            inputs={s: dict(m) for s, m in data["inputs"].items()},
            outputs={s: dict(m) for s, m in data["outputs"].items()},
            tensors=tuple(BoundaryTensor(t["id"], tuple(t["shape"]), t["dtype"], int(t["offset"]))
                          for t in data["tensors"]),
            arena_bytes=int(data["arena_bytes"]), alignment=int(data["alignment"]),
            arena_lower_bound=int(data["arena_lower_bound"]), arena_strategy=str(data["arena_strategy"]),
            inner_memory=str(data.get("inner_memory", "onnxruntime")),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


@dataclass(frozen=True)
class UnitLayout:
    """The units before arena planning: everything of ``UnitPlan`` but offsets (``tensor_specs`` instead)."""

    units: tuple[Unit, ...]
    sequences: Mapping[str, tuple[str, ...]]
    inputs: Mapping[str, Mapping[str, str]]
    outputs: Mapping[str, Mapping[str, str]]
    tensor_specs: Mapping[str, TensorSpec]
