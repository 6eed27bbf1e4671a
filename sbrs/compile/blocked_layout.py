"""Execution units that hand each other ONNX Runtime's blocked layout (NCHWc) instead of plain NCHW.

On x86 ONNX Runtime's CPU provider runs convolutions in a blocked layout, NCHWc: channels in blocks of 8 or 16
(AVX2, AVX-512) innermost. Its optimiser (``NchwcTransformer``) converts a graph's convolutions and pools to it
and puts a ``ReorderInput`` at each point where an NCHW tensor enters that region and a ``ReorderOutput`` where one
leaves. A whole model has such points at its ends only. A model cut into execution units has them at every
cut: each unit's optimised form reorders its inputs in and its outputs out, and a residual ``Add`` whose skip
tensor is the unit's input stays a separate NCHW ``Add`` and ``Relu`` (the optimiser fuses an ``Add`` into the
convolution before it only when both operands are in the blocked layout already). On drone's ResNet-18 cut
into 8 units that was 0.58 ms of reorders and 0.19 ms of separate ``Add`` and ``Relu`` in a 13.4 ms frame
(ONNX Runtime's profiler), where the whole model spends 0.01 ms on reorders.

Three rewrites of the build's optimised unit files (``<unit>.opt.onnx``, ``sbrs.ort_env.save_optimized``) take
these costs out; they give the same arithmetic as ONNX Runtime's optimised form of the whole model:

- ``fuse_residual_adds`` (inside one unit): ``Relu(Add(ReorderOutput(Conv(x)), s))`` becomes
  ``ReorderOutput(Conv(x, sum=s_c, activation=Relu))``, where ``s_c`` is the blocked form of ``s`` that the unit
  already has (the output of a ``ReorderInput(s)`` before the convolution, or the input of the
  ``ReorderOutput`` that made ``s``): ONNX Runtime's own fusion (the NCHWc ``Conv``'s fourth input, ``Sum``, added
  before the activation), applied where its optimiser does not see it.
- ``drop_round_trips`` (inside one unit): the fused block's output now leaves the blocked layout through a
  ``ReorderOutput`` that the next block's ``ReorderInput`` undoes; the next block reads the blocked tensor itself.
- ``keep_blocked_boundaries`` (between units): a boundary tensor that every unit producing it writes through a
  ``ReorderOutput`` and every unit reading it only reorders in (``ReorderInput``) stays blocked in the arena:
  both reorders go. Only where the blocked tensor has exactly the bytes of the plain one: float32, four
  dimensions, channels a multiple of ``CHANNEL_MULTIPLE`` (every block size of ONNX Runtime's x86 kernels
  divides it, so no padding channels), not a frame input or a scenario's output (the caller reads those).

The tensors so kept are ONNX Runtime's own layout on this machine: valid only with the optimised files they were
made with, as those files are (``optimized_for`` in the manifest); a build loaded elsewhere loads the portable
files, where every unit reorders as before. Nothing outside the units reads a boundary tensor that is not a
scenario's output: switches (SBRS-TP, cancel, resume) pass it from unit to unit by its arena offset only.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import onnx
from onnx import helper

if TYPE_CHECKING:
    from sbrs.compile.units import UnitPlan

NCHWC = "com.microsoft.nchwc"
#: Channels of a tensor kept blocked between units must be a multiple of this: ONNX Runtime's NCHWc block is 8
#: (AVX2) or 16 (AVX-512), and a blocked tensor whose channels are a multiple of its block has no padding.
CHANNEL_MULTIPLE = 16

Shapes = Mapping[str, tuple[int, ...]]


@dataclass(frozen=True)
class BlockedLayout:
    """What the rewrites did to a build's optimised unit files: residual ``Add``s fused and reorder round trips
    dropped, per unit, and the boundary tensors kept blocked."""

    fused_adds: Mapping[str, int]
    round_trips: Mapping[str, int]
    blocked_tensors: tuple[str, ...]

    def summary(self) -> str:
        return (f"{sum(self.fused_adds.values())} residual additions fused into convolutions, "
                f"{sum(self.round_trips.values())} reorders out and back in dropped, "
                f"{len(self.blocked_tensors)} boundary tensors kept in ONNX Runtime's blocked layout")


def _attribute(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _is(node: onnx.NodeProto | None, op_type: str, domain: str = NCHWC) -> bool:
    return node is not None and node.op_type == op_type and node.domain == domain


def _plain_reorder(node: onnx.NodeProto | None, op_type: str) -> bool:
    """A ``ReorderInput`` or ``ReorderOutput`` between NCHW and NCHWc (not NHWC)."""
    return _is(node, op_type) and _attribute(node, "channels_last", 0) == 0


class _Graph:
    """A graph's producers and consumers by value name, rebuilt after each change (graphs of a unit are small)."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph = graph
        self.index()

    def index(self) -> None:
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        self.position: dict[int, int] = {}
        for position, node in enumerate(self.graph.node):
            self.position[id(node)] = position
            for name in node.output:
                self.producer[name] = node
            for name in node.input:
                if name:
                    self.consumers[name].append(node)
        self.outputs = {value.name for value in self.graph.output}

    def only_use(self, name: str, node: onnx.NodeProto) -> bool:
        return name not in self.outputs and [id(n) for n in self.consumers[name]] == [id(node)]

    def rename(self, old: str, new: str) -> None:
        """Every read of ``old`` reads ``new`` (graph outputs too)."""
        for node in self.graph.node:
            for i, name in enumerate(node.input):
                if name == old:
                    node.input[i] = new
        for value in self.graph.output:
            if value.name == old:
                value.name = new

    def rename_value(self, old: str, new: str) -> None:
        """The value ``old`` is called ``new``: where a node writes it, where nodes read it, as a graph output."""
        for node in self.graph.node:
            for i, name in enumerate(node.output):
                if name == old:
                    node.output[i] = new
        self.rename(old, new)

    def remove(self, node: onnx.NodeProto) -> None:
        self.graph.node.remove(node)


def _blocked_form(graph: _Graph, name: str, before: int, channels: int) -> str | None:
    """The name of ``name``'s blocked form in ``graph``, computed before node position ``before``: the input of the
    ``ReorderOutput`` that made it, or the output of a ``ReorderInput`` of it; None if the graph has none."""
    made_by = graph.producer.get(name)
    if _plain_reorder(made_by, "ReorderOutput") and _attribute(made_by, "channels") == channels:
        blocked = str(made_by.input[0])
        source = graph.producer.get(blocked)  # None: the graph's input
        return blocked if source is None or graph.position[id(source)] < before else None
    for reader in graph.consumers.get(name, ()):
        if _plain_reorder(reader, "ReorderInput") and graph.position[id(reader)] < before:
            return str(reader.output[0])
    return None


def fuse_residual_adds(graph: onnx.GraphProto, shapes: Shapes) -> int:
    """Fold ``Add(ReorderOutput(Conv(x)), s)`` and a ``Relu`` after it into the NCHWc convolution (module
    docstring), wherever the convolution has no activation and no sum yet, its output goes nowhere else, ``s``
    has the sum's shape (``shapes``: the plain tensors' shapes by name, from the unit's portable graph) and a
    blocked form computed before the convolution. Returns how many were fused."""
    view = _Graph(graph)
    fused = 0
    while any(_fuse_add(view, add, made, skip, shapes) for add in list(graph.node)
              if add.op_type == "Add" and add.domain in ("", "ai.onnx") and len(add.input) == 2
              for made, skip in ((add.input[0], add.input[1]), (add.input[1], add.input[0]))):
        fused += 1  # one fusion changes the graph: look again from the start
    _drop_dead_reorders(view)
    return fused


def _fuse_add(view: _Graph, add: onnx.NodeProto, made: str, skip: str, shapes: Shapes) -> bool:
    """``add`` of ``made`` (a convolution's output reordered out) and ``skip``, folded into that convolution, if
    ``fuse_residual_adds``' conditions hold; whether it was."""
    reorder = view.producer.get(made)
    if not _plain_reorder(reorder, "ReorderOutput") or not view.only_use(made, add):
        return False
    blocked = str(reorder.input[0])
    conv = view.producer.get(blocked)
    if (not _is(conv, "Conv") or not view.only_use(blocked, reorder) or len(conv.input) > 3
            or _attribute(conv, "activation") is not None):
        return False
    shape = shapes.get(made)
    if shape is None or len(shape) != 4 or shapes.get(skip) != shape:
        return False
    skip_blocked = _blocked_form(view, skip, view.position[id(conv)], int(_attribute(reorder, "channels")))
    if skip_blocked is None:
        return False
    while len(conv.input) < 3:
        conv.input.append("")  # no bias: the optional input stays empty
    conv.input.append(skip_blocked)
    last = add
    relus = view.consumers.get(add.output[0], [])
    if (len(relus) == 1 and relus[0].op_type == "Relu" and relus[0].domain in ("", "ai.onnx")
            and add.output[0] not in view.outputs):
        conv.attribute.append(helper.make_attribute("activation", "Relu"))
        last = relus[0]
        view.remove(relus[0])
    reorder.output[0] = last.output[0]
    view.remove(add)
    view.index()
    return True


def drop_round_trips(graph: onnx.GraphProto) -> int:
    """``ReorderInput(ReorderOutput(c))`` reads ``c`` itself, where the two forms have the same bytes (channels a
    multiple of ``CHANNEL_MULTIPLE``): a residual block's output that ``fuse_residual_adds`` now writes through a
    ``ReorderOutput``, read by the next block's ``ReorderInput``. Returns how many reorders into the blocked layout
    went (a ``ReorderOutput`` nothing reads any more goes too)."""
    view = _Graph(graph)
    dropped = 0
    for reorder_in in list(graph.node):
        if not _plain_reorder(reorder_in, "ReorderInput"):
            continue
        reorder_out = view.producer.get(reorder_in.input[0])
        channels = _attribute(reorder_out, "channels") if reorder_out is not None else None
        if not _plain_reorder(reorder_out, "ReorderOutput") or not isinstance(channels, int) \
                or channels % CHANNEL_MULTIPLE:
            continue
        view.rename(str(reorder_in.output[0]), str(reorder_out.input[0]))
        view.remove(reorder_in)
        view.index()
        dropped += 1
    _drop_dead_reorders(view)
    return dropped


def _drop_dead_reorders(view: _Graph) -> None:
    """Remove every ``ReorderOutput`` whose output nothing reads and the graph does not give out."""
    for node in list(view.graph.node):
        if _is(node, "ReorderOutput") and not view.consumers.get(node.output[0]) and node.output[0] not in view.outputs:
            view.remove(node)
    view.index()


def keep_blocked_boundaries(graphs: Mapping[str, onnx.GraphProto], produced: Mapping[str, Iterable[str]],
                            read: Mapping[str, Iterable[tuple[str, str]]], specs: Shapes,
                            caller_tensors: Iterable[str], dtypes: Mapping[str, str]) -> tuple[str, ...]:
    """Keep blocked every boundary tensor that every producer writes through a ``ReorderOutput`` and every reader
    only reorders in (module docstring). ``graphs``: unit id → optimised graph, changed in place; ``produced``:
    tensor id → the units that write it (as a graph output of that name); ``read``: tensor id → (unit, graph
    input name) of every unit that reads it, in any scenario; ``specs`` and ``dtypes``: each boundary tensor's
    shape and element type; ``caller_tensors``: frame inputs and scenario outputs, never kept blocked. Returns the
    tensors kept blocked, sorted."""
    excluded = set(caller_tensors)
    views = {unit: _Graph(graph) for unit, graph in graphs.items()}
    feeds: dict[tuple[str, str], set[str]] = defaultdict(set)  # a unit's input: every tensor bound to it
    for tensor, readers in read.items():
        for reader in readers:
            feeds[reader].add(tensor)

    def can_write(unit: str, tensor: str, channels: int) -> bool:
        made_by = views[unit].producer.get(tensor)
        return _plain_reorder(made_by, "ReorderOutput") and _attribute(made_by, "channels") == channels

    def can_read(unit: str, name: str) -> bool:
        view = views[unit]
        uses = view.consumers.get(name, [])
        return bool(uses) and name not in view.outputs and all(_plain_reorder(node, "ReorderInput") for node in uses)

    kept = set()
    for tensor in produced:
        shape = specs.get(tensor)
        if (tensor not in excluded and dtypes.get(tensor) == "float32" and shape is not None and len(shape) == 4
                and not shape[1] % CHANNEL_MULTIPLE and read.get(tensor)
                and all(can_write(unit, tensor, shape[1]) for unit in produced[tensor])
                and all(can_read(unit, name) for unit, name in read[tensor])):
            kept.add(tensor)
    # a unit's input is blocked for every tensor bound to it or for none: drop tensors until that holds
    while dropped := {t for t in kept if any(not feeds[reader] <= kept for reader in read[t])}:
        kept -= dropped
    for tensor in sorted(kept):
        for unit in produced[tensor]:
            view = views[unit]
            reorder = view.producer[tensor]
            inside = [node for node in view.consumers.get(tensor, ()) if node is not reorder]
            blocked = str(reorder.input[0])
            if inside:  # the unit reads the plain form too: it keeps its reorder, under another name
                plain = f"{tensor}/nchw"
                reorder.output[0] = plain
                for node in inside:
                    for i, name in enumerate(node.input):
                        if name == tensor:
                            node.input[i] = plain
            else:
                view.remove(reorder)
            view.rename_value(blocked, tensor)
            view.index()
    for unit, name in sorted({reader for tensor in kept for reader in read[tensor]}):
        view = views[unit]
        for reorder in list(view.consumers[name]):
            view.rename(str(reorder.output[0]), name)
            view.remove(reorder)
        view.index()
    return tuple(sorted(kept))


def plain_shapes(portable: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape in a unit's portable graph (ONNX shape inference; the optimised graph keeps the names
    of the plain tensors it still has, and carries no shapes)."""
    inferred = onnx.shape_inference.infer_shapes(portable)
    shapes = {}
    for value in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        dims = value.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = tuple(int(d.dim_value) for d in dims)
    return shapes


def rewrite_units(plan: UnitPlan, folder: Path, optimized_suffix: str) -> BlockedLayout:
    """The three rewrites (module docstring) on the optimised file of every unit of ``plan`` in ``folder``
    (``<unit>`` + ``optimized_suffix``, beside its portable ``<unit>.onnx``), written back in place."""
    models = {unit.id: onnx.load_model(str(folder / f"{unit.id}{optimized_suffix}"), load_external_data=False)
              for unit in plan.units}
    fused, trips = {}, {}
    for unit in plan.units:
        portable = onnx.load_model(str(folder / f"{unit.id}.onnx"), load_external_data=False)
        fused[unit.id] = fuse_residual_adds(models[unit.id].graph, plain_shapes(portable))
        trips[unit.id] = drop_round_trips(models[unit.id].graph)
    produced: dict[str, list[str]] = defaultdict(list)
    read: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for unit in plan.units:
        for tensor in unit.outputs:
            produced[tensor].append(unit.id)
        for tensors in unit.input_tensors.values():
            for name, tensor in zip(unit.inputs, tensors, strict=True):
                read[tensor].add((unit.id, name))
    callers = {t for names in (*plan.inputs.values(), *plan.outputs.values()) for t in names.values()}
    blocked = keep_blocked_boundaries({unit: model.graph for unit, model in models.items()}, produced,
                                      {t: sorted(units) for t, units in read.items()},
                                      {t.id: t.shape for t in plan.tensors}, callers,
                                      {t.id: t.dtype for t in plan.tensors})
    for unit_id, model in models.items():
        onnx.save_model(model, str(folder / f"{unit_id}{optimized_suffix}"))
    return BlockedLayout({unit: count for unit, count in fused.items() if count},
                         {unit: count for unit, count in trips.items() if count}, blocked)
