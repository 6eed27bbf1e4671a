"""The pictures of ``sbrs report``, drawn with matplotlib (the optional ``plots`` extra).

Four figures, each from values other stages already compute: the supergraph and every scenario's path through it
(the MoC, thesis Figure 5.4), memory per scenario against the scenarios held apart and measured device memory
(the plan and ``sbrs bench``, Table 5.5 / Figure 6.3), the switch timeline (``sbrs bench --switching``,
Figure 5.7) and the reduction search's Pareto front with the chosen point (the plan's reduction, Figure 4.x).

Only matplotlib's object API is used (``Figure`` and its Agg canvas), never ``pyplot``: pyplot keeps global
state (current figure, backend) that a library must not touch in its caller's process.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbrs.errors import InputError
from sbrs.model.cnn import INPUT_OP, OUTPUT_OP

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from sbrs.memory.app_plan import AppPlan
    from sbrs.moc.model import Moc

DPI = 110
#: Marker and colour of a supergraph layer by its reuse kind (thesis Table 5.1, reuse row).
REUSE_STYLE: dict[str, tuple[str, str, str]] = {
    "full": ("o", "#333333", "shared as it is"),
    "partial": ("D", "#e08214", "shared, control parameters differ"),
    "none": ("s", "#ffffff", "one scenario only"),
}
#: Up to this many supergraph layers, each node is labelled with its operator.
LABELLED_LAYERS = 60
#: Pairs shown in the per-pair switching panel (the rest are in the page's table and the JSON).
MAX_PAIRS = 24
METHOD_LABELS: dict[str, str] = {
    "sbrs-tp": "sbrs, SBRS-TP",
    "sbrs-naive": "sbrs, naive",
    "sbrs-cancel": "sbrs, cancel frame in flight",
    "ort-all": "plain ORT, all sessions loaded",
    "ort-load": "plain ORT, load on switch",
    "ort-cancel": "plain ORT, terminate call",
}


def require_matplotlib() -> None:
    """Fail in one line (exit 2) when matplotlib is missing: it is an optional extra, not a dependency."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError("sbrs report draws with matplotlib, which is not installed: "
                         "pip install 'sbrs[plots]' (or pip install matplotlib)") from None


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _save(figure: Figure, path: Path) -> Path:
    figure.savefig(path, format="png", dpi=DPI)
    return path


def _colors(names: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    palette = colormaps["tab10"]
    return {name: palette(i % 10) for i, name in enumerate(names)}


def _mb(value: float) -> float:
    return value / 1e6


# -- the supergraph ---------------------------------------------------------------------------------------


def _depths(moc: Moc) -> dict[str, int]:
    """Each supergraph layer's longest path from an input, in layers (its column in the picture)."""
    predecessors: dict[str, list[str]] = {layer.id: [] for layer in moc.layers}
    successors: dict[str, list[str]] = {layer.id: [] for layer in moc.layers}
    for edge in moc.edges:
        predecessors[edge.dst].append(edge.src)
        successors[edge.src].append(edge.dst)
    waiting = {layer: len(sources) for layer, sources in predecessors.items()}
    ready = [layer for layer, count in waiting.items() if count == 0]
    depth = dict.fromkeys(ready, 0)
    while ready:
        layer = ready.pop()
        for nxt in successors[layer]:
            depth[nxt] = max(depth.get(nxt, 0), depth[layer] + 1)
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                ready.append(nxt)
    return depth


def _lanes(moc: Moc) -> list[tuple[str, ...]]:
    """One row per set of scenarios that run a layer: the set of every scenario on top, then larger sets first."""
    order = {name: i for i, name in enumerate(moc.scenarios)}
    sets = {tuple(sorted(layer.scenarios, key=order.__getitem__)) for layer in moc.layers}
    return sorted(sets, key=lambda s: (-len(s), [order[n] for n in s]))


def _lane_label(lane: tuple[str, ...], scenarios: Sequence[str]) -> str:
    """A row's name: "all 5 scenarios", "all but frugal", or the scenarios it holds (cut at 30 characters)."""
    if len(lane) == len(scenarios) and len(scenarios) > 1:
        return f"all {len(scenarios)} scenarios"
    left_out = [name for name in scenarios if name not in lane]
    label = ", ".join(lane)
    if len(lane) > 2 and len(left_out) < len(lane):
        label = "all but " + ", ".join(left_out)
    return label if len(label) <= 30 else label[:29] + "…"


def supergraph_figure(moc: Moc, app_name: str, path: Path) -> Path:
    """The supergraph as a layered drawing: a column per depth, a row per set of scenarios running a layer
    (shared layers in the top row, each scenario's own branch below), each layer marked by its reuse kind and
    each scenario's path drawn as its own coloured line through the layers it runs."""
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    depth = _depths(moc)
    lanes = _lanes(moc)
    lane_of = {lane: i for i, lane in enumerate(lanes)}
    order = {name: i for i, name in enumerate(moc.scenarios)}
    y = {layer.id: -float(lane_of[tuple(sorted(layer.scenarios, key=order.__getitem__))]) for layer in moc.layers}
    columns = max(depth.values(), default=0) + 1
    figure = _figure(min(22.0, max(8.0, 3.0 + 0.09 * columns)), min(10.0, max(3.6, 2.2 + 0.6 * len(lanes))))
    axes = figure.add_subplot()
    colors = _colors(moc.scenarios)
    edges = {edge.id: edge for edge in moc.edges}
    count = len(moc.scenarios)
    spread = min(0.5, 0.08 * count)
    for i, scenario in enumerate(moc.scenarios):
        offset = 0.0 if count == 1 else spread * (i / (count - 1) - 0.5)
        segments = [((depth[edges[e].src], y[edges[e].src] + offset), (depth[edges[e].dst], y[edges[e].dst] + offset))
                    for e in sorted(set(moc.edge_capture[scenario].values()))]
        axes.add_collection(LineCollection(segments, colors=[colors[scenario]], linewidths=1.4, alpha=0.85,
                                           zorder=1))
    size = 36 if len(moc.layers) <= 200 else 14
    for kind, (marker, color, _label) in REUSE_STYLE.items():
        chosen = [layer for layer in moc.layers if layer.reuse == kind]
        if chosen:
            axes.scatter([depth[layer.id] for layer in chosen], [y[layer.id] for layer in chosen], marker=marker,
                         s=size, c=color, edgecolors="#333333", linewidths=0.7, zorder=3)
    if len(moc.layers) <= LABELLED_LAYERS:
        for layer in moc.layers:
            text = layer.op if layer.op in (INPUT_OP, OUTPUT_OP) else layer.op[:8]
            axes.annotate(text, (depth[layer.id], y[layer.id]), xytext=(0, 7), textcoords="offset points",
                          fontsize=6.5, rotation=45, ha="left", va="bottom", zorder=4)
    axes.set_yticks([-float(i) for i in range(len(lanes))], [_lane_label(lane, moc.scenarios) for lane in lanes])
    axes.set_ylim(-len(lanes) + 0.4, 0.9)
    axes.set_xlim(-1, columns)
    axes.set_xlabel("depth: the longest path from the input, in supergraph layers")
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    real = [layer for layer in moc.layers if layer.op not in (INPUT_OP, OUTPUT_OP)]
    counts = {kind: sum(1 for layer in real if layer.reuse == kind) for kind in REUSE_STYLE}
    axes.set_title(f"{app_name}: supergraph of {count} scenarios, {len(real)} layers\n{counts['full']} shared as they "
                   f"are, {counts['partial']} with control parameters, {counts['none']} in one scenario only",
                   loc="left", fontsize=10)
    handles = [Line2D([], [], color=colors[s], linewidth=2, label=f"path of {s}") for s in moc.scenarios]
    handles += [Line2D([], [], marker=marker, color="none", markerfacecolor=color, markeredgecolor="#333333",
                       markersize=7, label=label) for marker, color, label in REUSE_STYLE.values()]
    figure.legend(handles=handles, loc="outside lower center", ncol=min(4, len(handles)), fontsize=8, frameon=False)
    return _save(figure, path)


# -- memory -----------------------------------------------------------------------------------------------


def _stacked(axes: Axes, labels: Sequence[str], layers: Sequence[tuple[str, Sequence[float], str]],
             limit_mb: float | None = None) -> None:
    """Stacked bars: ``layers`` of (name, values in MB per label, colour); the total above each bar."""
    bottoms = [0.0] * len(labels)
    for name, values, color in layers:
        axes.bar(labels, values, bottom=bottoms, color=color, label=name, edgecolor="white", linewidth=0.6)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    for x, total in enumerate(bottoms):
        axes.annotate(f"{total:.2f}", (x, total), xytext=(0, 2), textcoords="offset points", ha="center",
                      fontsize=8)
    if limit_mb is not None:
        axes.axhline(limit_mb, color="#c0392b", linestyle="--", linewidth=1, label=f"memory limit {limit_mb:g} MB")
    axes.set_ylabel("MB")
    axes.margins(y=0.12)
    axes.tick_params(axis="x", labelrotation=20, labelsize=8)
    axes.legend(fontsize=8, frameon=False)


def memory_figure(plan: AppPlan, app_name: str, path: Path, *, limit_mb: float | None = None,
                  bench: Mapping[str, Any] | None = None, reduction: Mapping[str, Any] | None = None) -> Path:
    """Memory per scenario as planned (parameters and arena of each scenario alone, of all of them held apart,
    and of sbrs' one app, and by parts the configuration the reduction search chose), and beside it, when a
    bench run is given, device memory measured from outside: sbrs against plain ONNX Runtime."""
    device = None if bench is None else bench.get("device_memory")
    figure = _figure(12.5 if device else 8.0, 4.6)
    grid = figure.add_gridspec(1, 2, width_ratios=[1.4, 1]) if device else figure.add_gridspec(1, 1)
    axes = figure.add_subplot(grid[0])
    names = list(plan.per_scenario)
    alone = [plan.per_scenario[n] for n in names]
    labels = [*names, "all held apart", "sbrs: one app"]
    params = [*(_mb(m.params_bytes) for m in alone), _mb(sum(m.params_bytes for m in alone)),
              _mb(plan.memory.params_bytes)]
    arena = [*(_mb(m.arena_bytes) for m in alone), _mb(sum(m.arena_bytes for m in alone)),
             _mb(plan.memory.arena_bytes)]
    if reduction is not None and not reduction.get("early_exit"):  # the limit needed processing by parts
        labels.append("sbrs by parts\n(chosen)")
        params.append(_mb(reduction["chosen"]["params_bytes"]))
        arena.append(_mb(reduction["chosen"]["arena_bytes"]))
    _stacked(axes, labels, [("parameters (unique)", params, "#4c72b0"), ("arena (every tensor, planned)", arena,
                                                                       "#dd8452")], limit_mb)
    axes.set_title(f"{app_name}: planned memory, each scenario alone, all held apart, and sbrs' one app",
                   loc="left", fontsize=10)
    if device:
        axes = figure.add_subplot(grid[1])
        summary = device["summary"]
        sides = [("sbrs run", summary["sbrs_run"]), ("sbrs Python API", summary.get("python_api")),
                 ("plain ORT,\nall loaded", summary["plain_ort"]),
                 ("plain ORT, all,\nmalloc_trim", summary.get("plain_ort_trimmed")),
                 ("plain ORT,\nlargest alone", summary["plain_ort_active"])]
        shown = [(label, _mb(side["pss_bytes"])) for label, side in sides if side is not None]
        bars = axes.bar([label for label, _ in shown], [value for _, value in shown],
                        color=["#55a868" if label.startswith("sbrs") else "#8c8c8c" for label, _ in shown])
        axes.bar_label(bars, fmt="%.1f", fontsize=8)
        axes.axhline(_mb(device["plan"]["plan_bytes"]), color="#4c72b0", linestyle=":", linewidth=1.2,
                     label=f"the plan: {_mb(device['plan']['plan_bytes']):.1f} MB")
        axes.axhline(_mb(device["bound_bytes"]), color="#c0392b", linestyle="--", linewidth=1,
                     label=f"bound 1.1 x plan + 13 MB: {_mb(device['bound_bytes']):.1f}")
        if "bound_same_run_bytes" in device:  # ONNX Runtime's code measured in the same run (sbrs.bench)
            axes.axhline(_mb(device["bound_same_run_bytes"]), color="#c0392b", linestyle=":", linewidth=1,
                         label=f"the same, ONNX Runtime's code measured in this run: "
                               f"{_mb(device['bound_same_run_bytes']):.1f}")
        axes.set_ylabel("MB of PSS above a bare interpreter")
        axes.tick_params(axis="x", labelsize=8)
        axes.margins(y=0.12)
        axes.legend(fontsize=8, frameon=False)
        axes.set_title("device memory, measured (sbrs bench)", loc="left", fontsize=10)
    return _save(figure, path)


# -- switching --------------------------------------------------------------------------------------------


def switching_figure(report: Mapping[str, Any], path: Path) -> Path:
    """The switch as it unfolds for the caller, over all ordered pairs (left): the request lands at a random
    point of an old frame; switching at the frame boundary, the caller waits for the rest of that frame and a
    whole new one; each method's bar runs from the request to the delivery of the new scenario's first output
    (mean, whisker to p95). Right: the mean Δ of every pair per method."""
    methods = list(report["methods"])
    pairs = report["pairs"]
    old_ms = statistics.fmean(row["old_frame_s"] for row in pairs.values()) * 1e3
    new_ms = statistics.fmean(row["new_frame_s"] for row in pairs.values()) * 1e3
    colors = _colors(methods)
    shown = list(pairs)[:MAX_PAIRS]
    figure = _figure(13.0, min(9.0, max(4.2, 1.5 + 0.085 * len(shown) * len(methods))))
    grid = figure.add_gridspec(1, 2, width_ratios=[1.25, 1])
    axes = figure.add_subplot(grid[0])
    rows = ["old frame (o)", "new frame (n)", *(METHOD_LABELS.get(m, m) for m in methods)]
    ys = list(range(len(rows)))[::-1]
    axes.barh(ys[0], old_ms, left=-old_ms / 2, color="#cccccc", hatch="//", edgecolor="#888888", height=0.5)
    axes.barh(ys[1], new_ms, left=old_ms / 2, color="#cccccc", edgecolor="#888888", height=0.5)
    axes.annotate(f"{old_ms:.2f} ms; the request lands at a random point of it", (old_ms / 2, ys[0]),
                  xytext=(4, -3), textcoords="offset points", fontsize=7.5)
    axes.annotate(f"{new_ms:.2f} ms, after the old frame: a switch at the frame boundary",
                  (old_ms / 2 + new_ms, ys[1]), xytext=(4, -3), textcoords="offset points", fontsize=7.5)
    for y, method in zip(ys[2:], methods, strict=True):
        mean_ms = report["overall"][method]["mean_s"] * 1e3
        p95_ms = report["overall"][method]["p95_s"] * 1e3
        axes.barh(y, mean_ms, left=0, color=colors[method], height=0.5)
        axes.plot([mean_ms, p95_ms], [y, y], color="#333333", linewidth=1)
        axes.plot([p95_ms], [y], marker="|", color="#333333", markersize=9)
        axes.annotate(f"delivery {mean_ms:.2f} ms (p95 {p95_ms:.2f})", (max(mean_ms, p95_ms), y), xytext=(4, -3),
                      textcoords="offset points", fontsize=7.5)
    axes.axvline(0, color="#c0392b", linewidth=1.2)
    axes.annotate("request", (0, ys[0] + 0.4), xytext=(3, 0), textcoords="offset points", color="#c0392b",
                  fontsize=8)
    axes.set_yticks(ys, rows, fontsize=8)
    axes.set_xlabel("ms since the switch request")
    axes.margins(x=0.35)
    axes.set_title(f"{report['app']}: a switch over all {len(pairs)} ordered pairs (mean frame times, mean Δ)",
                   loc="left", fontsize=10)
    axes = figure.add_subplot(grid[1])
    height = 0.8 / len(methods)
    for i, method in enumerate(methods):
        axes.barh([p + i * height for p in range(len(shown))], [pairs[k][method]["mean_s"] * 1e3 for k in shown],
                  height=height, color=colors[method], label=METHOD_LABELS.get(method, method))
    axes.set_yticks([p + 0.4 - height / 2 for p in range(len(shown))], [k.replace("->", " → ") for k in shown],
                    fontsize=7.5)
    axes.invert_yaxis()
    axes.set_xlabel("mean Δ seen by the caller, ms")
    more = f" (first {len(shown)} of {len(pairs)})" if len(shown) < len(pairs) else ""
    axes.set_title(f"per ordered pair{more}", loc="left", fontsize=10)
    axes.legend(fontsize=7.5, framealpha=0.9, loc="best")
    return _save(figure, path)


# -- the reduction search ---------------------------------------------------------------------------------


def pareto_figure(reduction: Mapping[str, Any], app_name: str, path: Path) -> Path:
    """The search's Pareto front: memory (parameters + buffers) against each scenario's estimated fps, the
    unreduced configuration, the memory limit and the chosen point."""
    front = sorted(reduction["pareto"], key=lambda p: p["memory_bytes"])
    chosen = reduction["chosen"]
    unreduced = reduction["unreduced"]
    scenarios = list(chosen["fps"])
    colors = _colors(scenarios)
    figure = _figure(9.0, 4.8)
    axes = figure.add_subplot()
    for scenario in scenarios:
        axes.plot([_mb(p["memory_bytes"]) for p in front], [p["fps"][scenario] for p in front], marker="o",
                  markersize=3.5, linewidth=1, color=colors[scenario], label=f"{scenario}: Pareto front")
        axes.scatter([_mb(chosen["memory_bytes"])], [chosen["fps"][scenario]], marker="*", s=180,
                     color=colors[scenario], edgecolors="black", linewidths=0.8, zorder=5)
        axes.scatter([_mb(unreduced["memory_bytes"])], [unreduced["fps"][scenario]], marker="X", s=60,
                     color=colors[scenario], edgecolors="black", linewidths=0.6, zorder=5)
    limit = _mb(reduction["memory_limit_bytes"])
    axes.axvline(limit, color="#c0392b", linestyle="--", linewidth=1, label=f"memory limit {limit:.3f} MB")
    axes.axvline(_mb(chosen["memory_bytes"]), color="#333333", linestyle=":", linewidth=1,
                 label=f"chosen ★ {_mb(chosen['memory_bytes']):.3f} MB")
    axes.scatter([], [], marker="X", color="#999999", edgecolors="black", label="unreduced (no processing by parts)")
    axes.set_xlabel("memory: parameters + buffers, MB (the search's estimate)")
    cost = str(reduction.get("cost_model", "?")).split(" ")[0]  # "analytic (no measured table ...)": the name
    axes.set_ylabel(f"fps estimated by the {cost} cost model")
    how = ("fits without processing by parts (Algorithm 9, lines 1-5)" if reduction.get("early_exit") else
           f"NSGA-II, {reduction.get('evaluations', '?')} configurations, seed {reduction.get('seed', '?')}")
    axes.set_title(f"{app_name}: buffer reduction under {limit:.3f} MB: {how}", loc="left", fontsize=10)
    axes.legend(fontsize=8, frameon=False)
    return _save(figure, path)
