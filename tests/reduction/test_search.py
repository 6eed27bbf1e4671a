"""``sbrs build --memory-limit`` (Algorithm 9 wired in): early exit, a chosen reduction saved and run, reports, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sbrs.cli import main
from sbrs.compile.fit import app_parts
from sbrs.reduction.search import load_reduction, load_reduction_strategy
from sbrs.runtime.engine import Runtime
from tests.runtime.conftest import References, assert_equivalent, random_frame

REPO = Path(__file__).resolve().parents[2]
TINY = str(REPO / "apps" / "tiny.yaml")
FAST = ["--population", "8", "--generations", "2", "--cost", "analytic"]


def build(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    # a copy of the app: its build folder (reduced, for the limit) is written beside it, never into apps/
    app = tmp_path / "tiny.yaml"
    if not app.exists():
        app.write_text(Path(TINY).read_text())
    code = main(["build", str(app), "--plan", str(tmp_path / "tiny.plan.json"), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_loose_limit_exits_early(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = build(tmp_path, capsys, "--json", "--memory-limit", "100", *FAST)
    assert code == 0
    report = json.loads(out)
    reduction = report["reduction"]
    assert reduction["early_exit"] and reduction["feasible"] and reduction["pareto"] == [reduction["chosen"]]
    assert all(n == 1 for phases in reduction["phases"].values() for n in phases.values())
    assert report["arena_bytes"] == report["unreduced"]["arena_bytes"]


def test_units_on_two_streams_count_both_arenas_against_the_limit(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``runtime.streams: 2`` runs the units on two arenas: where parameters plus one arena fit the limit and
    parameters plus two do not, Algorithm 9's early exit does not apply, and the build fits the limit by parts
    (tiny: 0.31 MB on one stream, 0.51 MB on two)."""
    app = tmp_path / "tiny.yaml"
    app.write_text(Path(TINY).read_text() + "runtime: {streams: 2}\n")
    code, out, err = build(tmp_path, capsys, "--json", "--memory-limit", "0.45", *FAST)
    assert code == 0, err
    report = json.loads(out)
    assert not report["reduction"]["early_exit"]
    assert report["build"]["execution"] == "parts"
    assert report["build"]["footprint"]["plan_bytes"] <= 450_000
    code, out, err = build(tmp_path, capsys, "--json", "--memory-limit", "0.6", *FAST)  # two arenas fit
    assert code == 0, err
    report = json.loads(out)
    assert report["reduction"]["early_exit"] and report["build"]["streams"]["streams"] == 2
    assert report["build"]["footprint"]["plan_bytes"] <= 600_000


def test_tight_limit_chooses_a_reduction_and_saves_it(load_example, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = build(tmp_path, capsys, "--json", "--memory-limit", "0.25", *FAST)
    assert code == 0, err
    report = json.loads(out)  # stdout is one JSON object; progress went to stderr
    assert "reduction: 100%" in err
    reduction = report["reduction"]
    assert not reduction["early_exit"] and reduction["feasible"] and reduction["violations"] == []
    assert set(reduction) >= {"phases", "pareto", "chosen", "band_rows", "figures"}
    assert reduction["chosen"]["memory_bytes"] <= 250_000
    assert report["arena_bytes"] == reduction["chosen"]["arena_bytes"] < report["unreduced"]["arena_bytes"]
    assert report["lower_bound_bytes"] <= report["arena_bytes"]
    assert any(n > 1 for phases in reduction["phases"].values() for n in phases.values())
    app = load_example("tiny")
    bands = load_reduction(tmp_path / "tiny.plan.json", app)
    assert bands == reduction["band_rows"]
    strategy = load_reduction_strategy(tmp_path / "tiny.plan.json", app)  # partition cuts and tile groups
    assert set(strategy) == {"cuts", "tiles"}
    assert {s: list(c) for s, c in strategy["cuts"].items()} == reduction["cuts"]
    assert {s: [[list(g), b] for g, b in t] for s, t in strategy["tiles"].items()} == reduction["tiles"]
    references = References(app)  # spot check: the chosen configuration, run for real, equals the models
    with Runtime.from_app(app, parts=app_parts(app, bands, {}, strategy)) as runtime:
        assert runtime.arena_bytes == reduction["figures"]["executor_arena_bytes"]
        for scenario in runtime.scenarios:
            runtime.switch(scenario)
            frame = random_frame(app, 3)
            assert_equivalent(runtime.infer(frame), references.outputs(scenario, frame), scenario)


def test_text_report_prints_the_pareto_front(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = build(tmp_path, capsys, "--memory-limit", "0.25", *FAST)
    assert code == 0
    assert "Pareto front" in out and "chosen:" in out and "band heights are saved in the plan" in out


def test_unreachable_limit_is_one_line_with_the_smallest_figure(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = build(tmp_path, capsys, "--json", "--memory-limit", "0.01", *FAST)
    assert code == 2 and out == ""
    lines = [line for line in err.splitlines() if line.startswith("sbrs:")]
    assert len(lines) == 1 and "smallest memory" in lines[0] and "bytes" in lines[0]


def test_min_fps_nobody_meets_names_the_constraint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = build(tmp_path, capsys, "--json", "--memory-limit", "0.25", "--min-fps", "skip=1e9", *FAST)
    assert code == 2
    report = json.loads(out)
    assert any("min_fps of scenario 'skip'" in v for v in report["reduction"]["violations"])
    assert "min_fps of scenario 'skip'" in err.splitlines()[-1] and "no configuration reaches it" in err


@pytest.mark.parametrize("bad", [["--min-fps", "skip"], ["--min-fps", "nobody=3"], ["--memory-limit", "-1"]])
def test_bad_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: list[str]) -> None:
    args = ["--memory-limit", "0.25", *FAST] if "--memory-limit" not in bad else FAST
    code, _, err = build(tmp_path, capsys, *args, *bad)
    assert code == 2 and err.startswith("sbrs: error:")


def test_an_unknown_min_fps_scenario_is_refused_without_a_limit_too(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = build(tmp_path, capsys, "--min-fps", "nobody=3", *FAST)
    assert code == 2 and out == ""
    assert err.startswith("sbrs: error:") and "unknown scenario(s) nobody" in err
    assert not (tmp_path / "tiny.plan.json").exists() and not (tmp_path / "tiny.build").exists()


def test_sbrs_build_runs_the_benchmarks_search(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One search, one answer: ``sbrs build`` searches with the frame streamed, as ``benchmarks/reduction.py``
    does, so the front it reports is that search's front (the same seed and cost model give the same points)."""
    from sbrs.app import load_app
    from sbrs.model.fold import fold_model
    from sbrs.reduction import AnalyticCostModel, GaParams, reduce_buffers
    from sbrs.reduction.search import band_streams

    code, out, err = build(tmp_path, capsys, "--json", "--memory-limit", "0.25", *FAST)
    assert code == 0, err
    reduction = json.loads(out)["reduction"]
    app = load_app(tmp_path / "tiny.yaml")
    models = {s: fold_model(m) for s, m in app.models.items()}
    params = GaParams(population=8, generations=2, seed=0)
    streamed = reduce_buffers(models, memory_limit=250_000, cost=AnalyticCostModel(), params=params,
                              stream_input=True, streams=band_streams(app))
    whole = reduce_buffers(models, memory_limit=250_000, cost=AnalyticCostModel(), params=params)
    one_stream = reduce_buffers(models, memory_limit=250_000, cost=AnalyticCostModel(), params=params,
                                stream_input=True)
    assert reduction["pareto"] == [p.to_dict() for p in streamed.pareto]
    assert reduction["chosen"] == streamed.chosen.to_dict()
    assert min(p["memory_bytes"] for p in reduction["pareto"]) <= whole.pareto[0].memory_bytes
    # band streams add configurations, never a smaller one: the minimum is the one-stream search's
    assert streamed.pareto[0] == one_stream.pareto[0]
