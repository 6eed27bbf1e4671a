"""``sbrs build --memory-limit`` (Algorithm 9 wired in), the measured cost model and a GA choice run for real."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sbrs.cli import main
from sbrs.model import CnnModel
from sbrs.model.fold import fold_model
from sbrs.reduction import GaParams, MeasuredCostModel, layer_height, reduce_buffers
from sbrs.runtime.parts_build import load_reduction, load_reduction_strategy
from sbrs.runtime.parts_cost import cached_costs, costs_path, measure_costs
from sbrs.runtime.reduced import ReducedRuntime, reduced_plan, runtime_from_app
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
    with runtime_from_app(app, reduced_plan(app, bands, {}, strategy)) as runtime:
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


def test_measured_costs_are_cached_and_drive_the_search(load_example) -> None:
    app = load_example("tiny")
    models: dict[str, CnnModel] = {"full": app.models["full"]}
    candidates = (0, 8, 1)
    assert cached_costs(models, candidates, measure=False) is None
    table = cached_costs(models, candidates)
    assert table is not None and costs_path(models, candidates).is_file()
    assert MeasuredCostModel.load(costs_path(models, candidates)) == table
    model = fold_model(models["full"])  # the table holds the folded layers the GA sees
    banded = [layer for layer in model.layers if layer.op == "Conv" and layer_height(layer) > 8]
    for layer in banded:
        whole, one_row = table.layer_seconds(layer, layer_height(layer)), table.layer_seconds(layer, 1)
        assert whole > 0 and one_row > 0
        assert one_row != table.fallback.layer_seconds(layer, 1)  # measured, not the analytic fallback
    result = reduce_buffers(models, memory_limit=int(0.9 * reduce_buffers(models).chosen.memory_bytes), cost=table,
                            params=GaParams(population=8, generations=2, candidates=candidates))
    assert result.feasible
    frame = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    references = References(app)
    with ReducedRuntime.from_models(models, result.band_rows, cuts=result.cuts, tiles=result.tiles) as runtime:
        assert_equivalent(runtime.infer(frame), references.outputs("full", frame), "GA choice")
    assert measure_costs(models, (0, 4), repeats=1).entries  # a direct measurement works too
