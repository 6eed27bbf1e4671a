"""Execution units or one graph (``runtime.session: auto``), measured per app when the build is made.

An app runs either as execution units, an ONNX Runtime session each (``sbrs.compile.units``), or as one graph on
one session (``sbrs.compile.one_graph``). One graph holds each weight once in one session and one provider instance
(on a GPU about 140 MiB of provider state per session saved: docs/MEASUREMENTS.md, "On a GPU"; on the CPU 1-2 MB,
"One graph, one session"), but its ``If`` kernels cost time at their branches' edges (cifar10 1.01-1.15 of the
scenario's own model on this CPU) and a switch under SBRS-TP waits for the whole frame in flight, where units
start the new frame after the step in flight (drone: 62.6 against 43.6 ms; since 2026-11-29 they stop that step at
its next node instead, ``Runtime._interrupt_step``).

Under ``auto`` the build makes both forms of the app, times each scenario's frame both ways on this machine
(``measure_session``: the units called in order on random inputs of their shapes, the one graph called with the
scenario's index; ``sbrs.compile.unit_streams.compare_chains``: interleaved blocks, each after an untimed frame, the
best of each side; the figures kept per machine and files by ``sbrs.compile.timing_cache``). Medians of blocks
without the untimed frame gave drone's one graph 0.82x the units' frame time (accurate: 11.9 against 19.2 ms)
where ``sbrs bench`` ran both at 0.88-0.94 of plain ONNX Runtime (2026-11-29).
``choose_session`` decides on those figures:

    units where one graph's frames take more than ``MARGIN`` (1.05) times the units' (geometric mean over the
    scenarios) or any scenario's more than ``WORST_MARGIN`` (1.15) times; one graph where they take at most
    1 / ``MARGIN`` times (it runs faster and holds less); between the two (as fast, within the noise of such a
    measurement), units where the units cut some scenario's frame into steps (on a GPU provider: and that frame
    on one graph takes more than ``MAX_SWITCH_WAIT_S``, 20 ms), else one graph.

Frame time comes first: it is what the app runs all the time, and one graph measured clearly faster also switches
about as fast (a switch waits for the rest of the old frame, then runs a new frame, both shorter). On a tie what
each form saves decides. SBRS-TP starts the new frame within the old frame's step in flight on units, after the
whole frame on one graph: on this CPU drone's switch took 0.97 of plain ONNX Runtime's Δ on one graph against
0.78-0.88 on units, its frames as fast both ways (2026-11-29; docs/MEASUREMENTS.md), while one graph saved 1-2 MB of
its 67-69. So on the CPU a tie keeps units wherever they cut a frame into steps. On a GPU provider one graph saves
a provider instance per session (about 140 MiB each, "On a GPU"), and on frames of a few milliseconds (every example
app there) a whole frame's wait is within the noise of a switch: a tie keeps units there only where a frame on
one graph takes longer than ``MAX_SWITCH_WAIT_S``.

Units are kept without measuring where one graph cannot run the app (``forced_units``): a memory limit (processing
by parts), ``on_switch: resume`` (a frame is one call, with no shared step to resume after), two streams (asked, or
measured better for the units: the one graph runs one frame at a time), or the scenarios cannot share one graph
(the one graph's own ``InputError``: inputs of different element types, operator sets). On a GPU provider the rule
makes one graph the app's form wherever it measures as fast, but that path has not been run here (no GPU was
available to this work).

The choice and its figures go in the build's manifest (``session``); ``runtime.session: units`` or ``one`` is
never measured. Timing decides only what the build records, never a test (tests check ``choose_session`` on
figures).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sbrs.compile.unit_streams import compare_chains

#: One graph's frames may take this many times the units' (geometric mean over the scenarios) ...
MARGIN = 1.05
#: ... and no scenario's more than this many times.
WORST_MARGIN = 1.15
#: A switch may wait for a whole frame on one graph of up to this long where units would cut it into steps.
MAX_SWITCH_WAIT_S = 0.02


@dataclass(frozen=True)
class ScenarioSession:
    """A scenario's frame both ways: seconds per frame on its execution units called in order (``units_s``, in
    ``steps`` units) and on the one graph (``one_s``)."""

    units_s: float
    one_s: float
    steps: int

    @property
    def ratio(self) -> float:
        """One graph's time over the units' (below 1: one graph is faster)."""
        return self.one_s / self.units_s

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScenarioSession:
        return cls(float(data["units_s"]), float(data["one_s"]), int(data["steps"]))

    def to_dict(self) -> dict[str, Any]:
        return {"units_s": round(self.units_s, 7), "one_s": round(self.one_s, 7), "steps": self.steps,
                "ratio": round(self.ratio, 4)}


@dataclass(frozen=True)
class SessionChoice:
    """How a build runs the app and why: ``session`` (``units`` or ``one``), ``asked`` (app.yaml's
    ``runtime.session``), ``reason`` (one sentence) and, where measured, ``figures`` per scenario with their
    ``ratio`` (geometric mean of the scenarios' ratios) and the machine's ``load`` as the measuring began."""

    session: str
    asked: str
    reason: str
    figures: Mapping[str, ScenarioSession] | None = None
    load: float | None = None

    @property
    def ratio(self) -> float | None:
        if not self.figures:
            return None
        return statistics.geometric_mean(f.ratio for f in self.figures.values())

    def describe(self) -> str:
        """One line for people: how the app runs and why (``sbrs inspect``, ``sbrs build``)."""
        form = "as one graph on one ONNX Runtime session" if self.session == "one" else \
            "as execution units, an ONNX Runtime session each"
        if self.asked != "auto":
            return f"runs {form} (runtime.session: {self.asked})"
        load = "" if self.load is None else f", measured at load average {self.load:.1f}"
        return f"runs {form} (runtime.session: auto; {self.reason}{load})"

    def to_dict(self) -> dict[str, Any]:
        ratio = self.ratio
        return {"session": self.session, "asked": self.asked, "reason": self.reason,
                "ratio": None if ratio is None else round(ratio, 4), "load": self.load,
                "figures": None if self.figures is None else {s: f.to_dict() for s, f in self.figures.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionChoice:
        figures = data.get("figures")
        return cls(str(data["session"]), str(data["asked"]), str(data["reason"]),
                   None if figures is None else {s: ScenarioSession.from_dict(f) for s, f in figures.items()},
                   None if data.get("load") is None else float(data["load"]))


def asked_choice(asked: str) -> SessionChoice:
    """The form an app asks for by name (``runtime.session: units`` or ``one``): never measured."""
    return SessionChoice(asked, asked, f"runtime.session: {asked}")


def forced_units(why: str) -> SessionChoice:
    """Units under ``auto`` where one graph cannot run the app (``why``: one clause), not measured."""
    return SessionChoice("units", "auto", f"{why}: units, not measured")


def choose_session(figures: Mapping[str, ScenarioSession], load: float | None = None, *,
                   gpu: bool = False) -> SessionChoice:
    """The rule of the module docstring on measured ``figures`` (``load``: the machine's, recorded beside them;
    ``gpu``: the app runs on a GPU provider): one graph or units, with the reason."""
    ratio = SessionChoice("units", "auto", "", figures).ratio or 1.0
    worst_name, worst = max(figures.items(), key=lambda item: item[1].ratio)
    said = f"one graph took {ratio:.2f}x the units' frame time"
    if ratio > MARGIN:
        return SessionChoice("units", "auto", f"{said}, over {MARGIN:.2f}x", dict(figures), load)
    if worst.ratio > WORST_MARGIN:
        return SessionChoice("units", "auto", f"{said}, but {worst.ratio:.2f}x on {worst_name}, over "
                                              f"{WORST_MARGIN:.2f}x", dict(figures), load)
    longest_name, longest = max(figures.items(), key=lambda item: item[1].one_s)
    if ratio <= 1 / MARGIN:
        wait = (f" (a switch waits for the frame in flight, up to {longest.one_s * 1e3:.0f} ms on {longest_name})"
                if longest.steps > 1 and longest.one_s > MAX_SWITCH_WAIT_S else "")
        return SessionChoice("one", "auto", f"{said}, at most {1 / MARGIN:.2f}x: faster, holding every weight once "
                                            f"in one session{wait}", dict(figures), load)
    longest_free_wait_s = MAX_SWITCH_WAIT_S if gpu else 0.0  # a whole frame a switch may wait for at no cost
    cut = {name: f for name, f in figures.items() if f.steps > 1 and f.one_s > longest_free_wait_s}
    if cut:
        name, slowest = max(cut.items(), key=lambda item: item[1].one_s)
        return SessionChoice("units", "auto", (
            f"{said}, as fast, but a switch on it waits for a whole frame of up to {slowest.one_s * 1e3:.0f} ms "
            f"({name}) where units stop the step in flight for the new frame (of {slowest.steps})"),
            dict(figures), load)
    if not gpu:
        return SessionChoice("one", "auto", f"{said}, as fast, and units would not cut a frame into steps: one "
                                            "session holds every weight once", dict(figures), load)
    return SessionChoice("one", "auto", f"{said}, as fast on frames a switch may wait for: one session holds every "
                                        "weight once and one provider instance", dict(figures), load)


def measure_session(unit_paths: Mapping[str, str], sequences: Mapping[str, Sequence[str]], one_path: str,
                    indices: Mapping[str, int], providers: tuple[str, ...], threads: Callable[[str], int],
                    one_threads: int, *, optimized: bool, warm: frozenset[str]) -> dict[str, ScenarioSession]:
    """Each scenario of ``sequences`` (its unit ids in order; ``unit_paths``: unit id → model file) timed on its
    units (sessions of ``threads(unit)`` threads, those in ``warm`` kept warm) and on the one graph at ``one_path``
    (a warm session of ``one_threads``, fed the scenario's index of ``indices``), as ``compare_chains`` measures. A
    unit's session goes once no later scenario runs it."""
    from sbrs.compile.unit_threads import random_feed
    from sbrs.ort_env import create_session

    rng = np.random.default_rng(0)
    one = create_session(one_path, providers, threads=one_threads, optimized=optimized, warm=True)
    frame = {i.name: value for i, value in zip(one.get_inputs(), random_feed(one, rng).values(), strict=True)
             if i.name != "scenario"}
    sessions: dict[str, Any] = {}
    feeds: dict[str, dict[str, np.ndarray]] = {}
    figures: dict[str, ScenarioSession] = {}
    last_use = {unit: index for index, units in enumerate(sequences.values()) for unit in units}
    for index, (scenario, units) in enumerate(sequences.items()):
        for unit in units:
            if unit not in sessions:
                sessions[unit] = create_session(unit_paths[unit], providers, threads=threads(unit),
                                                optimized=optimized, warm=unit in warm)
                feeds[unit] = random_feed(sessions[unit], rng)
        chain = [(sessions[u], feeds[u]) for u in units]
        one_chain = [(one, {**frame, "scenario": np.array(indices[scenario], dtype=np.int64)})]
        units_s, one_s = compare_chains(chain, one_chain)
        figures[scenario] = ScenarioSession(units_s, one_s, len(units))
        del chain
        for unit in {unit for unit in units if last_use[unit] == index}:  # as ``measure_streams`` lets them go
            del sessions[unit], feeds[unit]
    return figures
