"""Where processing by parts can happen: maximal regions of row-local layers between whole-tensor layers.

A band can only flow through layers whose output rows depend on a bounded window of input rows
(:func:`~sbrs.reduction.rows.is_row_local`). A layer that needs its whole input (Gemm, global pooling,
Flatten, ...; thesis Algorithm 3, lines 3-4) ends every band pipeline that feeds it, and what it produces
starts whole. A :class:`Region` is a maximal connected set of row-local layers that an executor can run
band by band (its firings are a subsequence of the schedule), with:

- ``entries``: tensors its layers read that come from outside (a whole-tensor layer, the graph input, or an
  earlier region); they are complete before the region starts, except that a streamed input arrives by rows;
- ``broadcast``: the entries read whole at every phase (a one-row tensor, e.g. the SE gate of ``Mul(x, s)``);
- ``exits``: tensors its layers produce that are read outside it (complete when the region ends).

Regions are *convex*: no path leaves a region and comes back into it. To guarantee it, every layer gets a
level, the largest number of whole-tensor layers on a path from a graph input to it, and a region joins
only row-local layers of one level (a path through a whole-tensor layer raises the level). So in
EfficientNet's SE blocks ``x -> GlobalAveragePool -> ... -> Mul(x, s)``, the layers after the Mul start a new
region and ``x`` is an exit of the region before it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from sbrs.model.cnn import INPUT_OP, CnnModel
from sbrs.reduction.rows import is_row_local, layer_row_maps

__all__ = ["Region", "reducible_regions"]


@dataclass(frozen=True)
class Region:
    """A maximal convex set of row-local layers (topological order) and its boundary tensors."""

    index: int
    level: int
    layers: tuple[str, ...]
    entries: tuple[str, ...]
    broadcast: tuple[str, ...]
    exits: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dictionary."""
        return asdict(self)

    def to_json(self) -> str:
        """JSON text of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), sort_keys=True)


def reducible_regions(model: CnnModel, *, stream_input: bool = False) -> list[Region]:
    """The regions of ``model`` that can be processed by parts, in topological order of their first layer.

    ``stream_input`` makes the graph ``Input`` layers row-local (a frame arriving row by row).
    """
    producer = {t: layer.name for layer in model.layers for t in layer.outputs if t}
    local = {layer.name: is_row_local(model, layer) and (stream_input or layer.op != INPUT_OP)
             for layer in model.layers}
    level: dict[str, int] = {}
    for layer in model.layers:
        level[layer.name] = max((level[producer[t]] + (0 if local[producer[t]] else 1)
                                 for t in layer.inputs if t in producer), default=0)
    parent = {name: name for name, ok in local.items() if ok}

    def find(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for edge in model.edges:
        if local.get(edge.src) and local.get(edge.dst) and level[edge.src] == level[edge.dst]:
            a, b = find(edge.src), find(edge.dst)
            if a != b:
                parent[b] = a
    groups: dict[str, list[str]] = {}
    for layer in model.layers:
        if local[layer.name]:
            groups.setdefault(find(layer.name), []).append(layer.name)
    member = {name: root for root, names in groups.items() for name in names}
    readers: dict[str, list[str]] = {}
    for layer in model.layers:
        for t in layer.inputs:
            readers.setdefault(t, []).append(layer.name)
    regions: list[Region] = []
    for index, (root, names) in enumerate(groups.items()):
        entries: dict[str, None] = {}
        broadcast: dict[str, None] = {}
        exits: dict[str, None] = {}
        for name in names:
            layer = model.layer(name)
            maps = layer_row_maps(model, layer)
            for t in layer.inputs:
                if member.get(producer.get(t, "")) != root:
                    entries.setdefault(t, None)
                    if t in maps and maps[t].kind == "broadcast":
                        broadcast.setdefault(t, None)
            for t in layer.outputs:
                if t and (t in model.graph_outputs or any(member.get(r) != root for r in readers.get(t, ()))):
                    exits.setdefault(t, None)
        regions.append(Region(index, level[names[0]], tuple(names), tuple(entries), tuple(broadcast), tuple(exits)))
    return regions
