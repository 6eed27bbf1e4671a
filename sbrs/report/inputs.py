"""The measured inputs of ``sbrs report``: ``sbrs bench --json`` and ``sbrs bench --switching --json`` files.

A bench run takes minutes; the report reads one a user already made (``--bench FILE``, ``--switching FILE``)
rather than measuring again. Each file is checked here for what the pictures read, so a wrong or truncated
file is one line naming the file and the field (``InputError``, exit 2), never a ``KeyError`` from deep in a
plot. ``measure`` makes short runs of both when the user asks for it (``sbrs report --measure``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sbrs.errors import InputError

logger = logging.getLogger(__name__)

#: ``sbrs report --measure``: blocks of this many frames, this many per side (``sbrs bench`` defaults: 20, 3)...
MEASURE_FRAMES = 10
MEASURE_REPEATS = 2
#: ... and this many switch samples per ordered pair and method (``sbrs bench --switching`` default: 10).
MEASURE_SWITCH_REPEATS = 3


def _read(path: str | Path) -> dict[str, Any]:
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("no such file", file=str(path)) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"not a readable JSON file: {exc}", file=str(path)) from None
    if not isinstance(value, dict):
        raise InputError("expected one JSON object, as `sbrs bench --json` prints", file=str(path))
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _require(mapping: Any, keys: tuple[str, ...], *, file: str, where: str, numbers: bool = False) -> None:
    """Each of ``keys`` is in ``mapping`` (a number, with ``numbers``), else one error naming the field."""
    if not isinstance(mapping, Mapping):
        raise InputError("expected an object", file=file, field=where)
    for key in keys:
        if key not in mapping:
            raise InputError("missing; is this the JSON of the right `sbrs bench` run?", file=file,
                             field=f"{where}.{key}" if where else key)
        if numbers and not _number(mapping[key]):
            raise InputError(f"expected a number, got {mapping[key]!r}", file=file,
                             field=f"{where}.{key}" if where else key)


def _same_app(report: Mapping[str, Any], app_name: str, file: str) -> None:
    if report.get("app") != app_name:
        raise InputError(f"is a run of app {report.get('app')!r}, not of {app_name!r}", file=file, field="app")


def read_bench(path: str | Path, app_name: str) -> dict[str, Any]:
    """An ``sbrs bench APP.yaml --json`` report of app ``app_name``, checked for what the pictures read: the fps
    of every scenario, and device memory when the run measured it."""
    file = str(path)
    report = _read(path)
    if "pairs" in report:
        raise InputError("this is an `sbrs bench --switching` report: give it as --switching", file=file)
    _require(report, ("app", "scenarios"), file=file, where="")
    _same_app(report, app_name, file)
    _require(report["scenarios"], (), file=file, where="scenarios")
    for name, row in report["scenarios"].items():
        _require(row, ("fps", "ort_fps", "ratio"), file=file, where=f"scenarios.{name}", numbers=True)
    memory = report.get("device_memory")
    if memory is not None:
        _require(memory, ("plan", "summary", "bound_bytes"), file=file, where="device_memory")
        _require(memory, ("bound_bytes", *(("bound_same_run_bytes",) if "bound_same_run_bytes" in memory else ())),
                 file=file, where="device_memory", numbers=True)
        _require(memory["summary"], (), file=file, where="device_memory.summary")
        _require(memory["plan"], ("params_bytes", "tensors_bytes", "transition_bytes", "plan_bytes"), file=file,
                 where="device_memory.plan", numbers=True)
        for side in ("sbrs_run", "plain_ort", "plain_ort_active"):
            _require(memory["summary"].get(side), ("pss_bytes",), file=file, where=f"device_memory.summary.{side}",
                     numbers=True)
        # the picture draws the optional sides too, and the page's table every side holding pss_bytes (and its
        # rss_bytes): each is checked where present
        for side, row in memory["summary"].items():
            drawn = side in ("python_api", "plain_ort_trimmed") and row is not None
            if drawn or (isinstance(row, Mapping) and "pss_bytes" in row):
                _require(row, ("pss_bytes", *(("rss_bytes",) if isinstance(row, Mapping) and "rss_bytes" in row
                                              else ())), file=file, where=f"device_memory.summary.{side}",
                         numbers=True)
    return report


def read_switching(path: str | Path, app_name: str) -> dict[str, Any]:
    """An ``sbrs bench APP.yaml --switching --json`` report of app ``app_name``, checked for what the timeline
    reads: per ordered pair the old and new frame times and each method's mean and p95 Δ."""
    file = str(path)
    report = _read(path)
    if "pairs" not in report and "scenarios" in report:
        raise InputError("this is an `sbrs bench` report without --switching: give it as --bench", file=file)
    _require(report, ("app", "methods", "pairs", "overall"), file=file, where="")
    _same_app(report, app_name, file)
    methods = report["methods"]
    if not isinstance(methods, list) or not methods or not all(isinstance(m, str) for m in methods):
        raise InputError("expected a non-empty list of method names", file=file, field="methods")
    if not isinstance(report["pairs"], Mapping) or not report["pairs"]:
        raise InputError("expected at least one ordered pair", file=file, field="pairs")
    for pair, row in report["pairs"].items():
        _require(row, ("old_frame_s", "new_frame_s"), file=file, where=f"pairs.{pair}", numbers=True)
        for method in methods:
            _require(row.get(method), ("mean_s", "p95_s"), file=file, where=f"pairs.{pair}.{method}", numbers=True)
    _require(report["overall"], (), file=file, where="overall")
    for method in methods:
        _require(report["overall"].get(method), ("mean_s", "p95_s"), file=file, where=f"overall.{method}",
                 numbers=True)
    ratios = report["overall"].get("ratios", {})
    _require(ratios, tuple(m for m in methods if m in ratios), file=file, where="overall.ratios", numbers=True)
    return report


def measure(app_path: str, *, bench: bool, switching: bool) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Short runs of ``sbrs bench`` (with device memory) and ``sbrs bench --switching`` for ``sbrs report
    --measure``: enough for pictures, not for figures to quote (``sbrs bench`` with its defaults is)."""
    from sbrs.bench.bench import bench_app
    from sbrs.bench.switching import measure_switching

    measured = switched = None
    if bench:
        logger.info("sbrs report: measuring throughput and device memory (a short `sbrs bench` run)")
        measured = bench_app(app_path, frames=MEASURE_FRAMES, repeats=MEASURE_REPEATS)
    if switching:
        logger.info("sbrs report: measuring switch response delays (a short `sbrs bench --switching` run)")
        switched = measure_switching(app_path, repeats=MEASURE_SWITCH_REPEATS)
    return measured, switched
