"""A supergraph layer whose weights differ per scenario (par ∈ A) runs as separate units, one per weight value."""

from __future__ import annotations

from pathlib import Path

from sbrs.app import load_app
from sbrs.runtime import runtime_for
from tests.runtime.conftest import References, assert_equivalent, random_frame

APP = """
name: par-demo
input: {name: input, shape: [1, 3, 16, 16], dtype: float32}
adaptive: [I, O, par]
initial: a
scenarios:
  - {name: a, seed: 1, layers: &net [{name: c1, op: conv, out: 8, kernel: 3, pad: 1, act: relu},
                                     {name: c2, op: conv, out: 8, kernel: 3, pad: 1, act: relu},
                                     {name: pool, op: gap}, {name: flat, op: flatten}, {name: fc, op: fc, out: 4}],
     requirements: {accuracy: 1.0}}
  - {name: b, seed: 2, layers: *net, requirements: {accuracy: 1.0}}
"""


def test_layers_with_other_weights_are_separate_units_and_still_equivalent(tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(APP)
    app = load_app(path)
    references = References(app)
    for granularity in ("auto", "layer"):
        with runtime_for(app, granularity=granularity) as runtime:
            plan = runtime.plan
            with_par = [unit for unit in plan.units if any(step.values for step in unit.steps)]
            assert len(with_par) >= 2  # steps keyed by their par value: one unit per weight value
            assert all(len(unit.scenarios) == 1 for unit in with_par)
            for scenario in ("a", "b", "a"):
                runtime.switch(scenario)
                frame = random_frame(app, 4)
                assert_equivalent(runtime.infer(frame), references.outputs(scenario, frame), f"{granularity} {scenario}")
