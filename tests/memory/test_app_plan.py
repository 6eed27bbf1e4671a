"""The app memory plan: checked on every example, on the bound, deterministic, saved and refused when stale."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbrs.app import load_app
from sbrs.app.app import App
from sbrs.cli import main
from sbrs.errors import InputError
from sbrs.memory import (
    ArenaPlan,
    Problem,
    ReusePlan,
    buffers_reuse,
    build_plan,
    check_plan,
    check_reuse,
    load_plan,
    lower_bound,
    memory_problem,
    naive_total_bytes,
    save_plan,
    scenario_schedule,
)
from sbrs.memory.app_plan import plan_scenarios
from sbrs.moc import derive_moc
from tests.conftest import APPS, REPO_BUILDS
from tests.moc.cnn_helpers import program_model, scenario_programs

pytestmark = REPO_BUILDS  # builds an example app inside the repository (tests/conftest.py)


@pytest.fixture(scope="module", params=APPS, ids=[p.stem for p in APPS])
def example(request: pytest.FixtureRequest) -> App:
    return load_app(request.param)


def test_example_plan_is_valid_on_the_bound_and_below_algorithm_8(example: App) -> None:
    plan = build_plan(example)
    problem = Problem.from_dict(plan.problem)
    arena, reuse = ArenaPlan.from_dict(plan.arena), ReusePlan.from_dict(plan.reuse)
    assert check_plan(problem, arena) == [] and check_reuse(problem, reuse) == []
    memory = plan.memory
    assert memory.lower_bound_bytes <= memory.arena_bytes <= 1.02 * memory.lower_bound_bytes
    assert memory.arena_bytes <= memory.reuse_bytes <= memory.supergraph_tensor_bytes
    assert memory.supergraph_tensor_bytes <= memory.naive_bytes + 64 * len(problem.blocks)
    # Scenarios never run at once: the app needs what its hungriest scenario needs, and no more.
    assert memory.lower_bound_bytes == max(f.lower_bound_bytes for f in plan.per_scenario.values())
    assert memory.naive_bytes == sum(f.naive_bytes for f in plan.per_scenario.values())
    assert memory.params_bytes <= sum(f.params_bytes for f in plan.per_scenario.values())
    assert memory.params_bytes + memory.arena_bytes < naive_total_bytes(example)


def test_every_scenario_tensor_is_planned(example: App) -> None:
    moc = derive_moc(example.models, example.config.adaptive)
    problem = memory_problem(moc, example.models)
    planned = set(problem.ids)
    for scenario, model in example.models.items():
        schedule = scenario_schedule(moc, scenario, model)
        assert len(schedule) == len(model.layers)
        touched = {t for _, reads, writes in schedule for t in (*reads, *writes)}
        assert touched <= planned
        # one supergraph tensor per distinct data tensor of the scenario
        assert len(touched) == len(model.tensors)


def test_plans_are_deterministic() -> None:
    app = load_app(next(p for p in APPS if p.stem == "cifar10"))
    assert build_plan(app).to_dict() == build_plan(app).to_dict()


def test_saved_plan_loads_and_stale_or_tampered_plans_are_refused(tmp_path: Path) -> None:
    app_dir = tmp_path / "apps"
    shutil.copytree(Path(APPS[0]).parent, app_dir)
    shutil.copytree(Path(APPS[0]).parent.parent / "scenarios", tmp_path / "scenarios")
    app_file = app_dir / "tiny.yaml"
    app = load_app(app_file)
    plan = build_plan(app)
    path = save_plan(plan, tmp_path / "tiny.plan.json")
    assert load_plan(path, app).report() == plan.report()

    document = json.loads(path.read_text())
    document["plan"]["arena"]["offsets"][0][1] += 64
    tampered = tmp_path / "tampered.plan.json"
    tampered.write_text(json.dumps(document))
    with pytest.raises(InputError, match="checksum mismatch"):
        load_plan(tampered, app)

    # Settings the plan does not depend on leave it valid; the models and A do not.
    app_file.write_text(app_file.read_text().replace("accuracy: 90.0, fps: 800", "accuracy: 91.0, fps: 800"))
    assert load_plan(path, load_app(app_file)).fingerprint == plan.fingerprint
    app_file.write_text(app_file.read_text().replace("adaptive: [I, O, par]", "adaptive: [I, O]"))
    with pytest.raises(InputError, match="stale plan"):
        load_plan(path, load_app(app_file))
    app_file.write_text(app_file.read_text().replace("adaptive: [I, O]", "adaptive: [I, O, par]").replace(
        "{name: head, op: fc, out: 10}", "{name: head, op: fc, out: 12}"))
    with pytest.raises(InputError, match="stale plan"):
        load_plan(path, load_app(app_file))

    with pytest.raises(InputError, match="no such plan file"):
        load_plan(tmp_path / "missing.json", app)
    (tmp_path / "garbage.json").write_text("{not json")
    with pytest.raises(InputError, match="not a readable plan"):
        load_plan(tmp_path / "garbage.json", app)


def test_build_json_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app_path = next(p for p in APPS if p.stem == "pamap2")
    assert main(["build", str(app_path), "--json", "--plan", str(tmp_path / "p.json")]) == 0
    report = json.loads(capsys.readouterr().out)
    for key in ("scenarios", "adaptive", "supergraph_layers", "supergraph_edges", "control_parameters",
                "params_bytes", "naive_bytes", "reuse_bytes", "arena_bytes", "lower_bound_bytes", "per_scenario"):
        assert key in report
    for figures in report["per_scenario"].values():
        assert {"params_bytes", "naive_bytes", "arena_bytes", "lower_bound_bytes"} <= set(figures)
    assert (tmp_path / "p.json").is_file()


def test_build_table_and_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app_path = str(next(p for p in APPS if p.stem == "tiny"))
    assert main(["build", app_path, "--plan", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert "{I, O, par}" in out and "{I, O}" in out and "M_naive" in out
    assert main(["inspect", app_path]) == 0
    assert "supergraph layers shared by each pair" in capsys.readouterr().out
    assert main(["inspect", app_path, "--table"]) == 0
    assert "Capture table" in capsys.readouterr().out
    assert main(["inspect", app_path, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["supergraph_layers"] > 0 and set(summary["steps"]) == {"full", "skip", "exit"}


def test_memory_limit_below_reach_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app_path = tmp_path / "tiny.yaml"  # a copy: no build of apps/tiny.yaml for a limit
    app_path.write_text(next(p for p in APPS if p.stem == "tiny").read_text())
    assert main(["build", str(app_path), "--memory-limit", "0.01", "--plan", str(tmp_path / "p.json")]) == 2
    *progress, error = capsys.readouterr().err.splitlines()
    # throttled progress of the cost measurement and the search (only when a step takes over 2 s), then one error
    assert all(line.startswith(("measuring costs: ", "reduction: ")) for line in progress), progress
    assert error.startswith("sbrs: error: ") and "0.01 MB" in error and "smallest memory" in error


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs=scenario_programs(), adaptive=st.sampled_from([("I", "O", "par"), ("I", "O"), ("I", "O", "par")]))
def test_random_scenario_sets_plan_validly(programs, adaptive) -> None:  # type: ignore[no-untyped-def]
    models = {f"s{i}": program_model(program, name=f"s{i}") for i, program in enumerate(programs)}
    moc = derive_moc(models, adaptive)
    problem, arena, reuse, figures = plan_scenarios(moc, models)
    assert check_plan(problem, arena) == []
    assert check_reuse(problem, reuse) == []
    assert lower_bound(problem) <= arena.arena_bytes <= buffers_reuse(problem, aligned=True).total
    assert figures.arena_bytes == arena.arena_bytes


HAND_APP = """\
name: hand
input: {name: input, shape: [1, 1, 4, 4], dtype: float32}
adaptive: [I, O, par]
initial: wide
scenarios:
  - name: wide
    seed: 1
    layers:
      - {name: c1, op: conv, out: 2, kernel: 3, pad: 1, act: relu}
      - {name: c2, op: conv, out: 4, kernel: 1}
      - {name: pool, op: gap}
      - {name: flat, op: flatten}
      - {name: head_w, op: fc, out: 3}
  - name: narrow
    seed: 1
    layers:
      - {name: c1, op: conv, out: 2, kernel: 3, pad: 1, act: relu}
      - {name: pool, op: gap}
      - {name: flat, op: flatten}
      - {name: head_n, op: fc, out: 3}
"""


def test_a_saved_plan_keeps_the_apps_scenario_order_and_hand_counted_figures(tmp_path: Path) -> None:
    """Two scenarios small enough to count by hand, named against alphabetical order: the saved plan (whose
    file sorts its keys) gives its figures per scenario in the app's order, as the plan it saved (``sbrs report``
    draws its bars in that order), and the figures are the hand-counted ones.

    Parameters (float32): c1 2·1·3·3 + 2 = 20 floats, c2 4·2 + 4 = 12, head_w 3·4 + 3 = 15, head_n 3·2 + 3 = 9:
    wide 47 floats = 188 bytes, narrow 29 = 116, unique 56 = 224 (c1 shared). Lower bound, the most bytes live at
    one step: wide at c2, relu's output (2·16 floats) and c2's (4·16): 384 bytes; narrow at relu, conv's output
    and relu's: 256 bytes; the app: 384. Naive (one buffer per edge): wide 64 + 128 + 128 + 256 + 16 + 16 + 12 =
    620, narrow 64 + 128 + 128 + 8 + 8 + 12 = 348."""
    app_file = tmp_path / "hand.yaml"
    app_file.write_text(HAND_APP)
    app = load_app(app_file)
    plan = build_plan(app)
    loaded = load_plan(save_plan(plan, tmp_path / "hand.plan.json"), app)
    assert list(plan.per_scenario) == list(loaded.per_scenario) == ["wide", "narrow"]
    for figures in (plan, loaded):
        wide, narrow = figures.per_scenario["wide"], figures.per_scenario["narrow"]
        assert (wide.params_bytes, narrow.params_bytes, figures.memory.params_bytes) == (188, 116, 224)
        assert (wide.lower_bound_bytes, narrow.lower_bound_bytes, figures.memory.lower_bound_bytes) == (384, 256, 384)
        assert (wide.naive_bytes, narrow.naive_bytes, figures.memory.naive_bytes) == (620, 348, 968)
