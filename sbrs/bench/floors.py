"""Figures against committed floors: the verdict of ``benchmarks/guard.py``, kept apart from its timing.

The guard measures figures (ratios of sbrs to plain ONNX Runtime at its better setting, measured in the same
run) and compares each with its bound in ``benchmarks/floors.json``: a ``floor`` for a figure where more is
better (throughput), a ``ceiling`` where less is (switch delay, time to first output, memory). A figure outside
its bound, or one the floors name that the run did not measure, fails the run; a figure the floors do not name
is reported and decides nothing. A figure beyond its bound is measured once more in the same run
(``measured_again``), and the second measurement decides: a change that made sbrs slower falls both times, while
this machine's noise (about ±10 %, which the bounds allow for) seldom takes one figure past its bound twice in a
row. Pure functions on numbers: tests check the verdict by moving a bound, never by timing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
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


@dataclass(frozen=True)
class Retry:
    """A figure beyond its bound when first measured, and its value when measured again (None: the second
    measurement did not give it)."""

    name: str
    first: float
    second: float | None

    def describe(self) -> str:
        second = "not measured" if self.second is None else f"{self.second:.3f}"
        return f"{self.first:.3f}, then {second}"


def measured_again(figures: Mapping[str, float], checks: Sequence[Check],
                   measure: Callable[[list[str]], Mapping[str, float]]) -> tuple[dict[str, float], list[Retry]]:
    """The figures the run is held to: every measured figure beyond its bound in ``checks`` measured once more
    (``measure(names)`` gives new values of at least those names), its second value replacing the first. Returns
    them and what was measured again. ``measure`` is not called where every figure holds its bound."""
    beyond = [entry.name for entry in checks if entry.failed and entry.figure is not None]
    if not beyond:
        return dict(figures), []
    again = measure(beyond)
    final = dict(figures)
    retries = []
    for name in beyond:
        second = again.get(name)
        retries.append(Retry(name, figures[name], second))
        if second is not None:
            final[name] = second
    return final, retries


def verdict(checks: list[Check], retries: Sequence[Retry] = ()) -> str:
    """The guard's one-line verdict: how many figures held their bounds, or which did not; with what was measured
    again (``retries``: the checks are of the second values)."""
    measured = {retry.name: retry for retry in retries}
    failed = [c for c in checks if c.failed]
    if failed:
        return "guard: FAILED: " + "; ".join(
            c.describe() + (f" (measured twice: {measured[c.name].describe()})" if c.name in measured else "")
            for c in failed)
    bounded = sum(1 for c in checks if c.bound is not None)
    unbounded = len(checks) - bounded
    notes = [f"{unbounded} without one"] if unbounded else []
    notes += [f"{retry.name} within it when measured again: {retry.describe()}" for retry in retries]
    return f"guard: {len(checks)} figures, all within their bounds" + (f" ({'; '.join(notes)})" if notes else "")


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
