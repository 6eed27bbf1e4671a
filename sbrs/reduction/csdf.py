"""CNN-to-CSDF conversion (thesis Algorithm 4) with tokens = rows.

Every layer ``l_i`` becomes an actor ``a_i`` with ``P_i = Φ_i`` phases (Algorithm 4, lines 2-10); every edge
``e_ij`` becomes a FIFO channel ``c_ij`` (lines 14-16); a layer whose phases overlap on an input gets a
self-loop ``c_ii`` that carries the overlapping rows from one firing to the next (lines 11-13). The thesis
creates the self-loop when ``s_i < Θ_i.h``; here it is created per input tensor whenever some phase keeps
rows for the next one, which covers that case, a band taller than one row, and a one-row input broadcast to
every phase (the SE gate of ``Mul(x, s)``).

Production/consumption sequences (lines 17-36) are counted in rows; multiply by :attr:`Channel.row_elements`
for the thesis' element counts (``V_23 = [384, 192, 192, 256]`` of Section 4.5.2 is ``[6, 3, 3, 4]`` rows of
``16 x 4`` elements). What the thesis leaves implicit is explicit here, per phase, in
:class:`~sbrs.reduction.phases.LayerPhases`:

- padding at the first and last phase (lines 27-28, 32, 36): zero rows (positive pads) are not taken from
  the channel; cropped rows (negative pads) are taken and dropped, so ``v(1)`` includes the top crop and the
  last phase takes every remaining row (bottom crop, or rows that a stride skips at the end);
- strides and pooling: a band of ``b`` output rows reads ``(b - 1) * s + (kh - 1) * d + 1`` input rows;
- multi-input layers (Add, Sub, Mul, Div, Concat): each input gets its own channel, read at the same rows;
- residual skip edges: the skip tensor's channel keeps every row until the join consumes it, so its buffer
  is the lag between the fork and the join, found by the schedule (:mod:`sbrs.reduction.schedule`);
- layers that need their whole input: one phase that consumes every row (``v(1) = X_j.h``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sbrs.errors import InputError
from sbrs.model.cnn import CnnModel
from sbrs.reduction.phases import LayerPhases, layer_phases, normalize_bands
from sbrs.reduction.rows import row_bytes, row_elements, tensor_rows
from sbrs.reduction.tiles import TilePhases, tile_phases

__all__ = ["Actor", "Channel", "CsdfGraph", "cnn_to_csdf"]


@dataclass(frozen=True)
class Actor:
    """CSDF actor ``a_i`` of layer ``l_i``: ``phases`` firings per frame, each one band of ``band_rows`` rows."""

    name: str
    op: str
    phases: int
    band_rows: int
    height: int


@dataclass(frozen=True)
class Channel:
    """FIFO channel ``c_ij`` carrying rows of ``tensor`` from actor ``src`` to actor ``dst``.

    ``production[p]`` (``U_ij``) and ``consumption[p]`` (``V_ij``) are rows per phase of the source and the
    sink. A self-loop (``src == dst``, ``self_loop``) holds the rows that ``dst`` keeps between firings for
    its input ``tensor``. ``rows`` is the tensor height (tokens per frame of a FIFO channel).
    """

    id: str
    src: str
    dst: str
    tensor: str
    self_loop: bool
    production: tuple[int, ...]
    consumption: tuple[int, ...]
    rows: int
    row_elements: int
    row_bytes: int

    @property
    def production_elements(self) -> tuple[int, ...]:
        """``U_ij`` in elements, as the thesis writes it (Algorithm 4, lines 22, 26)."""
        return tuple(r * self.row_elements for r in self.production)

    @property
    def consumption_elements(self) -> tuple[int, ...]:
        """``V_ij`` in elements, as the thesis writes it (Algorithm 4, lines 23, 27-36)."""
        return tuple(r * self.row_elements for r in self.consumption)

    @property
    def consistent(self) -> bool:
        """Tokens produced per frame equal tokens consumed per frame (the CSDF balance of one iteration)."""
        return sum(self.production) == sum(self.consumption)


@dataclass(frozen=True)
class CsdfGraph:
    """``G(A, C)`` of Algorithm 4 plus the per-phase row plan of every layer (for an executor).

    ``cuts``: tensors at which the CNN is partitioned (thesis Section 6.4, partitions ``P_p``): a cut
    tensor's consumers start only once its producer has fired its last phase, so the partitions before and
    after it run one after the other and their line buffers are never live at once (Algorithm 10, lines
    2-9: each partition's minimum buffers, then buffer reuse across partitions). The cut tensor itself is
    held whole. ``tiles``: groups of layers that fire as one actor (named after the group's exit layer),
    recomputing the overlap of consecutive bands (:mod:`sbrs.reduction.tiles`).
    """

    name: str
    actors: tuple[Actor, ...]
    channels: tuple[Channel, ...]
    layers: tuple[LayerPhases, ...]
    cuts: tuple[str, ...] = ()
    tiles: tuple[TilePhases, ...] = ()

    def tile(self, actor: str) -> TilePhases | None:
        """The tiled group whose actor is ``actor`` (its exit layer), if any."""
        for tile in self.tiles:
            if tile.plan.layer == actor:
                return tile
        return None

    def actor(self, name: str) -> Actor:
        """The actor called ``name``."""
        for actor in self.actors:
            if actor.name == name:
                return actor
        raise KeyError(name)

    def channel(self, src: str, dst: str, tensor: str | None = None) -> Channel:
        """The channel from ``src`` to ``dst`` (``src == dst``: the self-loop), optionally of ``tensor``."""
        for channel in self.channels:
            if channel.src == src and channel.dst == dst and tensor in (None, channel.tensor):
                return channel
        raise KeyError(f"{src}->{dst}")

    def layer(self, name: str) -> LayerPhases:
        """The row plan of layer ``name``."""
        for plan in self.layers:
            if plan.layer == name:
                return plan
        raise KeyError(name)

    @property
    def phases(self) -> dict[str, int]:
        """``Φ``: phases of every actor."""
        return {a.name: a.phases for a in self.actors}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dictionary."""
        return {
            "name": self.name,
            "actors": [asdict(a) for a in self.actors],
            "channels": [asdict(c) for c in self.channels],
            "layers": [plan.to_dict() for plan in self.layers],
            "cuts": list(self.cuts),
            "tiles": [{"layers": list(t.layers), "band_rows": t.plan.band_rows} for t in self.tiles],
        }

    def to_json(self) -> str:
        """JSON text of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), sort_keys=True)


def cnn_to_csdf(model: CnnModel, bands: Mapping[str, int] | None = None, *, name: str | None = None,
                cuts: Iterable[str] = (), tiles: Iterable[tuple[Sequence[str], int]] = ()) -> CsdfGraph:
    """Thesis Algorithm 4: the CSDF graph of ``model`` processing ``bands[layer]`` output rows per phase.

    ``bands`` maps layer names to band heights (missing: the whole height; see
    :func:`~sbrs.reduction.phases.normalize_bands`). Actors come in the model's topological order.
    ``cuts``: tensors where the CNN is partitioned (:class:`CsdfGraph`); an unknown tensor or a graph input
    is an ``InputError``; cuts where nothing runs by parts on either side change nothing and are dropped.
    ``tiles``: ``(layers, band_rows)`` groups fired as one actor each (:mod:`sbrs.reduction.tiles`); a layer
    in two groups is an ``InputError``.
    """
    bands = normalize_bands(model, bands or {})
    tiled = tuple(tile_phases(model, list(layers), band) for layers, band in tiles)
    actor_of = {layer.name: layer.name for layer in model.layers}
    for tile in tiled:
        for member in tile.layers:
            if actor_of[member] != member:
                raise InputError(f"layer '{member}' is in two tile groups", field="tiles")
            actor_of[member] = tile.plan.layer
    plans = {layer.name: layer_phases(model, layer, bands[layer.name]) for layer in model.layers
             if actor_of[layer.name] == layer.name}
    for tile in tiled:
        plans[tile.plan.layer] = tile.plan
    kept_layers = [layer for layer in model.layers if layer.name in plans]
    actors = tuple(Actor(layer.name, plans[layer.name].op, plans[layer.name].phases, plans[layer.name].band_rows,
                         plans[layer.name].height) for layer in kept_layers)  # lines 2-10
    producer = {tensor: actor_of[layer.name] for layer in model.layers for tensor in layer.outputs if tensor}
    channels: list[Channel] = []
    for layer in kept_layers:  # lines 11-13: self-loops, one per input tensor whose phases overlap
        plan = plans[layer.name]
        for item in plan.inputs:
            if any(item.kept):
                spec = model.tensors[item.tensor]
                channels.append(Channel(f"{layer.name}->{layer.name}:{item.tensor}", layer.name, layer.name,
                                        item.tensor, True, item.kept, item.reuse, tensor_rows(spec.shape),
                                        row_elements(spec.shape), row_bytes(spec)))
    seen: set[tuple[str, str, str]] = set()
    for edge in model.edges:  # lines 14-16 and 24-36
        src, dst = actor_of[edge.src], actor_of[edge.dst]
        if producer.get(edge.tensor) != src or src == dst or (src, dst, edge.tensor) in seen:
            continue  # inside a tile group, or a tensor a group reads twice
        seen.add((src, dst, edge.tensor))
        src_plan, dst_plan = plans[src], plans[dst]
        spec = model.tensors[edge.tensor]
        rows = tensor_rows(spec.shape)
        production = src_plan.produced if src_plan.phases > 1 else (rows,)
        channel_id = edge.name if (src, dst) == (edge.src, edge.dst) else f"{src}->{dst}:{edge.tensor}"
        channels.append(Channel(channel_id, src, dst, edge.tensor, False, production,
                                dst_plan.input(edge.tensor).consumed, rows,
                                row_elements(spec.shape), row_bytes(spec)))
    cut_set = tuple(dict.fromkeys(cuts))
    unknown = [t for t in cut_set if t not in producer]
    if unknown:
        raise InputError(f"cut tensor(s) {', '.join(unknown[:5])} are produced by no layer of '{model.name}'",
                         field="cuts")
    fifo = [c for c in channels if not c.self_loop]
    useful = tuple(t for t in cut_set if plans[producer[t]].phases > 1
                   and any(plans[c.dst].phases > 1 for c in fifo if c.tensor == t))
    return CsdfGraph(name or model.name, actors, tuple(channels), tuple(plans[layer.name] for layer in kept_layers),
                     useful, tiled)
