"""Figures against committed floors: the verdict of ``benchmarks/guard.py``, kept apart from its timing.

The guard measures figures (ratios of sbrs to plain ONNX Runtime at its better setting, measured in the same
run) and compares each with its bound in ``benchmarks/floors.json``: a ``floor`` for a figure where more is
better (throughput), a ``ceiling`` where less is (switch delay, time to first output, memory). A figure outside
its bound, or one the floors name that the run did not measure, fails the run; a figure the floors do not name
is reported and decides nothing. Pure functions on numbers: tests check the verdict by moving a bound, never
by timing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: How far under the lower of two quiet runs a floor is set (and over the higher, a ceiling): this machine's
#: run-to-run noise on the ratios (docs/MEASUREMENTS.md).
DEFAULT_MARGIN = 0.10


@dataclass(frozen=True)
class Bound:
    """A figure's committed bound: ``kind`` ``floor`` (the figure must not fall below ``value``) or ``ceiling``
    (must not rise above it)."""

    kind: str
    value: float

    def holds(self, figure: float) -> bool:
        return figure >= self.value if self.kind == "floor" else figure <= self.value

    def describe(self, figure: float) -> str:
        sign = "<" if self.kind == "floor" else ">"
        return f"{figure:.3f} {sign} {self.kind} {self.value:.3f}"


@dataclass(frozen=True)
class Check:
    """One figure of a run against its bound (None: the floors do not name it)."""

    name: str
    figure: float | None
    bound: Bound | None

    @property
    def failed(self) -> bool:
        if self.bound is None:
            return False
        return self.figure is None or not self.bound.holds(self.figure)

    def describe(self) -> str:
        if self.figure is None:
            return f"{self.name} not measured (its {self.bound.kind if self.bound else 'bound'} is committed)"
        if self.bound is None:
            return f"{self.name} {self.figure:.3f} (no bound)"
        return f"{self.name} {self.bound.describe(self.figure)}"


def read_bounds(data: Mapping[str, Any]) -> dict[str, Bound]:
    """The bounds of a floors file's ``figures`` (``{"name": {"floor": 0.86}}`` or ``{"ceiling": 0.9}``);
    ``ValueError`` naming an entry that gives neither or both."""
    bounds: dict[str, Bound] = {}
    for name, entry in data.get("figures", {}).items():
        kinds = [kind for kind in ("floor", "ceiling") if kind in entry]
        if len(kinds) != 1:
            raise ValueError(f"floors: figure {name!r} needs exactly one of 'floor' or 'ceiling'")
        bounds[name] = Bound(kinds[0], float(entry[kinds[0]]))
    return bounds


def load_bounds(path: str | Path) -> dict[str, Bound]:
    return read_bounds(json.loads(Path(path).read_text(encoding="utf-8")))


def check(figures: Mapping[str, float], bounds: Mapping[str, Bound], *, only: str | None = None) -> list[Check]:
    """Every measured figure and every bound, checked (the figures' order first, then bounds not measured).
    ``only``: a prefix of the names to hold the run to (``--quick`` measures a subset; bounds outside it are not
    missing)."""
    checks = [Check(name, value, bounds.get(name)) for name, value in figures.items()]
    checks += [Check(name, None, bound) for name, bound in bounds.items()
               if name not in figures and (only is None or _in_scope(name, only))]
    return checks


def _in_scope(name: str, scope: str) -> bool:
    return any(name.startswith(prefix) for prefix in scope.split(","))


def verdict(checks: list[Check]) -> str:
    """The guard's one-line verdict: how many figures held their bounds, or which did not."""
    failed = [c for c in checks if c.failed]
    if failed:
        return "guard: FAILED: " + "; ".join(c.describe() for c in failed)
    bounded = sum(1 for c in checks if c.bound is not None)
    unbounded = len(checks) - bounded
    return (f"guard: {len(checks)} figures, all within their bounds"
            + (f" ({unbounded} without one)" if unbounded else ""))


def bounds_from_runs(runs: list[Mapping[str, float]], kinds: Mapping[str, str],
                     margin: float = DEFAULT_MARGIN) -> dict[str, dict[str, float]]:
    """Bounds for the figures measured in every one of ``runs``: a floor ``margin`` under the lowest run, a
    ceiling ``margin`` over the highest (``kinds[name]``: ``floor`` or ``ceiling``), rounded to 3 places."""
    names = [name for name in runs[0] if all(name in run for run in runs)]
    bounds: dict[str, dict[str, float]] = {}
    for name in names:
        values = [run[name] for run in runs]
        if kinds[name] == "floor":
            bounds[name] = {"floor": round(min(values) * (1 - margin), 3)}
        else:
            bounds[name] = {"ceiling": round(max(values) * (1 + margin), 3)}
    return bounds
