"""Algorithm 5 on zoo families (variants of one backbone built with one seed share the layers they keep) and
the rebuilt scenarios run in ONNX Runtime: they compute exactly what the original models compute."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sbrs import zoo
from sbrs.moc import assert_round_trip, derive_moc, format_capture_table, moc_summary, rebuild_scenario
from sbrs.model import CnnModel, import_model, to_onnx
from tests.conftest import ort_session

# family → scenario name → build options (small resolutions keep it fast)
FAMILIES: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {
    "resnet18": {
        "full": ("resnet18", {"resolution": 32}),
        "drop": ("resnet18", {"resolution": 32, "drop_blocks": [1, 3]}),
        "exit": ("resnet18", {"resolution": 32, "exit_stage": 2}),
    },
    "mobilenet_v2": {
        "full": ("mobilenet_v2", {"resolution": 32}),
        "drop": ("mobilenet_v2", {"resolution": 32, "drop_blocks": [2, 5]}),
    },
    "har_cnn": {
        "base": ("har_cnn", {}),
        "two_convs": ("har_cnn", {"conv_layers": 2}),
        "narrow_head": ("har_cnn", {"head_width": 128}),
    },
}
SETTINGS = [("I", "O", "par"), ("I", "O"), ("I", "par"), ()]


def _import(name: str, options: dict[str, Any], scenario: str) -> CnnModel:
    try:
        return import_model(zoo.build(name, **options), name=scenario)
    except Exception as exc:  # the zoo is built alongside this package
        pytest.skip(f"zoo model {name} {options} not available: {exc}")


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request: pytest.FixtureRequest) -> dict[str, CnnModel]:
    return {scenario: _import(name, options, scenario) for scenario, (name, options) in FAMILIES[request.param].items()}


@pytest.mark.parametrize("adaptive", SETTINGS, ids=lambda a: "A=" + ",".join(a))
def test_family_round_trip(family: dict[str, CnnModel], adaptive: tuple[str, ...]) -> None:
    moc = derive_moc(family, adaptive)
    assert_round_trip(moc, family)
    summary = moc_summary(moc)
    assert summary["supergraph_layers"] <= sum(len(m.layers) for m in family.values())
    format_capture_table(moc)


def test_family_stem_is_shared(family: dict[str, CnnModel]) -> None:
    """With A = {I, O, par} the first layers (input and the stem convolution) are fully reused."""
    moc = derive_moc(family, ("I", "O", "par"))
    first = next(iter(family))
    stem = family[first].layers[:2]
    for layer in stem:
        ids = {moc.layer_capture[s][layer.name] for s in family}
        assert len(ids) == 1, layer.name
        assert moc.layer(ids.pop()).reuse == "full"
    with_par = len(moc.layers)
    assert with_par <= len(derive_moc(family, ("I", "O")).layers)


def test_rebuilt_scenarios_compute_what_the_originals_compute() -> None:
    family = {s: _import(n, o, s) for s, (n, o) in FAMILIES["resnet18"].items()}
    moc = derive_moc(family, ("I", "O", "par"))
    weights: dict[str, np.ndarray] = {}
    for model in family.values():
        weights.update(model.weights.items())
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32), dtype=np.float32)
    for scenario, model in family.items():
        rebuilt = rebuild_scenario(moc, scenario, weights)
        outputs = []
        for cnn in (model, rebuilt):
            session = ort_session(to_onnx(cnn))
            outputs.append(session.run(None, {"input": x})[0])
        np.testing.assert_array_equal(outputs[0], outputs[1])
