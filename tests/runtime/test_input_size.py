"""Scenarios at their own input size (app.yaml ``input_size: [H, W]``): one dynamic-size ONNX file backs
scenarios at three sizes and a zoo export at a fixed other size joins them. Frames arrive at the app's shape;
each scenario's output equals plain ONNX Runtime running the documented Resize and then the scenario's own
model, in steady state, across switches between sizes (SBRS-TP, no frame lost) and by parts under a limit."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from sbrs import zoo
from sbrs.app import load_app
from sbrs.cli import main
from sbrs.model import params_bytes
from sbrs.runtime import runtime_for
from tests.runtime.conftest import References, assert_equivalent, build_under_its_plan, random_frame

ZOO = {"width": 0.35, "classes": 10}
APP = """name: resolutions
input: {{name: input, shape: [1, 3, 64, 64], dtype: float32}}
initial: full
scenarios:
  - name: full
    model: dynamic.onnx
  - name: half
    model: dynamic.onnx
    input_size: [32, 32]
  - name: wide
    model: dynamic.onnx
    input_size: [40, 56]
  - name: fixed
    zoo: {{name: mobilenet_v2, width: 0.35, classes: 10}}
    input_size: [48, 48]
runtime: {{providers: [CPUExecutionProvider]}}
{limit}"""


def dynamic_size_export(path: Path) -> Path:
    """A zoo MobileNetV2 with a symbolic height and width, as a dynamic-axes export writes it."""
    model = zoo.build("mobilenet_v2", resolution=64, **ZOO)
    for dim, name in zip(model.graph.input[0].type.tensor_type.shape.dim[2:], ("height", "width"), strict=True):
        dim.Clear()
        dim.dim_param = name
    del model.graph.value_info[:]
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def app_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("resolutions")
    dynamic_size_export(folder / "dynamic.onnx")
    path = folder / "resolutions.yaml"
    path.write_text(APP.format(limit=""))
    return path


def test_scenarios_of_one_file_at_several_sizes_hold_the_parameters_of_one_model(app_path: Path) -> None:
    app = load_app(app_path)
    one = params_bytes([app.models["full"]])
    sizes = 4 * 8  # each Resize's own parameter: its sizes, four int64
    # every weight is shared, the zoo export's at 48 pixels too (seeded alike)
    assert params_bytes(app.models.values()) == one + 3 * sizes
    for name, size in (("half", (32, 32)), ("wide", (40, 56)), ("fixed", (48, 48))):
        model = app.models[name]
        assert params_bytes([model]) == one + sizes
        first = model.compute_layers[0]
        assert first.op == "Resize"
        assert model.tensors[first.inputs[0]].shape == (1, 3, 64, 64)
        assert model.tensors[first.outputs[0]].shape == (1, 3, *size)
    assert app.models["full"].compute_layers[0].op != "Resize"


def test_each_size_equals_resize_then_the_model_and_switches_lose_no_frame(app_path: Path) -> None:
    app = load_app(app_path)
    refs = References(app)
    frames = [random_frame(app, seed) for seed in range(8)]
    with runtime_for(app) as runtime:
        for scenario in runtime.scenarios:
            runtime.switch(scenario)
            for seed, frame in enumerate(frames[:2]):
                assert_equivalent(runtime.infer(frame), refs.outputs(scenario, frame), f"{scenario} frame {seed}")
        runtime.switch("full")
        order = {1: "half", 3: "wide", 5: "fixed", 6: "full"}

        def stream():
            for index, frame in enumerate(frames):
                if index in order:
                    runtime.switch(order[index])
                yield frame

        results = list(runtime.process(stream(), order="stream"))
        assert runtime.node.mode == "sbrs-tp"
    assert [r.index for r in results] == list(range(len(frames)))
    assert len({r.scenario for r in results}) >= 3
    for result in results:
        assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]),
                          f"frame {result.index} on {result.scenario}")


def test_a_build_by_parts_under_a_limit_equals_resize_then_the_model(app_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    folder = app_path.parent / "limited"
    folder.mkdir(exist_ok=True)
    (folder / "dynamic.onnx").write_bytes((app_path.parent / "dynamic.onnx").read_bytes())
    path = folder / "resolutions.yaml"
    build_under_its_plan(path, APP)
    capsys.readouterr()
    app = load_app(path)
    refs = References(app)
    with runtime_for(path) as runtime:
        assert runtime.execution == "parts" and runtime.memory_report()["within_limit"] is True
        for scenario in runtime.scenarios:
            runtime.switch(scenario)
            frame = random_frame(app, 3)
            assert_equivalent(runtime.infer(frame), refs.outputs(scenario, frame), f"{scenario} by parts")


def test_inspect_shows_the_resized_scenarios(app_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(app_path)]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("full", "half", "wide", "fixed"))


def test_algorithm_5_shares_the_layers_of_every_size_through_io_control_parameters(app_path: Path) -> None:
    """The same layer at two sizes is one supergraph layer whose I and O edges (and so X and Y) differ per
    scenario; an ONNX Runtime session has one size, so the units of different sizes stay apart."""
    from sbrs.compile.layout import layout_units
    from sbrs.moc import derive_moc, round_trip_differences

    app = load_app(app_path)
    moc = derive_moc(app.models, app.config.adaptive)
    assert round_trip_differences(moc, app.models) == []
    convs = [layer for layer in moc.layers if layer.op == "Conv"]
    assert convs and all(layer.sized and set(layer.scenarios) == {"full", "half", "wide", "fixed"} for layer in convs)
    assert all({"I", "O"} <= set(layer.control) and "par" not in layer.control for layer in convs)
    head = next(layer for layer in moc.layers if layer.op == "Gemm")
    assert not head.sized and head.reuse == "full"  # after the global pool every size gives the same tensor
    layout = layout_units(app.models, moc, "auto")
    steps = {s: {step.layer_id: step for step in moc.steps[s]} for s in moc.scenarios}
    for unit in layout.units:  # a unit several scenarios run has one size in all of them
        for key in unit.steps:
            assert len({moc.step_specs(steps[s][key.layer]) for s in unit.scenarios}) == 1, (unit.id, key)
    first = convs[0].id  # at the first convolution every scenario has its own size, so its own unit
    assert sorted(s for unit in layout.units if any(k.layer == first for k in unit.steps)
                  for s in unit.scenarios) == sorted(app.models)
    assert sum(any(k.layer == first for k in unit.steps) for unit in layout.units) == 4


def test_two_scenarios_at_the_same_size_share_everything(tmp_path: Path) -> None:
    from sbrs.moc import derive_moc

    dynamic_size_export(tmp_path / "dynamic.onnx")
    path = tmp_path / "same.yaml"
    path.write_text(APP.format(limit="").replace("input_size: [40, 56]", "input_size: [32, 32]"))
    app = load_app(path)
    moc = derive_moc(app.models, app.config.adaptive)
    assert set(moc.layer_capture["half"].values()) == set(moc.layer_capture["wide"].values())
    assert [s.values for s in moc.steps["half"]] == [s.values for s in moc.steps["wide"]]  # same edges too
