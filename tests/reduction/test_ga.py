"""Algorithm 9 (GA buffers reduction) and Algorithm 10 (derivation), and the cost models."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from sbrs import zoo
from sbrs.errors import InputError
from sbrs.model import CnnModel, import_model, params_bytes
from sbrs.model.fold import fold_model
from sbrs.reduction import (
    AnalyticCostModel,
    GaParams,
    MeasuredCostModel,
    ReductionResult,
    cut_genes,
    figure_4_1_model,
    ga,
    layer_height,
    model_fps,
    plan_reduction,
    reduce_buffers,
    reduction_genes,
    tile_genes,
)
from sbrs.reduction.ga import relative_speed

SMALL = GaParams(population=10, generations=3, seed=7)


@cache
def scenarios() -> dict[str, CnnModel]:
    """Two MobileNetV2 variants from one backbone (shared weights), small enough for a fast GA."""
    a = import_model(zoo.build("mobilenet_v2", resolution=64, width=0.5), name="full")
    b = import_model(zoo.build("mobilenet_v2", resolution=64, width=0.5, drop_blocks=[4, 5, 8, 9]), name="lite")
    return {"full": a, "lite": b}


@cache
def unreduced_bytes() -> int:
    return plan_reduction(scenarios()).memory_bytes


@cache
def tight_run() -> ReductionResult:
    return reduce_buffers(scenarios(), memory_limit=unreduced_bytes() - 1, params=SMALL)


def test_early_exit_when_reuse_alone_fits() -> None:
    """Algorithm 9, lines 1-5: no limit, or a loose one, returns the unreduced application with Φ = 1."""
    for limit in (None, unreduced_bytes(), 10**12):
        result = reduce_buffers(scenarios(), memory_limit=limit, params=SMALL)
        assert result.early_exit and result.feasible and result.evaluations == 1
        assert all(n == 1 for phases in result.phases.values() for n in phases.values())
        assert result.chosen == result.unreduced and result.pareto == (result.unreduced,)
        assert result.chosen.memory_bytes == unreduced_bytes()


def test_chosen_configuration_meets_the_memory_limit() -> None:
    result = tight_run()
    assert not result.early_exit and result.feasible and result.violations == ()
    assert result.chosen.memory_bytes <= unreduced_bytes() - 1
    assert any(n > 1 for phases in result.phases.values() for n in phases.values())
    # the chosen configuration is reproduced by Algorithm 10 through the public API
    plan = plan_reduction(scenarios(), result.band_rows, cuts=result.cuts, tiles=result.tiles)
    assert plan.memory_bytes == result.chosen.memory_bytes
    assert plan.fps == pytest.approx(result.chosen.fps)
    assert plan.phases == result.phases


def test_pareto_front_is_non_dominated_and_contains_chosen() -> None:
    result = tight_run()
    front = result.pareto
    assert result.chosen in front
    names = list(scenarios())
    for p in front:
        for q in front:
            if p is q:
                continue
            better_or_equal = q.memory_bytes <= p.memory_bytes and all(q.fps[s] >= p.fps[s] for s in names)
            strictly = q.memory_bytes < p.memory_bytes or any(q.fps[s] > p.fps[s] for s in names)
            assert not (better_or_equal and strictly)
    # Algorithm 9, line 14 (sbrs: the fastest, not the smallest): no member meeting the constraints is faster
    # relative to the unreduced configuration; among the as fast, none is smaller
    meeting = [p for p in front if p.meets(result.memory_limit, result.min_fps)]
    speed = {id(p): relative_speed(p, result.unreduced, names) for p in meeting}
    assert speed[id(result.chosen)] == max(speed.values())
    assert result.chosen.memory_bytes == min(p.memory_bytes for p in meeting if speed[id(p)] == max(speed.values()))


def test_seeded_runs_are_reproducible_and_json_ready() -> None:
    first = tight_run()
    again = reduce_buffers(scenarios(), memory_limit=unreduced_bytes() - 1, params=SMALL)
    assert again.to_json() == first.to_json()
    data = json.loads(first.to_json())
    assert {"phases", "band_rows", "pareto", "chosen"} <= set(data)
    assert set(data["phases"]) == {"full", "lite"}


def test_progress_callback_reports_every_generation() -> None:
    calls: list[tuple[int, int]] = []
    reduce_buffers(scenarios(), memory_limit=unreduced_bytes() - 1,
                   params=GaParams(population=6, generations=2, seed=1), progress=lambda d, t: calls.append((d, t)))
    assert calls == [(0, 2), (1, 2), (2, 2)]


def test_memory_limit_below_the_weights_is_refused_before_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    weights = params_bytes(fold_model(m) for m in scenarios().values())
    monkeypatch.setattr(ga, "_Evaluator", None)  # no configuration is evaluated: nothing can reach such a limit
    with pytest.raises(InputError) as info:
        reduce_buffers(scenarios(), memory_limit=weights - 1, params=GaParams(population=6, generations=1))
    message = str(info.value)
    assert "\n" not in message and message.startswith("memory_limit_mb: memory limit ")
    assert f"the weights alone take {weights / 1e6:.6g} MB ({weights} bytes)" in message


def test_memory_limit_below_every_configuration_is_an_input_error() -> None:
    limit = params_bytes(fold_model(m) for m in scenarios().values()) + 1000  # above the weights, below any arena
    with pytest.raises(InputError) as info:
        reduce_buffers(scenarios(), memory_limit=limit, params=GaParams(population=6, generations=1))
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"memory_limit_mb: memory limit {limit / 1e6:.6g} MB is below")
    smallest = int(message.split("reached: ")[1].split("(")[1].split(" bytes")[0])
    assert smallest > limit
    # that figure is reachable: asking for exactly it succeeds
    result = reduce_buffers(scenarios(), memory_limit=smallest, params=GaParams(population=6, generations=1))
    assert result.feasible and result.chosen.memory_bytes <= smallest


def test_min_fps_nobody_meets_is_reported() -> None:
    result = reduce_buffers(scenarios(), memory_limit=unreduced_bytes() - 1, min_fps={"lite": 1e9}, params=SMALL)
    assert not result.feasible
    assert len(result.violations) == 1
    assert "min_fps of scenario 'lite'" in result.violations[0] and "no configuration reaches it" in result.violations[0]
    assert result.chosen.memory_bytes <= unreduced_bytes() - 1  # line 16: minimal memory of the front
    early = reduce_buffers(scenarios(), memory_limit=None, min_fps={"full": 1e9})
    assert early.early_exit and not early.feasible and "scenario 'full'" in early.violations[0]


def test_bad_input_is_reported() -> None:
    with pytest.raises(InputError, match="unknown scenario"):
        reduce_buffers(scenarios(), min_fps={"nope": 1.0})
    with pytest.raises(InputError, match="unknown layer"):
        plan_reduction(scenarios(), {"full": {"no-such-layer": 1}})
    conv = next(layer.name for layer in scenarios()["full"].layers if layer.op == "Conv")
    with pytest.raises(InputError, match="band height"):
        plan_reduction(scenarios(), {"full": {conv: 0}})


def test_genes_cover_row_local_layers_with_clipped_candidates() -> None:
    model = figure_4_1_model()
    genes = reduction_genes({"fig": model})
    assert [(g.layer, g.choices) for g in genes] == [("l2", (16, 8, 4, 2, 1)), ("l3", (4, 2, 1))]
    streamed = reduction_genes({"fig": model}, stream_input=True)
    assert streamed[0].layer == "l1" and streamed[0].choices == (32, 16, 8, 4, 2, 1)


def test_analytic_cost_model_matches_design_measurements() -> None:
    """DESIGN.md: a depthwise conv in 1-row bands costs 14x the whole layer, 8-row 3.3x, 16-row 2.4x."""
    cost = AnalyticCostModel()
    assert cost.band_factor(1, 112) == pytest.approx(14.0)
    assert cost.band_factor(8, 112) == pytest.approx(3.3, rel=0.1)
    assert cost.band_factor(16, 112) == pytest.approx(2.4, rel=0.1)
    assert cost.band_factor(112, 112) == 1.0
    model = scenarios()["full"]
    whole = model_fps(model, {}, cost)
    banded = model_fps(model, {layer.name: 1 for layer in model.layers}, cost)
    assert banded < whole


def test_measured_costs_override_and_round_trip(tmp_path: Path) -> None:
    model = scenarios()["full"]
    conv = next(layer for layer in model.layers if layer.op == "Conv")
    measured = MeasuredCostModel(device="test-box").with_measurements([(conv, 1, 0.5), (conv, 10**6, 0.01)])
    assert measured.layer_seconds(conv, 1) == 0.5
    assert measured.layer_seconds(conv, layer_height(conv)) == 0.01  # whole height stored under the height
    other = next(layer for layer in model.layers if layer.op == "Clip")
    assert measured.layer_seconds(other, 1) == AnalyticCostModel().layer_seconds(other, 1)
    path = measured.save(tmp_path / "costs.json")
    assert MeasuredCostModel.load(path) == measured
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(InputError, match="cost table"):
        MeasuredCostModel.load(tmp_path / "bad.json")
    # a measured model drives the GA like the analytic one
    result = reduce_buffers(scenarios(), memory_limit=unreduced_bytes() - 1, cost=measured,
                            params=GaParams(population=6, generations=1))
    assert result.feasible


def test_tied_followers_share_their_producers_gene() -> None:
    """Batch norm, activations and residual adds follow the gene of the layer whose rows they read 1:1.

    The search runs on folded models (conv→BN→ReLU6 one layer), so its genes are those of the folded model.
    """
    model = fold_model(scenarios()["full"])
    free = reduction_genes({"full": model})
    tied = reduction_genes({"full": model}, tie_followers=True)
    assert len(tied) < len(free)
    covered = [layer for gene in tied for layer in gene.layers]
    assert sorted(covered) == sorted(gene.layer for gene in free)  # every layer set by exactly one gene
    ops = {layer.name: layer.op for layer in model.layers}
    assert all(ops[f] in ("BatchNormalization", "Clip", "Relu", "Add") for g in tied for f in g.followers)
    result = reduce_buffers(scenarios(), memory_limit=unreduced_bytes() - 1, params=SMALL)
    for gene in tied:
        if gene.scenario in result.band_rows:
            assert len({result.band_rows[gene.scenario][layer] for layer in gene.layers}) == 1


def test_search_chooses_strategy_per_region_within_a_time_budget() -> None:
    """Band, cut and tile genes in one chromosome; a tiled or cut choice the search returns is reproduced by
    Algorithm 10 and runs; a time budget of zero stops after the initial population."""
    models = {s: fold_model(m) for s, m in scenarios().items()}
    assert cut_genes(models) and tile_genes(models)
    result = reduce_buffers(models, memory_limit=unreduced_bytes() - 1, params=GaParams(population=10, generations=3))
    kinds = {point_kind for point in result.pareto for point_kind in
             (("tile",) if point.tiles else ()) + (("cut",) if point.cuts else ())}
    assert kinds, "no front member uses tiles or cuts"
    for point in result.pareto:
        plan = plan_reduction(models, point.band_rows, cuts=point.cuts, tiles=point.tiles)
        assert plan.memory_bytes == point.memory_bytes
    quick = reduce_buffers(models, memory_limit=unreduced_bytes() - 1,
                           params=GaParams(population=10, generations=50, time_budget_s=0.0))
    assert quick.generations == 0 and quick.chosen.memory_bytes <= unreduced_bytes() - 1
