"""Phases of every layer (thesis Algorithm 3) generalised to band heights, and the per-phase row plan.

Thesis Algorithm 3 gives a layer one phase when its output depends on its whole input (lines 3-4) and
otherwise ``Y_i.h`` phases of one output row each (lines 5-8). Algorithm 10, Equation 6.1, chooses between
the two per layer with a 0/1 gene. Here the choice is generalised to a *band height*: a layer produces
``band`` output rows per phase, ``1 <= band <= Y_i.h``, so it has ``ceil(Y_i.h / band)`` phases (the last
band may be shorter). ``band = 1`` everywhere is Algorithm 3; ``band = Y_i.h`` is one phase.

:func:`layer_phases` turns the bands into what an executor follows for each phase ``k`` of a layer: the
output rows it produces, for every input the rows it reads and the padding rows the band adds (top/bottom
padding, only at the first and last phases, Algorithm 4, lines 27-28), the new rows it takes from the
input channel (consumption ``v(k)``) and the rows it keeps for the next phase (the self-loop ``c_ii`` of
Algorithm 4, lines 11-13 and 21-23: the overlap when the kernel is taller than the stride).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from sbrs.errors import InputError
from sbrs.model.cnn import INPUT_OP, CnnModel, Layer
from sbrs.reduction.rows import RowMap, is_row_local, layer_height, layer_row_maps

__all__ = [
    "InputPhases",
    "LayerPhases",
    "bands_from_phases",
    "derive_phases",
    "full_bands",
    "layer_phases",
    "maximal_bands",
    "normalize_bands",
    "phases_of",
]


def derive_phases(model: CnnModel, *, stream_input: bool = True) -> dict[str, int]:
    """Thesis Algorithm 3 (lines 1-10): ``Φ_i = 1`` for layers that need their whole input, else ``Y_i.h``.

    Line 3's test "size of Θ_i = size of X_i" is generalised to "some output row depends on all input rows"
    (:func:`~sbrs.reduction.rows.is_row_local`). ``stream_input`` lets the graph input arrive row by row, as
    layer ``l_1`` of thesis Figure 4.1 (``Φ_1 = 32``); with ``stream_input=False`` the frame is given whole.
    """
    phases: dict[str, int] = {}
    for layer in model.layers:
        local = is_row_local(model, layer) and (stream_input or layer.op != INPUT_OP)
        h_min = 1 if local else layer_height(layer)  # Algorithm 3, lines 3-6
        phases[layer.name] = -(-layer_height(layer) // h_min)  # line 8
    return phases


def full_bands(model: CnnModel) -> dict[str, int]:
    """One phase per layer: every band is the whole output height (no processing by parts)."""
    return {layer.name: layer_height(layer) for layer in model.layers}


def maximal_bands(model: CnnModel, *, stream_input: bool = False) -> dict[str, int]:
    """Band 1 for every row-local layer (Algorithm 3 applied everywhere it can be), full for the others."""
    return bands_from_phases(model, derive_phases(model, stream_input=stream_input))


def bands_from_phases(model: CnnModel, phases: Mapping[str, int]) -> dict[str, int]:
    """Band heights ``ceil(Y_i.h / Φ_i)`` for given numbers of phases (Equation 6.1 with any ``Φ_i``)."""
    bands: dict[str, int] = {}
    for layer in model.layers:
        height = layer_height(layer)
        count = int(phases.get(layer.name, 1))
        if count < 1:
            raise InputError(f"layer '{layer.name}': number of phases must be >= 1, got {count}", field="phases")
        bands[layer.name] = -(-height // min(count, height))
    return normalize_bands(model, bands)


def normalize_bands(model: CnnModel, bands: Mapping[str, int]) -> dict[str, int]:
    """Every layer's band height: given values clipped to ``[1, Y_i.h]``, full height where none is given.

    A layer that is not row-local always gets its full height (one phase). Unknown layer names and bands
    below 1 are an ``InputError``.
    """
    names = {layer.name for layer in model.layers}
    unknown = sorted(set(bands) - names)
    if unknown:
        raise InputError(f"unknown layer(s) {', '.join(unknown[:5])} in model '{model.name}'", field="band_rows")
    result: dict[str, int] = {}
    for layer in model.layers:
        height = layer_height(layer)
        band = int(bands.get(layer.name, height))
        if band < 1:
            raise InputError(f"layer '{layer.name}': band height must be >= 1 row, got {band}", field="band_rows")
        result[layer.name] = min(band, height) if is_row_local(model, layer) else height
    return result


def phases_of(bands: Mapping[str, int], model: CnnModel) -> dict[str, int]:
    """Number of phases ``ceil(Y_i.h / band_i)`` of every layer."""
    return {layer.name: -(-layer_height(layer) // bands[layer.name]) for layer in model.layers}


@dataclass(frozen=True)
class InputPhases:
    """What phase ``k`` (index ``k-1`` of each tuple) of a layer does with one input tensor.

    ``rows[k]``: input rows ``[lo, hi)`` the band reads (``X_ik``); ``pads[k]``: padding rows
    ``(top, bottom)`` the band adds around them (its top/bottom ``pads`` attribute); ``consumed[k]``: new
    rows taken from the input channel (``v_ij(k)``, Algorithm 4, lines 27-36: the last phase takes every
    remaining row, cropped ones included); ``kept[k]``: rows kept after phase ``k`` for phase ``k+1``
    (``u_ii(k)`` of the self-loop, Algorithm 4, line 22; 0 at the last).
    """

    tensor: str
    kind: str
    rows: tuple[tuple[int, int], ...]
    pads: tuple[tuple[int, int], ...]
    consumed: tuple[int, ...]
    kept: tuple[int, ...]

    @property
    def reuse(self) -> tuple[int, ...]:
        """Rows read from the self-loop at each phase (``v_ii(k)``, Algorithm 4, line 23)."""
        return (0, *self.kept[:-1])


@dataclass(frozen=True)
class LayerPhases:
    """The phases of one layer: band height, output rows per phase and what each phase reads."""

    layer: str
    op: str
    height: int
    band_rows: int
    out_rows: tuple[tuple[int, int], ...]
    inputs: tuple[InputPhases, ...]

    @property
    def phases(self) -> int:
        """``Φ_i``: number of phases."""
        return len(self.out_rows)

    @property
    def produced(self) -> tuple[int, ...]:
        """Rows written per phase (the production sequence ``U_ij`` of every output channel, line 26)."""
        return tuple(o1 - o0 for o0, o1 in self.out_rows)

    def input(self, tensor: str) -> InputPhases:
        """The plan of input ``tensor``."""
        for item in self.inputs:
            if item.tensor == tensor:
                return item
        raise KeyError(tensor)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dictionary."""
        return asdict(self) | {"phases": self.phases}


def _input_phases(tensor: str, row_map: RowMap, out_rows: tuple[tuple[int, int], ...]) -> InputPhases:
    rows = tuple(row_map.needed(o0, o1) for o0, o1 in out_rows)
    pads = tuple(row_map.padding(o0, o1) for o0, o1 in out_rows)
    count = len(out_rows)
    consumed: list[int] = []
    kept: list[int] = []
    taken = 0  # rows taken from the channel so far (the channel's read position)
    for k in range(count):
        hi = row_map.in_rows if k == count - 1 else max(taken, rows[k][1])
        consumed.append(hi - taken)
        taken = hi
        if k < count - 1:
            next_lo = rows[k + 1][0]
            kept.append(max(0, taken - next_lo))
        else:
            kept.append(0)
    return InputPhases(tensor, row_map.kind, rows, pads, tuple(consumed), tuple(kept))


def layer_phases(model: CnnModel, layer: Layer, band: int) -> LayerPhases:
    """The row plan of ``layer`` producing ``band`` rows per phase (band already normalised)."""
    height = layer_height(layer)
    out_rows = tuple((o0, min(o0 + band, height)) for o0 in range(0, height, band)) or ((0, 0),)
    maps = layer_row_maps(model, layer)
    inputs = tuple(_input_phases(name, row_map, out_rows) for name, row_map in maps.items())
    return LayerPhases(layer.name, layer.op, height, band, out_rows, inputs)
