"""Execution units and the arena: sharing, fusion, the checked plan, bound views, owned outputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from unittest.mock import ANY

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sbrs.app import App, load_app
from sbrs.compile import UnitPlan, build_unit_plan
from sbrs.compile.arena import arena_problem
from sbrs.compile.layout import layout_units
from sbrs.compile.units import MIN_SWITCH_STEP_WORK
from sbrs.memory import check_plan, plan_arena
from sbrs.moc import derive_moc
from sbrs.model import layer_work
from sbrs.runtime import runtime_for
from tests.conftest import ort_session
from tests.runtime.conftest import References, assert_equivalent, random_frame


@pytest.mark.parametrize("name", ["tiny", "cifar10", "pamap2"])
def test_each_unit_is_loaded_once_however_many_scenarios_use_it(load_example: Callable[[str], App],
                                                                 name: str) -> None:
    app = load_example(name)
    with runtime_for(app) as runtime:
        plan = runtime.plan
        calls = sum(len(sequence) for sequence in plan.sequences.values())
        assert runtime.session_count == len(plan.units) < calls  # shared units: fewer sessions than calls
        assert any(len(unit.scenarios) > 1 for unit in plan.units)
        for unit in plan.units:
            for scenario in unit.scenarios:
                assert plan.sequences[scenario].count(unit.id) == 1


@pytest.mark.parametrize("name", ["tiny", "cifar10", "pamap2"])
def test_auto_makes_far_fewer_units_than_layer(load_example: Callable[[str], App], name: str) -> None:
    app = load_example(name)
    auto, layer = build_unit_plan(app, "auto"), build_unit_plan(app, "layer")
    assert len(layer.units) >= 3 * len(auto.units)
    for scenario, sequence in layer.sequences.items():
        assert all(len(layer.unit(u).steps) == 1 for u in sequence)
        assert len(auto.sequences[scenario]) < len(sequence)


def test_an_app_sharing_nothing_runs_each_scenario_as_one_unit(load_example: Callable[[str], App]) -> None:
    plan = build_unit_plan(load_example("multi-cnn"), "auto", transition="naive")
    assert {s: len(seq) for s, seq in plan.sequences.items()} == {"mobilenet": 1, "resnet": 1}


def test_sbrs_tp_cuts_frames_at_switch_points_of_similar_work(load_example: Callable[[str], App]) -> None:
    """Under SBRS-TP a frame is cut into up to ``switch_steps`` pieces (a switch waits for the step in flight);
    every piece holds at least MIN_SWITCH_STEP_WORK, and pieces of one frame carry similar work."""
    app = load_example("multi-cnn")
    plan = build_unit_plan(app, "auto", transition="sbrs-tp")
    moc = derive_moc(app.models, app.config.adaptive)
    for scenario, sequence in plan.sequences.items():
        model = app.models[scenario]
        work_of = {moc.layer_capture[scenario][layer.name]: layer_work(layer) for layer in model.compute_layers}
        works = [sum(work_of[layer_id] for layer_id in plan.unit(unit_id).layers) for unit_id in sequence]
        assert 2 <= len(sequence) <= app.config.runtime.unit_switch_steps + 1
        assert min(works) >= MIN_SWITCH_STEP_WORK
        assert max(works) <= 2.5 * sum(works) / app.config.runtime.unit_switch_steps


@pytest.mark.parametrize("granularity", ["auto", "layer"])
@pytest.mark.parametrize("name", ["tiny", "cifar10", "pamap2"])
def test_arena_plan_is_safe_and_every_bound_view_lies_inside(load_example: Callable[[str], App], name: str,
                                                             granularity: str) -> None:
    app = load_example(name)
    moc = derive_moc(app.models, app.config.adaptive)
    layout = layout_units(app.models, moc, granularity)
    problem = arena_problem(layout)
    plan = build_unit_plan(app, granularity, moc)
    offsets = dict((t.id, t.offset) for t in plan.tensors)
    assert check_plan(problem, plan_arena(problem)) == []
    assert plan.arena_bytes >= plan.arena_lower_bound
    assert plan.arena_bytes <= sum(-(-t.nbytes // 64) * 64 for t in plan.tensors)
    bound = {tensor for unit in plan.units for tensors in unit.input_tensors.values() for tensor in tensors}
    bound |= {tensor for unit in plan.units for tensor in unit.outputs}
    assert bound <= set(offsets)
    for tensor in plan.tensors:
        assert tensor.offset % 64 == 0 and tensor.offset >= 0 and tensor.offset + tensor.nbytes <= plan.arena_bytes
    with runtime_for(app, granularity=granularity) as runtime:
        bounds = runtime.arena_view_bounds()
        assert {tensor for tensor, _, _ in bounds} == set(offsets)
        assert all(0 <= start < end <= runtime.arena_bytes for _, start, end in bounds)


def test_unit_plan_round_trips_through_json(load_example: Callable[[str], App]) -> None:
    import json

    plan = build_unit_plan(load_example("tiny"))
    again = UnitPlan.from_dict(json.loads(plan.to_json()))
    assert again == plan
    assert plan.inner_memory == "onnxruntime"


def test_outputs_are_copies_owned_by_the_caller(load_example: Callable[[str], App]) -> None:
    app = load_example("tiny")
    frame = random_frame(app, 5)
    with runtime_for(app) as runtime:
        first = runtime.infer(frame)
        expected = {name: value.copy() for name, value in first.items()}
        for value in first.values():
            value[...] = 1e6
        second = runtime.infer(frame)
        other = runtime.infer(random_frame(app, 6))
    for name in expected:
        np.testing.assert_array_equal(second[name], expected[name])
        assert not np.shares_memory(second[name], other[name])


def test_small_shared_runs_are_compiled_into_each_scenario(load_example: Callable[[str], App]) -> None:
    """``runtime.share_min_mb``: a shared run holding less weight memory than the threshold is not worth its
    session boundaries; each user gets it fused into its own units (and the outputs stay exact)."""
    app = load_example("tiny")
    threshold = with_share_min_mb(app, 1.0)
    shared, private = build_unit_plan(app, "auto"), build_unit_plan(threshold, "auto")
    assert any(len(unit.scenarios) > 1 for unit in shared.units)
    assert all(len(unit.scenarios) == 1 for unit in private.units)
    assert all(len(calls) == 1 for calls in private.sequences.values())
    references = References(app)
    with runtime_for(threshold) as runtime:
        for scenario in runtime.scenarios:
            runtime.switch(scenario)
            frame = random_frame(app, 3)
            assert_equivalent(runtime.infer(frame), references.outputs(scenario, frame), scenario)


def test_large_shared_runs_stay_shared(load_example: Callable[[str], App]) -> None:
    app = with_share_min_mb(load_example("drone"), 1.0)
    plan = build_unit_plan(app, "auto")
    shared = [unit for unit in plan.units if len(unit.scenarios) > 1]
    assert shared and all(len(unit.scenarios) > 1 for unit in shared)
    assert len(plan.units) < sum(len(calls) for calls in plan.sequences.values())


def with_share_min_mb(app: App, megabytes: float) -> App:
    return replace(app, config=replace(app.config, runtime=replace(app.config.runtime, share_min_mb=megabytes)))


def test_a_gpu_provider_runs_one_unit_per_scenario_by_default(load_example: Callable[[str], App]) -> None:
    """On a GPU provider every unit is a session with a provider instance of its own (about 140 MiB measured):
    left out of the app, ``share_min_mb`` and ``switch_steps`` default so that drone's scenarios, which share
    less weight than that, run as one unit each; an app that sets them keeps them, and the CPU keeps sharing."""
    from sbrs.app.config import UNIT_DEFAULTS_CPU, UNIT_DEFAULTS_GPU

    drone = load_example("drone")

    def on(providers: tuple[str, ...], **options: object) -> App:
        runtime = replace(drone.config.runtime, providers=providers, share_min_mb=None, switch_steps=None)
        return replace(drone, config=replace(drone.config, runtime=replace(runtime, **options)))

    for provider in ("CUDAExecutionProvider", "TensorrtExecutionProvider"):
        gpu = on((provider, "CPUExecutionProvider"))
        assert (gpu.config.runtime.unit_share_min_mb, gpu.config.runtime.unit_switch_steps) == UNIT_DEFAULTS_GPU
        plan = build_unit_plan(gpu, "auto", transition="sbrs-tp")
        assert len(plan.units) == len(drone.models)
        assert all(len(unit.scenarios) == 1 for unit in plan.units)
        assert all(len(sequence) == 1 for sequence in plan.sequences.values())
    cpu = on(("CPUExecutionProvider",))
    assert (cpu.config.runtime.unit_share_min_mb, cpu.config.runtime.unit_switch_steps) == UNIT_DEFAULTS_CPU
    assert any(len(unit.scenarios) > 1 for unit in build_unit_plan(cpu, "auto", transition="sbrs-tp").units)
    chosen = on(("CUDAExecutionProvider", "CPUExecutionProvider"), share_min_mb=1.0, switch_steps=4)
    assert build_unit_plan(chosen, "auto", transition="sbrs-tp").units == build_unit_plan(cpu, "auto",
                                                                                          transition="sbrs-tp").units


def test_a_model_whose_input_has_another_name_than_the_apps_runs_on_units(tmp_path: Path) -> None:
    """The runtime binds frames by the app's ``input.name``; a model calling its input ``data`` failed with a
    KeyError on the first frame after ``sbrs check`` and ``sbrs build`` had passed (one graph and by parts ran)."""
    graph = helper.make_graph(
        [helper.make_node("Conv", ["data", "weight"], ["conv"]), helper.make_node("Relu", ["conv"], ["logits"])],
        "renamed", [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 2, 8, 8])],
        [numpy_helper.from_array(np.random.default_rng(0).standard_normal((2, 3, 1, 1)).astype(np.float32), "weight")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(tmp_path / "renamed.onnx"))
    (tmp_path / "app.yaml").write_text("name: renamed\ninput: {name: input, shape: [1, 3, 8, 8]}\n"
                                       "scenarios:\n  - {name: only, model: renamed.onnx}\n")
    app = load_app(tmp_path / "app.yaml")
    assert build_unit_plan(app, "auto").inputs == {"only": {"input": ANY}}
    frame = random_frame(app, seed=1)
    with runtime_for(app) as runtime:
        got = runtime.infer(frame)
    want = ort_session(tmp_path / "renamed.onnx").run(None, {"data": frame})[0]
    np.testing.assert_array_equal(got["logits"], want)
