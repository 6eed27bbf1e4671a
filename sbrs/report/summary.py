"""The one-screen summary of an app: what its scenarios share, and what sharing saves.

``sbrs inspect APP.yaml`` prints it first (the full capture table is behind ``--table``), and ``sbrs report``
puts the same figures on its page. The capture table of a DenseNet app runs to thousands of lines; a newcomer's
first questions (which scenarios share what, how much the sharing saves in parameters and in the arena, what
the control node switches) fit on one screen, so the summary is bounded: ``MAX_LINES`` for any app, whatever
its number of scenarios or control parameters (long lists are cut and say how many more there are).

The memory figures come from the app's plan: the saved ``APP.plan.json`` when it is current (nothing to
compute), else planned here in memory (``sbrs.memory.app_plan.build_plan``; nothing is written).
"""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sbrs.errors import InputError
from sbrs.model.cnn import INPUT_OP, OUTPUT_OP

if TYPE_CHECKING:
    from sbrs.app.app import App
    from sbrs.memory.app_plan import AppPlan
    from sbrs.moc.model import Moc

logger = logging.getLogger(__name__)

#: The summary never prints more lines than this (the issue's "one screen").
MAX_LINES = 40
#: Up to this many scenarios the shared-layers table is a full matrix; above it, the pairs sharing the most.
MATRIX_SCENARIOS = 8
#: Nor lines longer than this.
WIDTH = 120
#: Lines of the pairs sharing most, above ``MATRIX_SCENARIOS`` scenarios.
SHARED_LINES = 6
#: Scenario names are cut to this width in tables.
NAME_WIDTH = 14
#: How the app runs, by ``runtime.session``, and why.
SESSION_LINES = {
    "units": "runs as execution units, an ONNX Runtime session each (runtime.session: units, the default on the "
             "CPU; one: one graph)",
    "one": "runs as one graph on one ONNX Runtime session, every weight once, If where paths split "
           "(runtime.session: one)",
    "auto": "runs as execution units or as one graph, whichever `sbrs build` measures as fast on this machine "
            "(runtime.session: auto, the default on a GPU provider)",
}


def plan_for(app: App) -> AppPlan:
    """The app's memory plan: the saved one when it is current, else planned in memory (not saved: looking
    at an app must not write beside it; ``sbrs build`` saves plans)."""
    from sbrs.memory.app_plan import build_plan, default_plan_path, load_plan

    path = default_plan_path(app)
    if path.is_file():
        try:
            return load_plan(path, app)
        except InputError as exc:
            logger.info("%s; planning in memory instead", exc)
    return build_plan(app)


def _layers_of(moc: Moc) -> dict[str, set[str]]:
    """Per scenario, the supergraph layers it runs (the Input and Output pseudo-layers left out)."""
    real = {layer.id for layer in moc.layers if layer.op not in (INPUT_OP, OUTPUT_OP)}
    return {s: {step.layer_id for step in moc.steps[s]} & real for s in moc.scenarios}


def app_summary(app: App, moc: Moc, plan: AppPlan) -> dict[str, Any]:
    """The summary as data: per scenario its layers, layers no other scenario runs, parameters and arena when
    run alone; supergraph layers shared by each pair; unique parameters and the one arena against their sums
    over the scenarios; control parameters and the reuse kinds of the supergraph's layers."""
    layers = _layers_of(moc)
    names = list(moc.scenarios)
    scenarios = {}
    for name in names:
        others = set().union(*(layers[o] for o in names if o != name)) if len(names) > 1 else set()
        alone = plan.per_scenario[name]
        scenarios[name] = {"layers": len(layers[name]), "own_layers": len(layers[name] - others),
                           "params_bytes": alone.params_bytes, "arena_bytes": alone.arena_bytes}
    shared = {f"{a}|{b}": len(layers[a] & layers[b]) for i, a in enumerate(names) for b in names[i + 1:]}
    real = [layer for layer in moc.layers if layer.op not in (INPUT_OP, OUTPUT_OP)]
    by_attribute: dict[str, int] = {}
    for param in moc.params:
        by_attribute[param.attribute] = by_attribute.get(param.attribute, 0) + 1
    return {
        "app": app.name,
        "adaptive": list(moc.adaptive),
        "supergraph_layers": len(real),
        "supergraph_edges": len(moc.edges),
        "scenarios": scenarios,
        "shared_layers": shared,
        "reuse": {kind: sum(1 for layer in real if layer.reuse == kind) for kind in ("full", "partial", "none")},
        "params_bytes": plan.memory.params_bytes,
        "params_sum_bytes": sum(s["params_bytes"] for s in scenarios.values()),
        "arena_bytes": plan.memory.arena_bytes,
        "arena_sum_bytes": sum(s["arena_bytes"] for s in scenarios.values()),
        "lower_bound_bytes": plan.memory.lower_bound_bytes,
        "control_parameters": {"count": len(moc.params), "by_attribute": by_attribute,
                               "items": [{"id": p.id, "attribute": p.attribute, "layer": p.layer,
                                          "op": moc.layer(p.layer).op, "scenarios": list(p.values)}
                                         for p in moc.params]},
        "session": app.config.runtime.session,
    }


def _mb(value: float) -> str:
    return f"{value / 1e6:.2f}"


def _short(name: str, width: int = NAME_WIDTH) -> str:
    return name if len(name) <= width else name[:width - 1] + "…"


def _times(total: float, part: float) -> str:
    return f"sum / one = {total / part:.2f}" if part > 0 else "n/a"


def _shared_lines(names: Sequence[str], shared: Mapping[str, int], room: int) -> list[str]:
    """The layers each pair shares: a matrix for a few scenarios, else the pairs sharing most (``room`` rows)."""
    if len(names) < 2:
        return ["layers shared between scenarios: none (one scenario)"]
    if len(names) <= MATRIX_SCENARIOS:
        width = max(6, *(len(_short(n, 10)) for n in names))
        lines = ["supergraph layers shared by each pair of scenarios:",
                 f"  {'':<{NAME_WIDTH}}" + "".join(f" {_short(n, 10):>{width}}" for n in names)]
        for a in names:
            cells = []
            for b in names:
                key = f"{a}|{b}" if f"{a}|{b}" in shared else f"{b}|{a}"
                cells.append("-" if a == b else str(shared[key]))
            lines.append(f"  {_short(a):<{NAME_WIDTH}}" + "".join(f" {c:>{width}}" for c in cells))
        return lines
    ranked = sorted(shared.items(), key=lambda item: -item[1])
    pairs = [f"{_short(k.split('|')[0])} & {_short(k.split('|')[1])} {v}" for k, v in ranked]
    return [f"supergraph layers shared by each pair of scenarios ({len(ranked)} pairs, most first):",
            *_wrapped(pairs, max(1, room - 1), "sbrs inspect APP.yaml --json")]


def _wrapped(items: Sequence[str], room: int, more: str) -> list[str]:
    """``items`` joined by ", " on indented lines of at most ``WIDTH`` characters, at most ``room`` lines; when
    they do not all fit, the last line ends saying how many more there are and where to see them."""
    lines: list[str] = []
    line = " "
    for i, item in enumerate(items):
        if len(line) + len(item) + 2 <= WIDTH:
            line += f" {item},"
            continue
        if len(lines) + 1 >= room:  # the last line: make room for what says the rest
            while True:
                suffix = f" ... {len(items) - i} more: {more}"
                if len(line) + len(suffix) <= WIDTH or "," not in line.rstrip(","):
                    return [*lines, line.rstrip(",") + "," + suffix]
                line, _, _dropped = line.rstrip(",").rpartition(",")
                line += ","
                i -= 1
        lines.append(line.rstrip(","))
        line = f"  {item},"
    if line.strip():
        lines.append(line.rstrip(","))
    return lines


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(text, width=WIDTH, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)


def format_summary(summary: Mapping[str, Any], max_lines: int = MAX_LINES) -> str:
    """The summary for people, at most ``max_lines`` lines of at most ``WIDTH`` characters whatever the app
    (module docstring)."""
    names = list(summary["scenarios"])
    reuse = summary["reuse"]
    control = summary["control_parameters"]
    head = [f"app {summary['app']}: {len(names)} scenarios, A = {{{', '.join(summary['adaptive'])}}}",
            *_wrap(f"supergraph: {summary['supergraph_layers']} layers ({reuse['full']} shared as they are, "
            f"{reuse['partial']} shared with control parameters, {reuse['none']} in one scenario only), "
            f"{summary['supergraph_edges']} edges"),
            *_wrap(SESSION_LINES[summary.get("session", "units")])]
    table = [f"  {'scenario':<{NAME_WIDTH}} {'layers':>6} {'own':>5} {'params MB':>10} {'arena MB':>9}"
             "   (own: no other scenario runs it; MB: the scenario alone)"]
    rows = [f"  {_short(n):<{NAME_WIDTH}} {s['layers']:>6} {s['own_layers']:>5} {_mb(s['params_bytes']):>10}"
            f" {_mb(s['arena_bytes']):>9}" for n, s in summary["scenarios"].items()]
    memory = [*_wrap(f"parameters: {_mb(summary['params_bytes'])} MB unique, against "
                     f"{_mb(summary['params_sum_bytes'])} MB summed over the scenarios "
                     f"({_times(summary['params_sum_bytes'], summary['params_bytes'])})"),
              *_wrap(f"arena: {_mb(summary['arena_bytes'])} MB, one for every scenario (lower bound "
                     f"{_mb(summary['lower_bound_bytes'])}), against {_mb(summary['arena_sum_bytes'])} MB summed over "
                     f"per-scenario arenas ({_times(summary['arena_sum_bytes'], summary['arena_bytes'])})")]
    counts = ", ".join(f"{attribute} {n}" for attribute, n in sorted(control["by_attribute"].items()))
    control_head = _wrap(f"control parameters: {control['count']}" + (f" ({counts})" if counts else "")
                         + (": the inputs (I), outputs (O) or weights (par) of a shared layer, set per scenario"
                            if control["count"] else ""))
    tail = "full capture table, control values and steps φ^s: sbrs inspect APP.yaml --table (JSON: --json)"
    fixed = len(head) + len(table) + len(memory) + len(control_head) + 1
    # Scenario rows, then the shared-layers lines, then the control parameters get what room is left.
    if len(rows) > max_lines // 4:
        keep = max_lines // 4 - 1
        rows = [*rows[:keep], f"  ... {len(rows) - keep} more scenarios: sbrs inspect APP.yaml --json"]
    shared = _shared_lines(names, summary["shared_layers"], min(SHARED_LINES, max_lines - fixed - len(rows) - 2))
    room = max_lines - fixed - len(rows) - len(shared)
    listed = _wrapped([f"{p['id']} {p['attribute']} of {p['layer']} {p['op']}" for p in control["items"]], room,
                      "--table")
    lines = [*head, *table, *rows, *shared, *memory, *control_head, *listed, tail]
    return "\n".join(lines[:max_lines])
