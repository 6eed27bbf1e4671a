"""``sbrs report APP.yaml -o DIR``: the app's pictures and one offline HTML page, in a folder.

What it writes (``FILES``): ``supergraph.png`` (``sbrs.report.figures``), ``supergraph.onnx`` and
``supergraph.json`` (``sbrs.report.netron``: Netron opens the first), ``memory.png``, ``switching.png``,
``pareto.png`` and ``index.html`` (``sbrs.report.page``), each picture only when its inputs exist; the page
says plainly what is missing and how to get it.

The default is fast: the MoC and the plan only (the saved ``APP.plan.json`` when current, else planned in
memory). The measured pictures read runs the user already made (``sbrs bench --json`` for device memory and
throughput, ``sbrs bench --switching --json`` for the timeline), or, with ``measure``, make short ones here.
The Pareto front is the one ``sbrs build`` saved in the plan for the app's ``memory_limit_mb``: the search is
not run again here (its result must be the one the build runs). An app without a saved search gets a front with
``measure`` only: a short search here (``front_search``: analytic cost model, a small population, nothing
saved), as if the limit were just under the app's unreduced plan, so that the picture shows what processing by
parts would trade; the page says so.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbrs import __version__
from sbrs.errors import InputError
from sbrs.report.page import Section, Table, write_page

logger = logging.getLogger(__name__)

#: The files a report may hold, by role.
FILES: dict[str, str] = {
    "page": "index.html",
    "supergraph": "supergraph.png",
    "netron": "supergraph.onnx",
    "moc_json": "supergraph.json",
    "memory": "memory.png",
    "switching": "switching.png",
    "pareto": "pareto.png",
    "bench_json": "bench.json",  # with --measure: the short runs made, to pass as --bench/--switching later
    "switching_json": "switching.json",
}


@dataclass(frozen=True)
class Report:
    """What ``make_report`` wrote: ``files`` maps a role of ``FILES`` to its path, ``missing`` a picture not
    drawn to the reason the page gives."""

    folder: Path
    files: Mapping[str, Path]
    missing: Mapping[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "files": {role: str(path) for role, path in self.files.items()},
                "missing": dict(self.missing)}


def _folder(out_dir: str | Path) -> Path:
    folder = Path(out_dir)
    if folder.exists() and not folder.is_dir():
        raise InputError("exists and is not a folder", file=str(folder), field="-o")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot make the folder: {exc.strerror}", file=str(folder), field="-o") from None
    return folder


def _mb(value: float) -> str:
    return f"{value / 1e6:.2f}"


def make_report(app_path: str | Path, out_dir: str | Path, *, bench_path: str | Path | None = None,
                switching_path: str | Path | None = None, measure: bool = False) -> Report:
    """Write the report of the app at ``app_path`` into ``out_dir`` (module docstring). Bad inputs (the app, a
    bench file of another app or of the wrong kind, an output path that is a file) are ``InputError``s, raised
    before anything is drawn."""
    from sbrs.app import load_app
    from sbrs.moc import derive_moc
    from sbrs.reduction.search import saved_reduction
    from sbrs.report import figures, netron
    from sbrs.report.inputs import measure as measure_runs
    from sbrs.report.inputs import read_bench, read_switching
    from sbrs.report.summary import app_summary, format_summary, plan_for

    figures.require_matplotlib()
    app = load_app(app_path)
    bench = None if bench_path is None else read_bench(bench_path, app.name)
    switching = None if switching_path is None else read_switching(switching_path, app.name)
    folder = _folder(out_dir)
    files: dict[str, Path] = {}
    missing: dict[str, str] = {}

    def path(role: str) -> Path:
        files[role] = folder / FILES[role]
        return files[role]

    if measure and (bench is None or switching is None):
        # Saved beside the pictures: the next report (or a comparison) reads them with --bench/--switching.
        measured, switched = measure_runs(str(app_path), bench=bench is None, switching=switching is None)
        if measured is not None:
            bench = measured
            path("bench_json").write_text(json.dumps(measured, indent=1) + "\n", encoding="utf-8")
        if switched is not None:
            switching = switched
            path("switching_json").write_text(json.dumps(switched, indent=1) + "\n", encoding="utf-8")
    moc = derive_moc(app.models, app.config.adaptive)
    plan = plan_for(app)

    summary = app_summary(app, moc, plan)
    figures.supergraph_figure(moc, app.name, path("supergraph"))
    netron.supergraph_onnx(moc, app.name, path("netron"))
    netron.supergraph_json(moc, path("moc_json"))
    reduction = saved_reduction(app)
    searched_here = False
    if reduction is None and measure:
        reduction, searched_here = front_search(app, plan), True
    figures.memory_figure(plan, app.name, path("memory"), limit_mb=app.config.memory_limit_mb, bench=bench,
                          reduction=None if searched_here else reduction)
    if switching is not None:
        figures.switching_figure(switching, path("switching"))
    else:
        missing["switching"] = (f"No switch timeline: no switching run was given. Make one with `sbrs bench "
                                f"{app_path} --switching --json > switching.json` and pass `--switching "
                                "switching.json`, or let `sbrs report --measure` make a short one.")
    if searched_here:
        assert reduction is not None
        figures.pareto_figure(reduction, app.name, path("pareto"))
    elif app.config.memory_limit_mb is None:
        missing["pareto"] = ("No Pareto front: this app sets no memory_limit_mb, so nothing is processed by parts "
                             "and no reduction search ran. Set memory_limit_mb in the app file and run "
                             f"`sbrs build {app_path}`, or let `sbrs report --measure` run a short search, to see "
                             "the trade-off between memory and throughput.")
    elif reduction is None or not reduction.get("pareto"):
        missing["pareto"] = (f"No Pareto front: the app's plan holds no reduction search for its memory_limit_mb "
                             f"of {app.config.memory_limit_mb:g} MB (no current plan file beside the app). Run "
                             f"`sbrs build {app_path}` first.")
    else:
        figures.pareto_figure(reduction, app.name, path("pareto"))
    sections = _sections(app, summary, format_summary(summary), files, missing, bench, switching, reduction,
                         searched_here)
    write_page(path("page"), f"sbrs report: app {app.name}",
               [f"Made by sbrs {__version__} from {app_path}. The pictures are inside this page: it opens offline. "
                "Each section says where its figures come from."], sections)
    return Report(folder=folder, files=files, missing=missing)


#: The short search of ``front_search`` (``sbrs build``'s default: population 24, 16 generations).
FRONT_POPULATION = 12
FRONT_GENERATIONS = 6


def front_search(app: Any, plan: Any) -> dict[str, Any]:
    """A reduction search for the report of an app without one saved: Algorithm 9 as ``sbrs build`` runs it,
    under the analytic cost model (``FRONT_POPULATION``, ``FRONT_GENERATIONS``), the limit one byte under the
    unreduced plan of the folded models (so the search runs; every point of the front is a configuration such a
    limit could choose)."""
    from sbrs.reduction import GaParams
    from sbrs.reduction.search import reduce_app

    params = GaParams(population=FRONT_POPULATION, generations=FRONT_GENERATIONS)
    logger.info("report: a short reduction search for the Pareto front (analytic cost model)")
    found = reduce_app(app, plan, plan.memory.params_bytes + plan.memory.arena_bytes - 1, params=params)
    # The search sees the models folded (conv→BN→activation as ONNX Runtime runs them): their unreduced plan is
    # below the app plan's, and a limit between the two is met unreduced, with nothing searched.
    folded = int(found["unreduced"]["memory_bytes"])
    if int(found["chosen"]["memory_bytes"]) >= folded:
        found = reduce_app(app, plan, folded - 1, params=params)
    return found


def _sections(app: Any, summary: Mapping[str, Any], summary_text: str, files: Mapping[str, Path],
              missing: Mapping[str, str], bench: Mapping[str, Any] | None, switching: Mapping[str, Any] | None,
              reduction: Mapping[str, Any] | None, searched_here: bool = False) -> list[Section]:
    """The page's sections, in the order a newcomer asks: what is shared, what memory it saves, how a switch
    unfolds, what processing by parts trades (``searched_here``: a front of ``front_search``, not a build's)."""
    sections = [
        Section("summary", "Summary", ["What `sbrs inspect APP.yaml` prints first; the memory figures are planned "
                                       "from the models (the app's plan)."], preformatted=summary_text),
        Section("supergraph", "Supergraph and each scenario's path", [
            "One column per depth (the longest path from the input), one row per set of scenarios running a layer: "
            "layers every scenario shares are on top, each scenario's own layers below. Each coloured line is one "
            "scenario's path; a round marker is a layer shared as it is, a diamond a shared layer whose inputs, "
            "outputs or weights are set per scenario by a control parameter, a square a layer of one scenario."],
            picture=files["supergraph"],
            links=[(FILES["netron"], "the supergraph as an ONNX graph, for Netron (netron.app or `pip install "
                                     "netron`); each node names its scenarios, reuse and control parameters"),
                   (FILES["moc_json"], "the whole MoC as JSON (supergraph, control node, control edges)")]),
        _memory_section(summary, files, bench, None if searched_here else reduction),
        _switching_section(files, missing, switching),
        _pareto_section(files, missing, reduction, searched_here),
    ]
    return sections


def _memory_section(summary: Mapping[str, Any], files: Mapping[str, Path], bench: Mapping[str, Any] | None,
                    reduction: Mapping[str, Any] | None) -> Section:
    text = ["Left: planned from the models (the app's plan): the unique parameters and the arena of every tensor, "
            "for each scenario alone, for all scenarios held apart (the sums) and for sbrs' one app (parameters "
            f"shared, one arena): {_mb(summary['params_bytes'] + summary['arena_bytes'])} MB against "
            f"{_mb(summary['params_sum_bytes'] + summary['arena_sum_bytes'])} MB."]
    if reduction is not None and not reduction.get("early_exit"):
        text.append(f"Under the app's memory limit of {_mb(reduction['memory_limit_bytes'])} MB, the last bar is the "
                    "configuration processed by parts that `sbrs build` chose (the star of the Pareto front below).")
    tables = []
    device = None if bench is None else bench.get("device_memory")
    if device:
        text.append("Right: device memory measured by `sbrs bench` from outside fresh processes, PSS above a bare "
                    "interpreter with numpy and onnxruntime, for sbrs and for plain ONNX Runtime with every "
                    "scenario's model loaded, and with the largest one alone.")
        rows = [[name, _mb(side["pss_bytes"]), _mb(side["rss_bytes"]) if "rss_bytes" in side else "-"]
                for name, side in device["summary"].items() if isinstance(side, Mapping) and "pss_bytes" in side]
        tables.append(Table(["process", "PSS MB", "RSS MB"], rows))
    missing = None
    if bench is None:
        missing = ("No measured device memory or throughput: no `sbrs bench` run was given. Pass `--bench FILE.json` "
                   "(from `sbrs bench APP.yaml --json`) or `--measure`.")
    elif not device:
        missing = "The bench run given did not measure device memory."
    if bench is not None:
        tables.append(Table(["scenario", "sbrs fps", "plain ORT fps", "ratio"],
                            [[name, f"{row['fps']:.1f}", f"{row['ort_fps']:.1f}", f"{row['ratio']:.3f}"]
                             for name, row in bench["scenarios"].items()]))
    return Section("memory", "Memory per scenario, against plain ONNX Runtime", text, picture=files["memory"],
                   tables=tables, missing=missing)


def _switching_section(files: Mapping[str, Path], missing: Mapping[str, str],
                       switching: Mapping[str, Any] | None) -> Section:
    text = ["The switch response delay Δ as the caller sees it (`sbrs bench --switching`): from a request made at a "
            "random point of a frame of the old scenario to the moment the caller holds the new scenario's first "
            "output. Left, over all ordered pairs: the old frame in flight, a whole new frame after it (what "
            "switching at the frame boundary costs at least), and each method's mean Δ with its p95."]
    tables = []
    if switching is not None:
        ratios = switching["overall"].get("ratios", {})
        tables.append(Table(["method", "mean Δ ms", "p95 Δ ms", "mean / plain ORT all loaded"],
                            [[method, f"{switching['overall'][method]['mean_s'] * 1e3:.3f}",
                              f"{switching['overall'][method]['p95_s'] * 1e3:.3f}",
                              f"{ratios[method]:.3f}" if method in ratios else "-"]
                             for method in switching["methods"]]))
    return Section("switching", "Switch timeline", text, picture=files.get("switching"), tables=tables,
                   missing=missing.get("switching"))


def _pareto_section(files: Mapping[str, Path], missing: Mapping[str, str],
                    reduction: Mapping[str, Any] | None, searched_here: bool = False) -> Section:
    text = ["Under a memory limit that buffer reuse alone misses, `sbrs build` searches band heights for processing "
            "by parts (NSGA-II over memory and each scenario's fps) and keeps the fastest configuration within the "
            "limit. Each point of the front is a configuration no other beats on both memory and fps; the star is "
            "the one chosen and run."]
    if searched_here and reduction is not None:
        text.append("This app sets no memory_limit_mb and runs unreduced: this front comes from a short search made "
                    f"for this report (analytic cost model, population {FRONT_POPULATION}, "
                    f"{FRONT_GENERATIONS} generations, nothing saved), as if the limit were just under the "
                    f"unreduced plan of {_mb(reduction['unreduced']['memory_bytes'])} MB; its smallest point is "
                    f"{_mb(min(p['memory_bytes'] for p in reduction['pareto']))} MB. `sbrs build` with a "
                    "memory_limit_mb searches longer, under the cost model measured on this machine.")
    tables = []
    if "pareto" in files and reduction is not None:
        chosen = reduction["chosen"]
        tables.append(Table(["", "memory MB", "parameters MB", "buffers MB",
                             *(f"{s} fps" for s in chosen["fps"])],
                            [[label, _mb(point["memory_bytes"]), _mb(point["params_bytes"]), _mb(point["arena_bytes"]),
                              *(f"{point['fps'][s]:.1f}" for s in chosen["fps"])]
                             for label, point in (("chosen", chosen), ("unreduced", reduction["unreduced"]))]))
    return Section("reduction", "Processing by parts: the Pareto front", text, picture=files.get("pareto"),
                   tables=tables, missing=missing.get("pareto"))
