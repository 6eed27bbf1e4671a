"""Processing by parts inside the one runtime (``sbrs.runtime.engine``, a plan by parts): an app with ``memory_limit_mb`` runs
band calls behind the ``Runtime`` API, within its limit, with outputs equal to ONNX Runtime on each scenario's
own model (invariant 1), in steady state and on both frames around every switch, under SBRS-TP and naive;
with the frame streamed too (a band on the graph input: feeds copy its rows into a line buffer), in memory and
from a build.

The app is tests/data/limited/limited.yaml (two zoo CIFAR ResNet-14 scenarios, 0.87 MB limit against 0.89 MB
unreduced), built once per module with a small search (``sbrs build --generations 6 --population 12``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sbrs.app import App, load_app
from sbrs.cli import main
from sbrs.compile.fit import app_parts, strategy_of
from sbrs.compile.parts_plan import parts_accesses
from sbrs.compile.transitions import StepAccess, accesses_conflict, check_schedule, hazard_waits
from sbrs.runtime import runtime_for
from sbrs.runtime.engine import Runtime
from tests.conftest import modules_a_run_loads
from tests.runtime.conftest import References, assert_equivalent, random_frame

# one worker runs this module: its module-scoped builds are made once, not once on each xdist worker
pytestmark = pytest.mark.xdist_group("runtime-parts")

LIMITED = Path(__file__).resolve().parents[1] / "data" / "limited" / "limited.yaml"
SMALL_SEARCH = ("--generations", "6", "--population", "12", "--cost", "analytic")  # deterministic


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the limited app with its build (band calls) beside it."""
    path = tmp_path_factory.mktemp("limited") / "limited.yaml"
    shutil.copy(LIMITED, path)
    assert main(["build", str(path), "--json", *SMALL_SEARCH]) == 0
    return path


@pytest.fixture(scope="module")
def app(limited: Path) -> App:
    return load_app(limited)


@pytest.fixture(scope="module")
def refs(app: App) -> References:
    return References(app)


@pytest.fixture(scope="module")
def runtime(app: App) -> Runtime:
    rt = runtime_for(app)
    assert rt.execution == "parts"
    return rt


@pytest.fixture(scope="module")
def roomy_runtime(app: App, runtime: Runtime) -> Runtime:
    """The band calls the limited app's build chose, compiled with a 2 MB limit: room in the arena for a
    transition to overlap (at 0.87 MB there is none), independent of what the search picks."""
    chosen = runtime.plan.reduction
    plan = app_parts(app, chosen["band_rows"], {"memory_limit_bytes": 2_000_000}, strategy_of(chosen))
    return Runtime.from_app(app, parts=plan)


def test_every_scenario_runs_within_the_limit_and_equals_onnx_runtime(runtime: Runtime, app: App,
                                                                      refs: References) -> None:
    report = runtime.memory_report()
    assert report["execution"] == "parts" and report["limit_bytes"] == 870_000
    assert report["params_bytes"] + report["arena_bytes"] <= report["limit_bytes"]
    # the plan counts every tensor (those inside ONNX Runtime's band calls too); the arena holds a part of them
    assert report["total_bytes"] == (report["params_bytes"] + report["plan_tensors_bytes"]
                                     + report["plan_transition_bytes"]) <= report["limit_bytes"]
    assert report["within_limit"] is True
    assert report["arena_bytes"] <= report["plan_tensors_bytes"] + report["plan_transition_bytes"]
    assert report["arena_bytes"] == runtime._arena.nbytes == runtime.arena_bytes  # what was really allocated
    assert report["planned_arena_bytes"] == runtime.plan.arena_bytes
    # every scenario runs some band calls (line-buffer bands or receptive-field tiles)
    assert all(any(call.banded for call in runtime.plan.scenarios[s].calls) for s in runtime.scenarios), \
        "nothing runs by parts"
    for scenario in runtime.scenarios:
        runtime.switch(scenario)
        for seed in (1, 2):  # the second frame reuses line buffers the first left behind
            frame = random_frame(app, seed)
            assert_equivalent(runtime.infer(frame), refs.outputs(scenario, frame), f"{scenario} frame {seed}")


def reference_waits(old: tuple[StepAccess, ...], new: tuple[StepAccess, ...]) -> tuple[int, ...]:
    """wait_i by its definition: the last old step (1-based) that conflicts with new step i (0 when none)."""
    return tuple(max((j for j, step in enumerate(old, 1) if accesses_conflict(step, target)), default=0)
                 for target in new)


def assert_tables_come_from_the_bytes_bound(runtime: Runtime) -> dict[str, tuple[StepAccess, ...]]:
    """The plan's accesses equal the bytes really bound, its tables are the reference waits over them and pass
    the checker; returns the planned accesses."""
    plan = runtime.plan
    bound = runtime.bound_accesses()
    planned = {s: parts_accesses(p) for s, p in plan.scenarios.items()}
    for scenario, steps in planned.items():
        assert len(bound[scenario]) == len(steps)
        for got, want in zip(bound[scenario], steps, strict=True):
            assert {r[1:] for r in got.reads} == {r[1:] for r in want.reads}
            assert {r[1:] for r in got.writes} == {r[1:] for r in want.writes}
    for table in plan.transitions.pairs.values():  # the vectorised waits are the reference definition's
        assert table.wait == reference_waits(planned[table.old], planned[table.new])
    waits = {key: table.wait for key, table in plan.transitions.pairs.items()}
    assert check_schedule(bound, waits, limit=1) == []
    return planned


def test_tables_come_from_the_bytes_really_bound_and_are_safe(runtime: Runtime) -> None:
    assert_tables_come_from_the_bytes_bound(runtime)


@pytest.mark.parametrize("schedule", ["priority", "threads"])
def test_sbrs_tp_switch_at_every_step_keeps_both_frames_equal_to_onnx_runtime(roomy_runtime: Runtime,
                                                                               app: App, refs: References,
                                                                               schedule: str) -> None:
    runtime = roomy_runtime
    assert all(any(call.banded for call in runtime.plan.scenarios[s].calls) for s in runtime.scenarios)
    frames = (random_frame(app, 3), random_frame(app, 4))
    overlapped = 0
    runtime.transition_schedule = schedule
    for old in runtime.scenarios:
        for new in runtime.scenarios:
            if old == new:
                continue
            for step in range(1, len(runtime.plan.scenarios[old].calls) + 1, 3):
                runtime.switch(old)
                runtime.infer(frames[0])
                results = sorted(runtime.process_with_hooks(frames, inject=(step, new)), key=lambda r: r.index)
                assert [r.scenario for r in results] == [old, new]
                record = results[1].switch
                assert record is not None and record.mode == "sbrs-tp"
                overlapped += record.overlapped_steps > 0
                for result, frame in zip(results, frames, strict=True):
                    assert_equivalent(result.outputs, refs.outputs(result.scenario, frame),
                                      f"{old}->{new} SSR at step {step}")
    runtime.transition_schedule = "priority"
    assert overlapped > 0, "no transition overlapped the old frame"
    report = runtime.memory_report()
    assert report["transition_cut"] is not None and report["transition_overlap_pairs"] == 2


def test_naive_switching_by_parts(app: App, refs: References) -> None:
    with runtime_for(app, transition="naive") as rt:
        assert rt.execution == "parts" and rt.transition == "naive"
        frames = [random_frame(app, seed) for seed in range(4)]
        rt.switch("full")
        rt.infer(frames[0])
        results = list(rt.process_with_hooks(frames, inject=(5, "skip")))
        assert [r.scenario for r in results] == ["full", "skip", "skip", "skip"]
        assert results[1].switch is not None and results[1].switch.overlapped_steps == 0
        for result in results:
            assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]), "naive")


def test_facts_carry_the_memory_report_for_the_metrics(runtime: Runtime) -> None:
    facts = runtime.facts()
    report = runtime.memory_report()
    assert facts["granularity"] == "parts" and facts["steps"]["full"] == len(runtime.plan.scenarios["full"].calls)
    for key in ("params_bytes", "arena_bytes", "total_bytes", "limit_bytes", "planned_arena_bytes"):
        assert facts[f"memory_{key}"] == report[key]
    pytest.importorskip("prometheus_client")
    from sbrs.metrics.observer import MetricsObserver

    observer = MetricsObserver(list(runtime.scenarios), process_metrics=False)
    observer.started("full", facts)
    samples = {s.name: s.value for metric in observer.registry.collect() for s in metric.samples}
    assert samples["sbrs_memory_arena_bytes"] == report["arena_bytes"]
    assert samples["sbrs_memory_limit_bytes"] == 870_000


def test_a_bad_frame_or_scenario_changes_nothing(runtime: Runtime, app: App, refs: References) -> None:
    from sbrs.errors import InputError

    runtime.switch("skip")
    with pytest.raises(InputError):
        runtime.infer(np.zeros((1, 3, 16, 16), np.float32))
    with pytest.raises(InputError):
        runtime.switch("nope")
    frame = random_frame(app, 9)
    assert_equivalent(runtime.infer(frame), refs.outputs("skip", frame), "after bad input")


def test_the_unit_runtime_reports_its_memory_too(load_example: Callable[[str], App]) -> None:
    with Runtime.from_app(load_example("tiny")) as rt:
        report = rt.memory_report()
    assert report["execution"] == "units" and report["limit_bytes"] is None and report["within_limit"] is None
    assert report["arena_bytes"] == rt.plan.arena_bytes and report["params_bytes"] > 0


def test_without_the_build_the_app_compiles_the_saved_band_heights_in_memory(app: App, runtime: Runtime,
                                                                             refs: References) -> None:
    with runtime_for(app, use_build=False) as in_memory:
        assert in_memory.execution == "parts"
        assert in_memory.plan.reduction["band_rows"] == runtime.plan.reduction["band_rows"]
        assert in_memory.memory_report()["within_limit"]
        frame = random_frame(app, 11)
        for scenario in in_memory.scenarios:
            in_memory.switch(scenario)
            assert_equivalent(in_memory.infer(frame), refs.outputs(scenario, frame), f"in memory {scenario}")


def test_a_build_by_parts_is_not_a_build_of_units(limited: Path) -> None:
    from sbrs.artifact.read import load_build
    from sbrs.errors import InputError

    with pytest.raises(InputError, match="runs by parts"):
        load_build(limited).units()


def test_cancelling_the_frame_in_flight_by_parts(app: App, refs: References) -> None:
    """``on_switch: cancel`` by parts: a request as band call s starts stops that call (``terminate``), one right
    after it stops the frame between calls; either way the frame runs again on the new scenario."""
    from tests.runtime.test_cancel import request_at_step

    frames = [random_frame(app, seed) for seed in range(3)]
    with runtime_for(app, on_switch="cancel") as rt:
        assert rt.execution == "parts"
        steps = len(rt.runner.calls["full"])
        for step, after in ((1, False), (steps // 2, False), (steps // 2, True), (steps, False)):
            rt.switch("full")
            rt.infer(frames[0])
            with request_at_step(rt, "full", step, lambda: rt.switch("skip"), after=after):
                results = list(rt.process(frames))
            where = f"cancel {'after' if after else 'at'} call {step}/{steps}"
            assert [(r.index, r.scenario) for r in results] == [(0, "skip"), (1, "skip"), (2, "skip")], where
            record = results[0].switch
            assert record is not None and record.cancelled_steps == (step if after else step - 1), where
            for result in results:
                assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]), where)


def test_resume_by_parts_runs_the_frame_again_as_cancel(app: App, refs: References) -> None:
    """``on_switch: resume`` by parts: every scenario's line buffers are its own, so no band call is shared and
    nothing can be taken over: the frame runs again from its start on the new scenario (``resumed_steps`` 0)."""
    from tests.runtime.test_cancel import request_at_step

    frames = [random_frame(app, seed) for seed in range(3)]
    with runtime_for(app, on_switch="resume") as rt:
        assert rt.execution == "parts" and rt.runner.resume == {}
        steps = len(rt.runner.calls["full"])
        for step, after in ((1, False), (steps // 2, True)):
            rt.switch("full")
            rt.infer(frames[0])
            with request_at_step(rt, "full", step, lambda: rt.switch("skip"), after=after):
                results = list(rt.process(frames))
            where = f"resume {'after' if after else 'at'} call {step}/{steps}"
            assert [(r.index, r.scenario) for r in results] == [(0, "skip"), (1, "skip"), (2, "skip")], where
            record = results[0].switch
            assert record is not None and record.mode == "resume" and record.resumed_steps == 0, where
            assert record.cancelled_steps == (step if after else step - 1), where
            for result in results:
                assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]), where)


@pytest.mark.parametrize(("transition", "schedule", "on_switch"),
                         [("sbrs-tp", "priority", "finish"), ("sbrs-tp", "threads", "finish"),
                          ("naive", "priority", "finish"), ("sbrs-tp", "priority", "cancel"),
                          ("sbrs-tp", "priority", "resume")])
def test_switches_from_three_threads_never_lose_a_frame(app: App, refs: References, transition: str,
                                                        schedule: str, on_switch: str) -> None:
    from tests.runtime.test_switching_stress import DISTINCT_FRAMES, stress

    frames = [random_frame(app, 100 + k) for k in range(DISTINCT_FRAMES)]
    want = {(s, k): refs.outputs(s, frame) for s in refs.sessions for k, frame in enumerate(frames)}
    with runtime_for(app, transition=transition, transition_schedule=schedule, on_switch=on_switch) as rt:
        assert rt.execution == "parts"
        for order in ("completion", "stream"):
            results = stress(rt, frames, 0.4, seed=5, order=order)
            indices = [r.index for r in results]
            assert sorted(indices) == list(range(len(results))), f"{transition}/{schedule}/{order}: frames lost"
            assert len({r.scenario for r in results}) == 2, "the run never switched"
            for result in results:
                assert_equivalent(result.outputs, want[(result.scenario, result.index % DISTINCT_FRAMES)],
                                  f"{transition}/{schedule}/{order} frame {result.index} on {result.scenario}")


# -- streamed input: a band on the graph input, the frame fed into a line buffer by rows ----------------------


def streamed_bands(app: App, chosen: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """The band heights the build chose plus 4-row bands on every scenario's graph input and on the layer
    reading it, so that the input's line buffer holds a few rows instead of the frame."""
    bands = {}
    for scenario, model in app.models.items():
        source = next(layer.name for layer in model.layers if layer.op == "Input")
        stem = next(layer.name for layer in model.layers if model.graph_inputs[0] in layer.inputs)
        bands[scenario] = {**chosen["band_rows"].get(scenario, {}), source: 4, stem: 4}
    return bands


@pytest.fixture(scope="module", params=[870_000, 2_000_000], ids=["at-the-limit", "roomy"])
def streamed(request: pytest.FixtureRequest, app: App, runtime: Runtime) -> Runtime:
    """The build's choice with the frame streamed, under the app's own limit (no room: switches wait for the
    old frame's feeds and calls on shared bytes) and under 2 MB (room for transitions to overlap)."""
    chosen = runtime.plan.reduction
    plan = app_parts(app, streamed_bands(app, chosen), {"memory_limit_bytes": request.param}, strategy_of(chosen))
    return Runtime.from_app(app, parts=plan)


def test_a_streamed_input_runs_by_rows_equal_to_onnx_runtime(streamed: Runtime, app: App,
                                                             refs: References) -> None:
    report = streamed.memory_report()
    limit = streamed.plan.memory_limit_bytes  # the limit the plan was compiled for
    assert limit is not None and report["total_bytes"] <= limit, report
    for scenario, parts in streamed.plan.scenarios.items():
        assert parts.streamed and sum(call.feed for call in parts.calls) == 8  # 32 rows in 4-row bands
        buffer = next(b for b in parts.buffers if b.tensor == parts.input)
        assert buffer.layout == "rows" and buffer.capacity < 32, buffer  # a line buffer, not the frame
        first_write = streamed.bound_accesses()[scenario][0].writes  # the copy-in writes no arena byte
        assert [r[2] - r[1] for r in first_write] == [4 * buffer.row_bytes]  # step 1 feeds rows 0-3 only
    for scenario in streamed.scenarios:
        streamed.switch(scenario)
        for seed in (1, 2):  # the second frame slides the input's line buffer again over the first one's rows
            frame = random_frame(app, seed)
            assert_equivalent(streamed.infer(frame), refs.outputs(scenario, frame), f"streamed {scenario} {seed}")


def test_feeds_are_in_the_tables_and_keep_switches_safe(streamed: Runtime) -> None:
    plan = streamed.plan
    bound = streamed.bound_accesses()
    planned = assert_tables_come_from_the_bytes_bound(streamed)
    for scenario, steps in planned.items():
        for want, call in zip(steps, plan.scenarios[scenario].calls, strict=True):
            if call.feed:  # a feed writes the rows it copies into the input's line buffer
                assert want.writes and {r[0] for r in want.writes} == {f"{scenario}/{plan.scenarios[scenario].input}"}
    # the feeds' writes matter: tables computed as if feeds wrote nothing let a new frame's feed overwrite
    # input rows an old call still reads wherever the scenarios' input buffers share bytes (no room)
    blind = {s: tuple(StepAccess(a.unit, a.reads, () if c.feed else a.writes)
                      for a, c in zip(steps, plan.scenarios[s].calls, strict=True)) for s, steps in planned.items()}
    unsafe = check_schedule(bound, {key: hazard_waits(blind[t.old], blind[t.new])
                                    for key, t in plan.transitions.pairs.items()}, limit=1)
    if plan.reduction["transition_cut"] is None:
        assert unsafe and "feed" in unsafe[0].detail, unsafe
    else:
        assert all(t.wait[0] < t.old_steps for t in plan.transitions.pairs.values())  # room: transitions overlap


@pytest.mark.parametrize("schedule", ["priority", "threads"])
def test_sbrs_tp_switch_at_every_step_with_a_streamed_input(streamed: Runtime, app: App, refs: References,
                                                           schedule: str) -> None:
    runtime = streamed
    frames = (random_frame(app, 3), random_frame(app, 4))
    want = {(s, k): refs.outputs(s, frame) for s in runtime.scenarios for k, frame in enumerate(frames)}
    runtime.transition_schedule = schedule
    try:
        for old in runtime.scenarios:
            for new in runtime.scenarios:
                if old == new:
                    continue
                for step in range(1, len(runtime.plan.scenarios[old].calls) + 1):
                    runtime.switch(old)
                    runtime.infer(frames[1])  # leaves the other frame's rows in the old input buffer
                    results = sorted(runtime.process_with_hooks(frames, inject=(step, new)), key=lambda r: r.index)
                    assert [r.scenario for r in results] == [old, new]
                    assert results[1].switch is not None and results[1].switch.mode == "sbrs-tp"
                    for result in results:
                        assert_equivalent(result.outputs, want[(result.scenario, result.index)],
                                          f"streamed {old}->{new} SSR at step {step} ({schedule})")
    finally:
        runtime.transition_schedule = "priority"


def test_a_build_with_a_streamed_input_loads_and_runs(app: App, runtime: Runtime, refs: References,
                                                      tmp_path: Path) -> None:
    """``sbrs build`` writes what ``app_parts`` compiles, feeds included; ``sbrs run`` and ``runtime_for(app)``
    load it (its feeds from the manifest, no session for them) and run it equal to ONNX Runtime."""
    from sbrs.artifact.read import load_build
    from sbrs.artifact.write import compile_app
    from sbrs.runtime.open import runtime_of_build

    path = tmp_path / "limited.yaml"  # a copy: its build is the streamed one
    shutil.copy(app.config.path, path)
    copy = load_app(path)
    chosen = runtime.plan.reduction
    bands = streamed_bands(copy, chosen)
    manifest = compile_app(copy, reduction={**chosen, "early_exit": False, "band_rows": bands, "pareto": []})
    # the transition room is what the limit leaves above the chosen point's plan
    want = app_parts(copy, bands, {"memory_limit_bytes": 870_000, "chosen": chosen["chosen"]}, strategy_of(chosen))
    build = load_build(path)
    assert build.parts is not None and dict(build.parts.scenarios) == dict(want.scenarios)
    assert build.parts.transitions == want.transitions
    assert all(p.streamed for p in build.parts.scenarios.values())
    assert not any(name.startswith("cfeed") for name in manifest["files"])  # a feed has no model file
    with runtime_of_build(build) as loaded:
        assert loaded.execution == "parts" and loaded.memory_report()["within_limit"]
        frames = [random_frame(copy, seed) for seed in (5, 6, 7)]
        loaded.switch("full")
        results = list(loaded.process_with_hooks(frames, inject=(3, "skip")))
        assert [r.scenario for r in results] == ["full", "skip", "skip"]
        for result in results:
            assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]), "streamed build")
    assert modules_a_run_loads(path) == []  # `sbrs run` runs it, importing neither onnx nor the compiler
