"""Throughput estimate of a band configuration (thesis Algorithm 9, lines 23-26, ``EvalThroughput``).

The thesis measures the throughput of each candidate on the platform (or asks a third-party tool). Here a
:class:`CostModel` answers ``layer_seconds(layer, band_rows)``: the seconds one frame of ``layer`` takes when
it runs in bands of ``band_rows`` output rows; a scenario's fps is ``1 / Σ layer_seconds``.

- :class:`AnalyticCostModel` (default): ``calls * seconds_per_call + work * seconds_per_mac * factor(band)``
  with ``calls = ceil(H / band)``, ``work`` the layer's multiply-accumulates (element count for element-wise
  layers) and ``factor`` the measured slowdown of banded execution (DESIGN.md: a depthwise conv in 1-row
  bands costs 14x the whole layer, 8-row 3.3x, 16-row 2.4x). ``factor(b, H) = 1 + A (b^-γ - H^-γ) /
  (1 - H^-γ)`` is 1 at ``b = H`` and ``1 + A`` at ``b = 1``; ``A = 13``, ``γ = 0.75`` gives 3.4x and 2.3x
  at 8 and 16 rows of a 112-row layer.
- :class:`MeasuredCostModel`: a table of measured seconds per layer and band height, keyed by the layer's
  configuration (op, shapes, Table 2.1 attributes; not its name, so equal layers of different scenarios
  share a measurement), with the analytic model as fallback. The executor measures once per machine and
  saves the table with :meth:`MeasuredCostModel.save`; :meth:`MeasuredCostModel.load` reads it back.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from sbrs.cache import write_atomic
from sbrs.errors import InputError
from sbrs.model.cnn import CnnModel, Layer, layer_work
from sbrs.reduction.rows import layer_height

if TYPE_CHECKING:
    from sbrs.reduction.tiles import TilePhases

__all__ = [
    "AnalyticCostModel",
    "CostModel",
    "MeasuredCostModel",
    "config_seconds",
    "layer_key",
    "layer_work",
    "model_fps",
    "model_seconds",
    "streams_gain",
    "tile_seconds",
]

#: Throughput of two band streams over one (two frames at once on two one-thread streams against one frame
#: at a time), measured on the 2-core development machine on MobileNetV2 1.0@224 by parts, interleaved runs:
#: 1.75-1.86 at 118 calls a frame, 1.55-1.78 at 203, 1.45-1.76 at 421 and 567. ONNX Runtime releases the GIL
#: inside a call; the Python between calls and the memory bus are what the two streams share.
TWO_STREAM_GAIN = 1.75


@runtime_checkable
class CostModel(Protocol):
    """Seconds per frame of one layer run in bands of ``band_rows`` output rows (``band_rows >= H``: whole)."""

    def layer_seconds(self, layer: Layer, band_rows: int) -> float:
        """Seconds one frame of ``layer`` takes in bands of ``band_rows`` rows."""
        ...


@dataclass(frozen=True)
class AnalyticCostModel:
    """Work times a band-efficiency factor, plus a fixed cost per call (see the module docstring).

    Defaults: ``seconds_per_mac`` from MobileNetV2 (about 0.3 GMAC in 4.5 ms on 2 cores, DESIGN.md);
    ``seconds_per_call`` the 2.5 µs of ``run_with_iobinding``; ``band_overhead`` and ``band_exponent``
    fitted to DESIGN.md's 14x / 3.3x / 2.4x for 1-, 8- and 16-row bands of a depthwise conv.
    """

    seconds_per_mac: float = 1.5e-11
    seconds_per_call: float = 2.5e-6
    band_overhead: float = 13.0
    band_exponent: float = 0.75

    def band_factor(self, band_rows: int, height: int) -> float:
        """Slowdown of ``band_rows``-row bands relative to the whole layer of ``height`` rows (1 when whole)."""
        if height <= 1 or band_rows >= height:
            return 1.0
        tail = height ** -self.band_exponent
        return 1.0 + self.band_overhead * (band_rows ** -self.band_exponent - tail) / (1.0 - tail)

    def layer_seconds(self, layer: Layer, band_rows: int) -> float:
        """``calls * seconds_per_call + work * seconds_per_mac * band_factor`` (0 for data layers)."""
        if layer.type == "data":
            return 0.0
        height = layer_height(layer)
        band = max(1, min(band_rows, height))
        calls = math.ceil(height / band)
        return calls * self.seconds_per_call + layer_work(layer) * self.seconds_per_mac * self.band_factor(band, height)


def layer_key(layer: Layer) -> str:
    """Configuration key of a layer for measured costs: op, shapes and Table 2.1 attributes (not the name), and
    for a quantized or half-precision layer its QDQ node unit and parameter types (an int8 or fp16 convolution
    costs what a float32 one of the same shape does not; float32 layers keep the keys they always had)."""
    dtypes = sorted({p.dtype for p in layer.params} - {"float32", "int64"})
    text = json.dumps([layer.op, layer.input_shapes, layer.output_shapes, layer.kernel, layer.stride, layer.pads,
                       layer.dilation, layer.groups, sorted((k, str(v)) for k, v in layer.attributes.items()),
                       *([[f.op, sorted((k, str(v)) for k, v in f.attributes.items())] for f in layer.fused]
                         if layer.fused else []),
                       *([["qdq", asdict(layer.qdq)]] if layer.qdq is not None else []),
                       *([["dtypes", dtypes]] if dtypes else [])],
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class MeasuredCostModel:
    """Measured seconds per (layer configuration, band rows), falling back to ``fallback`` where unmeasured.

    ``entries`` holds ``(layer_key, band_rows, seconds)`` with ``band_rows`` clipped to the layer height
    (so the whole layer is stored under its height). ``device`` names the machine the numbers belong to.
    """

    entries: tuple[tuple[str, int, float], ...] = ()
    fallback: AnalyticCostModel = field(default_factory=AnalyticCostModel)
    device: str = ""

    def __post_init__(self) -> None:
        entries = tuple(sorted((str(k), int(b), float(s)) for k, b, s in self.entries))
        object.__setattr__(self, "entries", entries)
        # derived lookup table, not a dataclass field (so not in eq, repr or to_dict)
        object.__setattr__(self, "_lookup", {(key, band): seconds for key, band, seconds in entries})

    def _table(self) -> dict[tuple[str, int], float]:
        return dict(self._lookup)  # type: ignore[attr-defined]

    def layer_seconds(self, layer: Layer, band_rows: int) -> float:
        """The measured figure if there is one, else the fallback's estimate."""
        band = max(1, min(band_rows, layer_height(layer)))
        found = self._lookup.get((layer_key(layer), band))  # type: ignore[attr-defined]
        return found if found is not None else self.fallback.layer_seconds(layer, band)

    def tile_layer_seconds(self, layer: Layer, band_rows: int) -> float | None:
        """The measured seconds per frame of ``layer`` as a member of a tiled group whose exit runs in bands of
        ``band_rows`` (halo recomputation included), or None when not measured."""
        return self._lookup.get((TILE + layer_key(layer), band_rows))  # type: ignore[attr-defined]

    def with_measurements(self, measured: Iterable[tuple[Layer, int, float]], *,
                          tile: bool = False) -> MeasuredCostModel:
        """A new model with ``(layer, band_rows, seconds)`` measurements added (later ones replace earlier);
        ``tile``: figures of tiled-group members, keyed by the group's exit band."""
        table = self._table()
        for layer, band_rows, seconds in measured:
            if tile:
                table[(TILE + layer_key(layer), int(band_rows))] = float(seconds)
            else:
                table[(layer_key(layer), max(1, min(band_rows, layer_height(layer))))] = float(seconds)
        return MeasuredCostModel(tuple((k, b, s) for (k, b), s in table.items()), self.fallback, self.device)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dictionary."""
        return {"format": 1, "device": self.device, "fallback": self.fallback.__dict__.copy(),
                "entries": [list(e) for e in self.entries]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MeasuredCostModel:
        """Inverse of :meth:`to_dict`."""
        fallback = AnalyticCostModel(**data.get("fallback", {}))
        return cls(tuple((str(k), int(b), float(s)) for k, b, s in data.get("entries", ())), fallback,
                   str(data.get("device", "")))

    def save(self, path: str | Path) -> Path:
        """Write the table as JSON (atomically)."""
        return write_atomic(Path(path), json.dumps(self.to_dict(), sort_keys=True, indent=1).encode())

    @classmethod
    def load(cls, path: str | Path) -> MeasuredCostModel:
        """Read a table written by :meth:`save`; a missing or malformed file is an ``InputError``."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise InputError(f"not a readable cost table ({type(exc).__name__}: {exc})", file=str(path)) from None


TILE = "tile:"


def tile_seconds(model: CnnModel, tile: TilePhases, cost: CostModel) -> float:
    """Seconds per frame of a tiled group: per member, the measured tile figure when the cost model has one,
    else its band cost at the rows it computes per firing times the recomputation (rows computed / height)."""
    total = 0.0
    measured = getattr(cost, "tile_layer_seconds", None)
    for member in tile.members:
        layer = model.layer(member.layer)
        value = measured(layer, tile.plan.band_rows) if measured is not None else None
        if value is None:
            rows = sum(o1 - o0 for o0, o1 in member.out_rows)
            band = max(1, rows // max(1, len(member.out_rows)))
            value = cost.layer_seconds(layer, band) * rows / max(1, member.height)
        total += value
    return total


def config_seconds(model: CnnModel, bands: Mapping[str, int], tiles: Sequence[TilePhases], cost: CostModel) -> float:
    """Seconds per frame of ``model`` with ``bands`` and tiled groups ``tiles`` (their members' bands unused)."""
    members = {name for tile in tiles for name in tile.layers}
    return sum(cost.layer_seconds(layer, bands.get(layer.name, layer_height(layer))) for layer in model.layers
               if layer.name not in members) + sum(tile_seconds(model, tile, cost) for tile in tiles)


def model_seconds(model: CnnModel, bands: Mapping[str, int], cost: CostModel) -> float:
    """Seconds per frame of ``model`` with ``bands`` (missing layers: whole), the sum over its layers."""
    return sum(cost.layer_seconds(layer, bands.get(layer.name, layer_height(layer))) for layer in model.layers)


def model_fps(model: CnnModel, bands: Mapping[str, int], cost: CostModel) -> float:
    """Frames per second of ``model`` with ``bands`` under ``cost``."""
    seconds = model_seconds(model, bands, cost)
    return 1.0 / seconds if seconds > 0 else math.inf


def streams_gain(streams: int, cores: int | None = None) -> float:
    """The throughput ``streams`` band streams give over one on a machine of ``cores`` cores (default: this
    one's): :data:`TWO_STREAM_GAIN` for two streams on at least two cores; 1 otherwise, where a second stream
    would only cost its buffers."""
    import os

    cores = (os.cpu_count() or 1) if cores is None else cores
    return TWO_STREAM_GAIN if streams == 2 and cores >= 2 else 1.0
