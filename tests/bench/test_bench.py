"""``sbrs bench`` end to end: every key of the report, caller-side switch delays."""

from __future__ import annotations

import json

import pytest

from sbrs.cli import main
from tests.conftest import REPO

TINY = str(REPO / "apps" / "tiny.yaml")


def test_bench_smoke_reports_every_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", TINY, "--json", "--frames", "2", "--repeats", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    for key in ("scenarios", "rss_bytes", "ort_rss_bytes", "rss_ratio", "granularity", "arena_bytes",
                "peak_rss_bytes", "ort_peak_rss_bytes", "ort_active_rss_bytes", "ort_active_peak_rss_bytes",
                "baseline_rss_bytes", "rss_ratio_vs_ort_active", "peak_rss_ratio_vs_ort"):
        assert key in report
    # the baseline is a bare interpreter with numpy and onnxruntime: sbrs' imports count against sbrs
    assert report["baseline_rss_bytes"] > 0 and report["rss_bytes"] > 0
    assert report["peak_rss_bytes"] >= report["rss_bytes"] and report["ort_peak_rss_bytes"] >= report["ort_rss_bytes"]
    # PSS counts a page several mappings share once: never above RSS (both above the same bare interpreter)
    for side in ("", "ort_", "ort_active_"):
        assert 0 < report[f"{side}pss_bytes"] <= report[f"{side}rss_bytes"] + 1_000_000
    assert set(report["scenarios"]) == {"full", "skip", "exit"}
    for row in report["scenarios"].values():
        assert {"fps", "ort_fps", "ratio"} <= set(row)
    assert main(["bench", TINY, "--frames", "2", "--repeats", "1", "--granularity", "layer"]) == 0
    assert "ratio" in capsys.readouterr().out


def test_bench_switching_reports_caller_side_delays(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", TINY, "--switching", "--json", "--repeats", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    methods = ["sbrs-tp", "sbrs-naive", "ort-all", "ort-load"]
    assert report["methods"] == methods
    assert set(report["pairs"]) == {f"{a}->{b}" for a in ("full", "skip", "exit") for b in ("full", "skip", "exit")
                                    if a != b}
    for row in [*report["pairs"].values(), report["overall"]]:
        for method in methods:
            assert 0 < row[method]["mean_s"] <= row[method]["p95_s"] * 2
        # the caller's clock starts before the request reaches the runtime and stops after the output left it
        for method in ("sbrs-tp", "sbrs-naive"):
            assert 0 < row[method]["internal_mean_s"] <= row[method]["mean_s"]
        assert set(row["ratios"]) == {"sbrs-tp", "sbrs-naive", "ort-load"}
    assert main(["bench", TINY, "--switching", "--repeats", "1", "--methods", "sbrs-tp,ort-all"]) == 0
    assert "sbrs-tp/ort-all" in capsys.readouterr().out
    assert main(["bench", TINY, "--switching", "--methods", "sbrs-tp,nope"]) == 2
    assert "nope" in capsys.readouterr().err
