"""Switching: equivalence of every frame around switches, no frame lost or run twice, the hazard proof.

Invariants 3 and 4 of DESIGN.md: the hazard checker (``sbrs.compile.transitions.check_schedule``) on every
example app at both granularities, for the plan's offsets and for a live runtime's real bindings; outputs
of the frames before, during and after random switch sequences (SSRs arriving mid-frame and mid-switch)
equal each scenario's standalone ONNX Runtime outputs, naive and SBRS-TP, both schedules.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbrs.app import App
from sbrs.compile.transitions import (
    build_transition_plan,
    check_plan_transitions,
    check_schedule,
    plan_shadow,
)
from sbrs.compile.unit_plan import build_unit_plan
from sbrs.errors import InputError
from sbrs.runtime import runtime_for
from sbrs.runtime.engine import Runtime
from tests.conftest import APPS
from tests.runtime.conftest import References, assert_equivalent, assert_switch_at_steps_equal, random_frame

# one worker runs this module: its module-scoped builds are made once, not once on each xdist worker
pytestmark = pytest.mark.xdist_group("switching")


@pytest.mark.parametrize("granularity", ["auto", "layer"])
@pytest.mark.parametrize("name", [path.stem for path in APPS])
def test_hazard_checker_proves_every_transition(load_example: Callable[[str], App], name: str,
                                                granularity: str) -> None:
    plan = build_unit_plan(load_example(name), granularity)
    shared = build_transition_plan(plan)
    assert check_plan_transitions(plan, shared) == []
    assert check_plan_transitions(plan, shared, table="x") == []  # the lock-step Algorithm 7 tables too
    shadowed, offsets = plan_shadow(plan)
    shadow = build_transition_plan(shadowed, arena="shadow", shadow=offsets)
    assert check_plan_transitions(shadowed, shadow) == []
    assert shadowed.arena_bytes >= plan.arena_bytes
    for table in shared.pairs.values():
        assert all(0 <= w <= x for w, x in zip(table.wait, table.x, strict=True))


def test_thesis_algorithm6_alone_is_unsafe_on_onnx_runtime(load_example: Callable[[str], App]) -> None:
    """Algorithm 6 verbatim (same layer ⇒ delay) lets new steps clobber bytes the old frame still needs."""
    plan = build_unit_plan(load_example("cifar10"), "auto")
    hazards = check_plan_transitions(plan, build_transition_plan(plan), table="thesis_x")
    assert hazards and "touches" in hazards[0].detail


@pytest.fixture(scope="module")
def tiny_runtimes(load_example: Callable[[str], App]) -> Iterator[dict[str, Runtime]]:
    app = load_example("tiny")
    runtimes = {"naive": runtime_for(app, transition="naive"),
                "tp-shadow": runtime_for(app, transition="sbrs-tp"),
                "tp-shared": runtime_for(app, transition="sbrs-tp", transition_arena="shared"),
                "tp-threads": runtime_for(app, transition="sbrs-tp", transition_schedule="threads")}
    yield runtimes
    for runtime in runtimes.values():
        runtime.close()


@pytest.fixture(scope="module")
def tiny_refs(load_example: Callable[[str], App]) -> References:
    return References(load_example("tiny"))


def test_real_bindings_pass_the_checker(tiny_runtimes: dict[str, Runtime]) -> None:
    for runtime in tiny_runtimes.values():
        waits = {key: table.wait for key, table in runtime.transitions.pairs.items()}
        assert check_schedule(runtime.bound_accesses(), waits, new_accesses=runtime.bound_accesses(new_frame=True)) == []


@pytest.mark.parametrize("kind", ["naive", "tp-shadow", "tp-shared", "tp-threads"])
def test_every_pair_and_ssr_step_is_equivalent(tiny_runtimes: dict[str, Runtime], tiny_refs: References,
                                               load_example: Callable[[str], App], kind: str) -> None:
    runtime = tiny_runtimes[kind]
    app = load_example("tiny")
    frames = (random_frame(app, 1), random_frame(app, 2))
    for old in runtime.scenarios:
        for new in runtime.scenarios:
            if old == new:
                continue
            for step in range(1, len(runtime.plan.sequences[old]) + 1):
                for order in ("stream", "completion"):
                    runtime.switch(old)
                    runtime.infer(frames[0])
                    results = list(runtime.process_with_hooks(frames, order=order, inject=(step, new)))
                    if order == "completion":  # the new frame's result may come first, never another way
                        results.sort(key=lambda r: r.index)
                    assert [r.index for r in results] == [0, 1]
                    assert [r.scenario for r in results] == [old, new]
                    assert results[1].switch is not None and results[1].switch.response_delay_s > 0
                    for result, frame in zip(results, frames, strict=True):
                        assert_equivalent(result.outputs, tiny_refs.outputs(result.scenario, frame),
                                          f"{kind} {old}->{new} SSR at step {step}, {order} order")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["naive", "tp-shadow", "tp-shared", "tp-threads"]),
       plan=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 2)), min_size=1, max_size=8),
       seed=st.integers(0, 2**16))
def test_random_switches_keep_every_frame(tiny_runtimes: dict[str, Runtime], tiny_refs: References,
                                          load_example: Callable[[str], App], kind: str,
                                          plan: list[tuple[int, int]], seed: int) -> None:
    """Switch requests before frames (from the frame source), and from a thread at random moments (mid-frame,
    mid-switch): every frame comes out once, in order, equal to the reference of the scenario that ran it."""
    runtime = tiny_runtimes[kind]
    app = load_example("tiny")
    scenarios = runtime.scenarios
    count = 12
    frames = [random_frame(app, seed + k) for k in range(count)]
    at = dict(plan)
    rng = random.Random(seed)

    def source() -> Iterator[np.ndarray]:
        for k, frame in enumerate(frames):
            if k in at:
                runtime.switch(scenarios[at[k]])
            yield frame

    done = threading.Event()

    def pester() -> None:
        while not done.is_set():
            runtime.switch(rng.choice(scenarios), "socket")
            time.sleep(rng.random() * 3e-4)

    thread = threading.Thread(target=pester)
    thread.start()
    try:
        results = list(runtime.process(source()))
    finally:
        done.set()
        thread.join()
    assert sorted(r.index for r in results) == list(range(count))
    results.sort(key=lambda r: r.index)
    for result, frame in zip(results, frames, strict=True):
        assert_equivalent(result.outputs, tiny_refs.outputs(result.scenario, frame), f"{kind} frame {result.index}")
    assert runtime.node.state in ("running", "switching")


@pytest.mark.parametrize("name", ["cifar10", "pamap2"])
def test_bigger_apps_switch_correctly(load_example: Callable[[str], App], name: str) -> None:
    app = load_example(name)
    refs = References(app)
    frames = [random_frame(app, k) for k in range(3)]
    with runtime_for(app, transition="sbrs-tp") as runtime:
        scenarios = runtime.scenarios
        for old, new in zip(scenarios, scenarios[1:] + scenarios[:1], strict=True):
            steps = (1, max(1, len(runtime.plan.sequences[old]) // 2))
            assert_switch_at_steps_equal(runtime, refs, frames, old, new, steps)


@pytest.mark.parametrize("schedule", ["priority", "threads"])
def test_the_new_scenario_output_comes_first(load_example: Callable[[str], App], schedule: str) -> None:
    """Completion order: when a transition lets the next frame start on the new scenario mid-frame, the caller
    gets that frame's result before the old frame's (which still finishes, on the old scenario, right after)."""
    app = load_example("cifar10")
    refs = References(app)
    frames = [random_frame(app, k) for k in range(2)]
    with runtime_for(app, transition="sbrs-tp", transition_schedule=schedule) as runtime:
        old, new = runtime.scenarios[0], runtime.scenarios[1]
        table = runtime.transitions.table(old, new)
        assert table.old_steps > 1 and table.wait[0] <= 1  # a transition from old step 1 can help
        runtime.switch(old)
        runtime.infer(frames[1])
        switches = runtime.node.switches
        results = list(runtime.process_with_hooks(frames, order="completion", inject=(1, new)))
        assert [(r.index, r.scenario) for r in results] == [(1, new), (0, old)]
        assert results[0].switch is not None and results[0].switch.ssr_step == 1
        for result in results:
            assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]),
                              f"{schedule} frame {result.index}")
        assert runtime.node.state == "running" and runtime.node.switches == switches + 1


@pytest.mark.parametrize("schedule", ["priority", "threads"])
def test_a_request_inside_an_old_step_stops_it_and_the_transition_runs_it_again(
        load_example: Callable[[str], App], schedule: str) -> None:
    """Under ``finish``, a request for n arriving inside old step k's call (k at least ``preempt_from``) stops
    that call; the transition starts after step k - 1, the new frame's result comes first, and the old frame
    still finishes on the old scenario with step k run again whole: both equal ONNX Runtime."""
    app = load_example("cifar10")
    refs = References(app)
    frames = [random_frame(app, 30 + k) for k in range(2)]
    with runtime_for(app, transition="sbrs-tp", transition_schedule=schedule) as runtime:
        runner = runtime.runner
        assert runner.preempt_from, "no pair stops an old step"
        for (old, new), first in sorted(runner.preempt_from.items()):
            steps = len(runtime.plan.sequences[old])
            for k in range(first, steps + 1):
                calls = runner.calls[old]
                runs = [0]

                def asking(call: Callable[[], object] = calls[k - 1], new: str = new, runs: list[int] = runs) -> object:
                    runs[0] += 1
                    if runs[0] == 1:  # the request comes while the step's call is under way
                        runtime.node.request(new, "test")
                    return call()

                runtime.switch(old)
                runtime.infer(frames[1])
                runner.calls[old] = (*calls[:k - 1], asking, *calls[k:])
                try:
                    results = list(runtime.process(frames, order="completion"))
                finally:
                    runner.calls[old] = calls
                assert [(r.index, r.scenario) for r in results] == [(1, new), (0, old)], (old, new, k)
                assert results[0].switch is not None and results[0].switch.ssr_step == k - 1, (old, new, k)
                assert runs[0] == 2, f"{old}->{new}: step {k} ran {runs[0]} times"
                for result in results:
                    assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]),
                                      f"{schedule} {old}->{new} stopped in step {k}, frame {result.index}")
                assert not runtime._run_options.terminate


@pytest.mark.parametrize("schedule", ["priority", "threads"])
def test_one_step_frames_put_the_new_output_first_too(schedule: str) -> None:
    """A request seen after the old frame's last step (every request, when a frame is one step, as in the tiny
    app with its own settings): the old outputs wait in their slots, the next frame runs on the new scenario
    first and its result reaches the caller first. For that the shadow slots must keep apart from the old
    outputs (``plan_shadow``); when they did not, one-step apps silently switched at the frame boundary."""
    from sbrs.app import load_app

    app = load_app(Path(__file__).resolve().parents[2] / "apps" / "tiny.yaml")
    refs = References(app)
    frames = (random_frame(app, 7), random_frame(app, 8))
    done: list[str] = []

    class FramesDone:
        def frame_done(self, scenario: str, seconds: float) -> None:
            done.append(scenario)

    with runtime_for(app, use_build=False, transition="sbrs-tp", transition_schedule=schedule,
                     observers=[FramesDone()]) as runtime:
        for old in runtime.scenarios:
            for new in runtime.scenarios:
                if old == new:
                    continue
                assert len(runtime.plan.sequences[old]) == 1
                for order, expected in (("completion", [(1, new), (0, old)]), ("stream", [(0, old), (1, new)])):
                    runtime.switch(old)
                    runtime.infer(frames[0])
                    results = list(runtime.process_with_hooks(frames, order=order, inject=(1, new)))
                    assert [(r.index, r.scenario) for r in results] == expected, f"{old}->{new} {order}"
                    first_new = results[expected.index((1, new))]
                    assert first_new.switch is not None and first_new.switch.ssr_step == 1
                    for result in results:
                        assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]),
                                          f"{schedule} {old}->{new} {order} frame {result.index}")
                # a caller that stops at the new output: the old frame is still counted, nothing is left pending
                runtime.switch(old)
                runtime.infer(frames[0])
                done.clear()
                results_iter = runtime.process_with_hooks(frames, inject=(1, new))
                assert next(results_iter).scenario == new
                results_iter.close()
                assert sorted(done) == sorted([old, new]) and runtime.node.status()["switching_to"] is None
                assert_equivalent(runtime.infer(frames[1]), refs.outputs(new, frames[1]), f"{old}->{new} after")


def test_a_caller_that_stops_after_the_new_output_leaves_the_runtime_consistent(
        load_example: Callable[[str], App]) -> None:
    app = load_example("cifar10")
    refs = References(app)
    frames = [random_frame(app, k) for k in range(3)]
    with runtime_for(app, transition="sbrs-tp") as runtime:
        old, new = runtime.scenarios[0], runtime.scenarios[2]
        runtime.switch(old)
        runtime.infer(frames[2])
        results = runtime.process_with_hooks(frames[:2], inject=(1, new))
        first = next(results)
        assert first.scenario == new
        results.close()  # the old frame's rest still runs; its result goes nowhere
        assert runtime.node.state == "running" and runtime.node.status()["switching_to"] is None
        assert_equivalent(runtime.infer(frames[2]), refs.outputs(new, frames[2]), "after an abandoned stream")


def frames_then(first: np.ndarray, then: object) -> Iterator[object]:
    """``first``, then ``then`` as the second frame, or the error ``then`` is raised by the iterable itself."""
    yield first
    if isinstance(then, Exception):
        raise then
    yield then


@pytest.mark.parametrize("units", ["several", "one"])
@pytest.mark.parametrize("second", ["malformed", "none", "source-error"])
def test_a_bad_next_frame_seen_by_a_switch_leaves_the_frame_in_flight_its_result(
        load_example: Callable[[str], App], units: str, second: str) -> None:
    """A switch looks at the next frame while the frame in flight is still to be delivered (a transition after
    an old step, or the new frame first after the last one): a malformed next frame, or the caller's iterable
    failing there, is raised in its own turn, after the frame in flight's result, which was lost before."""
    from sbrs.app import load_app

    own_settings = Path(__file__).resolve().parents[2] / "apps" / "tiny.yaml"  # one unit per scenario
    app = load_example("tiny") if units == "several" else load_app(own_settings)
    refs = References(app)
    frame = random_frame(app, 3)
    then, expected = {"malformed": (frame[:, :, :5], InputError), "none": (None, InputError),
                      "source-error": (RuntimeError("camera unplugged"), RuntimeError)}[second]
    with runtime_for(app, use_build=False, transition="sbrs-tp") as runtime:
        old, new = runtime.scenarios[0], runtime.scenarios[1]
        assert (len(runtime.plan.sequences[old]) == 1) == (units == "one")
        runtime.switch(old)
        runtime.infer(frame)
        results = []
        with pytest.raises(expected):
            for result in runtime.process_with_hooks(frames_then(frame, then), inject=(1, new)):
                results.append(result)
        assert [(r.index, r.scenario) for r in results] == [(0, old)]
        assert_equivalent(results[0].outputs, refs.outputs(old, frame), f"{units} {second}")
        assert runtime.scenario == new  # the request is still pending for the next frame
        assert_equivalent(runtime.infer(frame), refs.outputs(new, frame), f"{units} {second}: after")


def test_a_frame_of_none_is_malformed_not_the_end_of_the_frames(load_example: Callable[[str], App]) -> None:
    app = load_example("tiny")
    frame = random_frame(app, 4)
    with runtime_for(app) as runtime:
        results = []
        with pytest.raises(InputError, match="NoneType"):
            for result in runtime.process([frame, None, frame]):  # type: ignore[list-item]
                results.append(result.index)
        assert results == [0]
