"""The measured cost model of the buffer-reduction search: cached, and driving a GA choice run for real."""

from __future__ import annotations

import numpy as np

from sbrs.compile.costs import cached_costs, costs_path, measure_costs
from sbrs.model import CnnModel
from sbrs.model.fold import fold_model
from sbrs.reduction import GaParams, MeasuredCostModel, layer_height, reduce_buffers
from sbrs.runtime.engine import Runtime
from tests.runtime.conftest import References, assert_equivalent


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
    with Runtime.from_models(models, result.band_rows, cuts=result.cuts, tiles=result.tiles) as runtime:
        assert_equivalent(runtime.infer(frame), references.outputs("full", frame), "GA choice")
    assert measure_costs(models, (0, 4), repeats=1).entries  # a direct measurement works too
