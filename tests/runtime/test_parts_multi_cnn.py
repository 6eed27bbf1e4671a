"""Two different CNNs under one memory limit (issue: "Multi-CNN under a limit"): a MobileNetV2 and a CIFAR
ResNet, which share no layer, with ``memory_limit_mb`` 5 % under their unreduced plan, build by parts, run
within the limit equal to ONNX Runtime on each scenario's own model, and switch under SBRS-TP with no frame
lost. apps/multi-cnn.yaml (MobileNetV2 and ResNet-50 at 224) does the same at 120.3 MB against 126.6 MB
(docs/MEASUREMENTS.md); here the CNNs are small enough for CI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sbrs.app import load_app
from sbrs.runtime import runtime_for
from tests.runtime.conftest import References, assert_equivalent, build_under_its_plan, random_frame

APP = """name: two-cnns
input: {{name: input, shape: [1, 3, 64, 64], dtype: float32}}
initial: mobilenet
scenarios:
  - name: mobilenet
    zoo: {{name: mobilenet_v2, width: 0.35, resolution: 64, classes: 10}}
  - name: resnet
    zoo: {{name: cifar_resnet, depth: 8, resolution: 64}}
runtime: {{providers: [CPUExecutionProvider]}}
{limit}"""
@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """The app built once without a limit (its plan) and then with a limit 5 % under that plan."""
    path = tmp_path_factory.mktemp("two-cnns") / "two-cnns.yaml"
    return path, build_under_its_plan(path, APP)


def test_two_cnns_run_by_parts_within_five_percent_under_their_plan(limited: tuple[Path, int],
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path, unreduced = limited
    capsys.readouterr()
    app = load_app(path)
    refs = References(app)
    with runtime_for(path) as runtime:
        report = runtime.memory_report()
        assert runtime.execution == "parts" and report["within_limit"] is True
        assert report["total_bytes"] <= report["limit_bytes"] <= 0.95 * unreduced + 1
        assert runtime.node.mode == "sbrs-tp"
        frames = [random_frame(app, seed) for seed in range(8)]
        for scenario in runtime.scenarios:  # steady state
            runtime.switch(scenario)
            for seed, frame in enumerate(frames[:2]):
                assert_equivalent(runtime.infer(frame), refs.outputs(scenario, frame), f"{scenario} frame {seed}")

        runtime.switch("mobilenet")
        runtime.infer(frames[0])

        def stream():  # a switch requested while frames flow, both ways
            for index, frame in enumerate(frames):
                if index in (2, 5):
                    runtime.switch("resnet" if index == 2 else "mobilenet")
                yield frame

        results = list(runtime.process(stream(), order="stream"))
    assert [r.index for r in results] == list(range(len(frames)))  # no frame lost or run twice
    switches = [r.switch for r in results if r.switch is not None]
    assert {(s.old, s.new) for s in switches} == {("mobilenet", "resnet"), ("resnet", "mobilenet")}
    assert all(s.mode == "sbrs-tp" for s in switches)
    for result in results:
        assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]),
                          f"frame {result.index} on {result.scenario}")
    summary = json.loads(json.dumps(report))  # the report is JSON-ready
    assert summary["plan_tensors_bytes"] < unreduced - summary["params_bytes"]
