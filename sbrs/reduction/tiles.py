"""Receptive-field tiling (Zhuang et al. 2023, receptive-field-based input tiling): a group of layers runs as one
firing per band.

Line-by-line banding (thesis Chapter 4) keeps a line buffer for every tensor of a region, overlap rows
included, and calls every layer once per band. Tiling runs a *group* of consecutive layers (e.g. an inverted
residual block: expand 1x1, depthwise 3x3, project 1x1, the residual sum) as one firing per band of the
group's exit rows: the firing reads the rows of the group's entry tensors that the band's receptive field
needs and computes every member on just the rows its consumers in the group need, so the overlap between
consecutive bands is *recomputed* instead of kept. What the group holds between firings is only the line
buffers of its entries and exit; its internal tensors (the wide expanded ones in MobileNetV2) exist only
during a firing, band-sized (:attr:`TilePhases.transient`).

For an executor (``sbrs.compile.parts``) a group's firing is one ONNX Runtime call: the members with their
band's top/bottom pads (each computed from the rows *it* produces, so zero padding stays where the whole
layer has it), and a ``Slice`` where a member reads fewer rows than are available (a residual sum reads the
block input at the exit rows, the expansion reads it with the depthwise halo).

In the CSDF model (:func:`~sbrs.reduction.csdf.cnn_to_csdf`) the group is one actor named after its exit
layer whose phases consume the entries' receptive-field rows (``plan``) and produce the exit's band.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sbrs.errors import InputError
from sbrs.model.cnn import INPUT_OP, CnnModel
from sbrs.reduction.phases import InputPhases, LayerPhases
from sbrs.reduction.rows import (
    ROWWISE_OPS,
    WINDOW_OPS,
    is_row_local,
    layer_height,
    layer_row_maps,
    row_bytes,
    tensor_rows,
)

__all__ = ["TilePhases", "check_group", "rows_phases", "tile_groups", "tile_phases"]

Range = tuple[int, int]


@dataclass(frozen=True)
class TilePhases:
    """A tiled group: ``layers`` (topological order, the last one the exit), the group's actor ``plan``
    (entries as inputs, the exit band as output), each member's own row plan per phase (``members``: the
    rows it computes and reads, and its band pads) and the bytes of the internal tensors per phase."""

    layers: tuple[str, ...]
    exit: str
    plan: LayerPhases
    members: tuple[LayerPhases, ...]
    transient: tuple[int, ...]

    def member(self, name: str) -> LayerPhases:
        for plan in self.members:
            if plan.layer == name:
                return plan
        raise KeyError(name)


def rows_phases(tensor: str, kind: str, rows: Sequence[Range], in_rows: int,
                pads: Sequence[tuple[int, int]] | None = None) -> InputPhases:
    """An input's phase plan from the rows each phase reads (consumed and kept as Algorithm 4 counts them)."""
    count = len(rows)
    consumed: list[int] = []
    kept: list[int] = []
    taken = 0
    for k in range(count):
        hi = in_rows if k == count - 1 else max(taken, rows[k][1])
        consumed.append(hi - taken)
        taken = hi
        kept.append(max(0, taken - rows[k + 1][0]) if k < count - 1 else 0)
    return InputPhases(tensor, kind, tuple(rows), tuple(pads or [(0, 0)] * count), tuple(consumed), tuple(kept))


def check_group(model: CnnModel, layers: Sequence[str]) -> None:
    """``InputError`` unless ``layers`` can be tiled: row-local compute layers, one output each, in
    topological order, every internal tensor read only inside the group and not a graph output."""
    if not layers:
        raise InputError("an empty tile group", field="tiles")
    order = {layer.name: i for i, layer in enumerate(model.layers)}
    unknown = [n for n in layers if n not in order]
    if unknown:
        raise InputError(f"tile group: unknown layer(s) {', '.join(unknown[:5])}", field="tiles")
    names = sorted(layers, key=order.__getitem__)
    if list(layers) != names:
        raise InputError(f"tile group {layers[0]}..: layers not in topological order", field="tiles")
    members = set(layers)
    for name in layers:
        layer = model.layer(name)
        if (layer.op == INPUT_OP or not is_row_local(model, layer) or len(layer.outputs) != 1
                or layer.op not in WINDOW_OPS | ROWWISE_OPS):
            raise InputError(f"tile group: layer '{name}' ({layer.op}) cannot run by bands", field="tiles")
        if any(p < 0 for p in layer.pads):
            raise InputError(f"tile group: layer '{name}' crops (negative pads)", field="tiles")
    for name in layers[:-1]:
        tensor = model.layer(name).outputs[0]
        outside = [r.name for r in model.layers if tensor in r.inputs and r.name not in members]
        if outside or tensor in model.graph_outputs:
            raise InputError(f"tile group: '{tensor}' is read outside the group", field="tiles")


def _union(a: Range | None, b: Range) -> Range:
    return b if a is None else (min(a[0], b[0]), max(a[1], b[1]))


def tile_phases(model: CnnModel, layers: Sequence[str], band: int) -> TilePhases:
    """The phases of the group ``layers`` producing ``band`` exit rows per firing (module docstring)."""
    check_group(model, layers)
    members = [model.layer(n) for n in layers]
    exit_layer = members[-1]
    height = layer_height(exit_layer)
    band = max(1, min(int(band), height))
    out_rows = tuple((o0, min(o0 + band, height)) for o0 in range(0, height, band))
    internal = {m.outputs[0] for m in members[:-1]}
    maps = {m.name: layer_row_maps(model, m) for m in members}
    computed: dict[str, list[Range]] = {m.name: [] for m in members}
    reads: dict[tuple[str, str], list[tuple[Range, tuple[int, int]]]] = {}
    entry_rows: dict[str, list[Range]] = {}
    entry_kind: dict[str, str] = {}
    transient: list[int] = []
    for o0, o1 in out_rows:
        need: dict[str, Range] = {exit_layer.outputs[0]: (o0, o1)}
        entries: dict[str, Range] = {}
        for member in reversed(members):
            rng = need[member.outputs[0]]
            computed[member.name].append(rng)
            for tensor, row_map in maps[member.name].items():
                lo_hi = row_map.needed(*rng)
                reads.setdefault((member.name, tensor), []).append((lo_hi, row_map.padding(*rng)))
                if tensor in internal:
                    need[tensor] = _union(need.get(tensor), lo_hi)
                else:
                    entries[tensor] = _union(entries.get(tensor), lo_hi)
                    if row_map.kind != "broadcast" or tensor not in entry_kind:
                        entry_kind[tensor] = row_map.kind
        for tensor, rng in entries.items():
            entry_rows.setdefault(tensor, []).append(rng)
        transient.append(sum((need[t][1] - need[t][0]) * row_bytes(model.tensors[t]) for t in internal))
    member_plans = []
    for member in members:
        inputs = []
        for tensor in maps[member.name]:
            plan = reads[(member.name, tensor)]
            inputs.append(InputPhases(tensor, maps[member.name][tensor].kind, tuple(r for r, _ in plan),
                                      tuple(p for _, p in plan), (0,) * len(plan), (0,) * len(plan)))
        member_plans.append(LayerPhases(member.name, member.op, layer_height(member), band,
                                        tuple(computed[member.name]), tuple(inputs)))
    group_inputs = tuple(rows_phases(t, entry_kind[t], rows, tensor_rows(model.tensors[t].shape))
                         for t, rows in entry_rows.items())
    plan = LayerPhases(exit_layer.name, "Tile", height, band, out_rows, group_inputs)
    return TilePhases(tuple(layers), exit_layer.outputs[0], plan, tuple(member_plans), tuple(transient))


def window_members(tile: TilePhases, model: CnnModel) -> list[str]:
    """Members reading a window (their band pads matter)."""
    return [n for n in tile.layers if model.layer(n).op in WINDOW_OPS]


def tile_groups(model: CnnModel) -> list[tuple[str, ...]]:
    """Candidate groups for tiling: runs of consecutive row-local layers of one region (at least two),
    each ending where a line buffer is cheapest to keep: after a layer whose output is read by several
    layers (a residual fork), by none or by one outside the run, after a join (a residual sum), or after a
    layer that narrows the channels when a window layer reads the result (an inverted residual block's
    projection). The wide tensors inside a run exist only during its firings. Layers with negative pads
    (crops) end a run without joining it.
    """
    from sbrs.reduction.regions import reducible_regions

    readers: dict[str, list[str]] = {}
    for layer in model.layers:
        for t in dict.fromkeys(layer.inputs):
            readers.setdefault(t, []).append(layer.name)
    groups: list[tuple[str, ...]] = []
    for region in reducible_regions(model):
        members = set(region.layers)
        run: list[str] = []
        for name in region.layers:
            layer = model.layer(name)
            # crops, several outputs and row-local ops the executor runs whole (Slice, Pad) end a run
            if any(p < 0 for p in layer.pads) or len(layer.outputs) != 1 or layer.op not in WINDOW_OPS | ROWWISE_OPS:
                if len(run) > 1:
                    groups.append(tuple(run))
                run = []
                continue
            run.append(name)
            out = layer.outputs[0]
            users = readers.get(out, [])
            data = [t for t in layer.inputs if len(model.tensors[t].shape) == 4]
            channels_in = max((model.tensors[t].shape[1] for t in data), default=0)
            narrows = len(model.tensors[out].shape) == 4 and model.tensors[out].shape[1] < channels_in
            single = users[0] if len(users) == 1 else None
            end = (single is None or single not in members or out in model.graph_outputs
                   or (layer.op in ROWWISE_OPS and len(data) > 1)
                   or (narrows and model.layer(single).op not in ROWWISE_OPS))
            if end:
                if len(run) > 1:
                    groups.append(tuple(run))
                run = []
        if len(run) > 1:
            groups.append(tuple(run))
    return groups
