"""``sbrs report --bench/--switching``: every field the pictures and the page read is checked, so a malformed
file is one line naming the file and the field (exit 2), never an internal error from inside a plot.

Hand-made files: the smallest bench and switching reports the report reads, then one field at a time broken.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from sbrs.errors import InputError
from sbrs.report.inputs import read_bench, read_switching

SIDE = {"pss_bytes": 7_000_000, "rss_bytes": 12_000_000}
BENCH: dict[str, Any] = {
    "app": "tiny",
    "scenarios": {"full": {"fps": 100.0, "ort_fps": 90.0, "ratio": 1.11}},
    "device_memory": {"plan": {"params_bytes": 1, "tensors_bytes": 2, "transition_bytes": 0, "plan_bytes": 3},
                      "bound_bytes": 13_000_003, "bound_same_run_bytes": 9_000_000,
                      "summary": {"sbrs_run": SIDE, "python_api": SIDE, "plain_ort": SIDE, "plain_ort_trimmed": SIDE,
                                  "plain_ort_active": SIDE, "sbrs_modules_compiled_from_source": 31,
                                  "where_it_goes_pss_bytes": {"weights_files": 1}}},
}
DELTA = {"mean_s": 0.001, "p95_s": 0.002}
SWITCHING: dict[str, Any] = {
    "app": "tiny", "methods": ["sbrs-tp", "ort-all"],
    "pairs": {"full->skip": {"old_frame_s": 0.001, "new_frame_s": 0.001, "sbrs-tp": DELTA, "ort-all": DELTA}},
    "overall": {"sbrs-tp": DELTA, "ort-all": DELTA, "ratios": {"sbrs-tp": 0.5}},
}


def _write(tmp_path: Path, value: Any) -> Path:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def _broken(report: dict[str, Any], where: str, value: Any) -> dict[str, Any]:
    broken = copy.deepcopy(report)
    *path, last = where.split(".")
    node = broken
    for key in path:
        node = node[key]
    node[last] = value
    return broken


def test_whole_files_are_read(tmp_path: Path) -> None:
    assert read_bench(_write(tmp_path, BENCH), "tiny") == BENCH
    assert read_switching(_write(tmp_path, SWITCHING), "tiny") == SWITCHING
    # a bench run without the optional sides and figures is read too
    bare = _broken(BENCH, "device_memory.summary", {"sbrs_run": SIDE, "plain_ort": SIDE, "plain_ort_active": SIDE,
                                                    "python_api": None})
    assert read_bench(_write(tmp_path, bare), "tiny") == bare


@pytest.mark.parametrize(("where", "value"), [
    ("scenarios", []),
    ("device_memory.bound_bytes", "13 MB"),
    ("device_memory.bound_same_run_bytes", None),
    ("device_memory.summary", [SIDE]),
    ("device_memory.summary.python_api", {"rss_bytes": 1}),
    ("device_memory.summary.plain_ort_trimmed", {"pss_bytes": "7 MB"}),
    ("device_memory.summary.sbrs_run", {"pss_bytes": 1, "rss_bytes": "x"}),
])
def test_a_malformed_bench_field_is_named(tmp_path: Path, where: str, value: Any) -> None:
    path = _write(tmp_path, _broken(BENCH, where, value))
    with pytest.raises(InputError) as error:
        read_bench(path, "tiny")
    assert str(path) in str(error.value) and where in str(error.value)


@pytest.mark.parametrize(("where", "value"), [
    ("overall", [DELTA]),
    ("overall.ratios", [0.5]),
    ("overall.ratios.sbrs-tp", "half"),
])
def test_a_malformed_switching_field_is_named(tmp_path: Path, where: str, value: Any) -> None:
    path = _write(tmp_path, _broken(SWITCHING, where, value))
    with pytest.raises(InputError) as error:
        read_switching(path, "tiny")
    assert str(path) in str(error.value) and where in str(error.value)
