"""``sbrs inspect``'s one-screen summary: at most 40 lines of 120 characters for every example app, figures
that agree with the plan, and the full capture table behind --table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sbrs.app import load_app
from sbrs.cli import main
from sbrs.memory.app_plan import build_plan
from sbrs.moc import derive_moc
from sbrs.report.summary import MAX_LINES, WIDTH, app_summary, format_summary
from tests.conftest import APPS


@pytest.mark.parametrize("app_path", APPS, ids=[p.stem for p in APPS])
def test_every_example_app_fits_one_screen(app_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(app_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert 5 <= len(lines) <= MAX_LINES
    assert max(len(line) for line in lines) <= WIDTH
    assert lines[0].startswith(f"app {load_app(app_path).name}: ")
    text = "\n".join(lines)
    for needed in ("supergraph layers shared by each pair", "parameters: ", "arena: ", "control parameters: ",
                   "--table"):
        assert needed in text


def test_summary_figures_agree_with_the_plan() -> None:
    app = load_app(next(p for p in APPS if p.stem == "tiny"))
    moc = derive_moc(app.models, app.config.adaptive)
    plan = build_plan(app)
    summary = app_summary(app, moc, plan)
    assert summary["params_bytes"] == plan.memory.params_bytes
    assert summary["arena_sum_bytes"] == sum(m.arena_bytes for m in plan.per_scenario.values())
    assert summary["params_sum_bytes"] >= summary["params_bytes"]  # shared weights count once
    # tiny: "skip" leaves out block1 and "exit" has its own head; every layer "skip" runs but the head is shared
    assert summary["scenarios"]["exit"]["own_layers"] == 3 and summary["scenarios"]["full"]["own_layers"] == 0
    assert summary["shared_layers"]["full|skip"] == summary["scenarios"]["skip"]["layers"]
    assert summary["control_parameters"]["count"] == len(moc.params)


def test_a_large_app_is_cut_to_one_screen() -> None:
    """Many scenarios and hundreds of control parameters still print within the bound, saying what is left out."""
    names = [f"scenario{i}" for i in range(30)]
    summary = {
        "app": "big", "adaptive": ["I", "O", "par"], "supergraph_layers": 2000, "supergraph_edges": 2500,
        "scenarios": {n: {"layers": 100, "own_layers": 1, "params_bytes": 10**6, "arena_bytes": 10**5} for n in names},
        "shared_layers": {f"{a}|{b}": 7 for i, a in enumerate(names) for b in names[i + 1:]},
        "reuse": {"full": 1000, "partial": 500, "none": 500},
        "params_bytes": 10**7, "params_sum_bytes": 3 * 10**7, "arena_bytes": 10**6, "arena_sum_bytes": 3 * 10**6,
        "lower_bound_bytes": 10**6,
        "control_parameters": {"count": 900, "by_attribute": {"par": 900},
                               "items": [{"id": f"p{i}", "attribute": "par", "layer": f"l{i}", "op": "Conv",
                                          "scenarios": names} for i in range(900)]},
    }
    lines = format_summary(summary).splitlines()
    assert len(lines) <= MAX_LINES and max(map(len, lines)) <= WIDTH
    text = "\n".join(lines)
    assert "more scenarios" in text and "more: sbrs inspect APP.yaml --json" in text and "more: --table" in text


def test_table_and_json_stay_as_they_were(capsys: pytest.CaptureFixture[str]) -> None:
    app_path = str(next(p for p in APPS if p.stem == "tiny"))
    assert main(["inspect", app_path, "--table"]) == 0
    table = capsys.readouterr().out
    assert "Capture table (thesis Table 5.1)" in table and "φ^full" in table
    assert main(["inspect", app_path, "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["steps"]) == {"full", "skip", "exit"}
