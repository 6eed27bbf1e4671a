"""``runtime.on_switch: resume`` (beyond the thesis): a switch request stops the frame in flight and that same
frame continues on the new scenario from the deepest step whose computed tensors the new scenario shares
(``sbrs.compile.transitions.ResumeTable``), or from its start where nothing is shared (as ``cancel``). Every
output equals ONNX Runtime running the scenario that delivered it on that frame, no frame is lost or run
twice, and the record says where the frame resumed. The races are in test_switching_stress.py (its ``resume``
configuration); the checker of the resume tables on every app in test_switching.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbrs.app import App
from sbrs.cli import main
from sbrs.compile.transitions import (
    ResumeTable,
    build_transition_plan,
    check_plan_transitions,
    check_resume,
    plan_shadow,
    resume_tables,
    step_accesses,
)
from sbrs.compile.unit_plan import build_unit_plan
from sbrs.runtime import runtime_for
from sbrs.runtime.engine import Runtime
from tests.conftest import example_apps_by_tier
from tests.runtime.conftest import References, random_frame
from tests.runtime.test_cancel import Cancellations, check_stream, request_at_step

REPO = Path(__file__).resolve().parents[2]


def expected_resume(runtime: Runtime, old: str, new: str, done: int, partial: bool) -> int:
    table = runtime.runner.resume[(old, new)]
    return table.during[done] if partial else table.after[done]


@pytest.mark.parametrize("name", ["tiny", pytest.param("cifar10", marks=pytest.mark.slow)])
def test_a_request_continues_the_frame_in_flight_on_the_new_scenario(
        load_example: Callable[[str], App], name: str) -> None:
    """Every ordered pair, a request at (just before) and after every old step: the frame in flight comes out
    once, from the new scenario, equal to the new scenario's own model; it resumed where the table says."""
    app = load_example(name)
    refs = References(app)
    frames = [random_frame(app, 140 + k) for k in range(3)]
    seen = Cancellations()
    resumed_somewhere = False
    with runtime_for(app, on_switch="resume", observers=[seen]) as runtime:
        assert runtime.on_switch == "resume"
        for old in runtime.scenarios:
            for new in runtime.scenarios:
                if old == new:
                    continue
                steps = len(runtime.runner.calls[old])
                for step in range(1, steps + 1):
                    for after in (False, True):
                        runtime.switch(old)
                        runtime.infer(frames[0])
                        seen.events.clear()
                        with request_at_step(runtime, old, step, lambda n=new: runtime.switch(n), after=after):
                            results = list(runtime.process(frames))
                        where = f"{name} {old}->{new} {'after' if after else 'at'} step {step}/{steps}"
                        check_stream(results, frames, refs, where)
                        status = runtime.status()
                        assert status["state"] == "running" and status["pending"] is None, where
                        assert runtime._run_options.terminate is False, where
                        if after and step == steps:  # the frame was complete: the switch at the boundary
                            assert [r.scenario for r in results] == [old] + [new] * (len(frames) - 1), where
                            record = results[1].switch
                            assert record is not None and record.resumed_steps is None, where
                            continue
                        assert [r.scenario for r in results] == [new] * len(frames), where
                        record = results[0].switch
                        assert record is not None and (record.old, record.new, record.mode) == (old, new, "resume")
                        # a request as step s starts: a step the new scenario shares is let finish, any other
                        # is stopped inside (``terminate``)
                        kept = after or runtime.runner.resume_keep[(old, new)][step]
                        done = step if kept else step - 1
                        want = expected_resume(runtime, old, new, done, partial=not kept)
                        assert (record.cancelled_steps, record.resumed_steps) == (done, want), where
                        assert seen.events == [(old, done)], where
                        assert status["last_switch"]["resumed_steps"] == want, where
                        resumed_somewhere |= want > 0
    assert resumed_somewhere, f"{name}: no request resumed a frame (the apps share their first layers)"


def test_a_call_stopped_inside_resumes_before_it(load_example: Callable[[str], App]) -> None:
    """A request arriving while a step the new scenario does not run is in flight stops that call
    (``terminate``): the frame resumes at the deepest point the stopped call left intact."""
    app = load_example("tiny")
    refs = References(app)
    frames = [random_frame(app, 150 + k) for k in range(2)]
    with runtime_for(app, on_switch="resume") as runtime:
        cases = [(o, n, s) for (o, n), keep in runtime.runner.resume_keep.items() for s in range(1, len(keep))
                 if not keep[s] and s < len(keep) - 1]
        assert cases
        for old, new, step in cases:
            runtime.switch(old)
            runtime.infer(frames[0])
            with request_at_step(runtime, old, step, lambda n=new: runtime.switch(n)):
                results = list(runtime.process(frames))
            where = f"tiny {old}->{new} stopped in step {step}"
            check_stream(results, frames, refs, where)
            record = results[0].switch
            assert record is not None and record.cancelled_steps == step - 1, where
            assert record.resumed_steps == expected_resume(runtime, old, new, step - 1, partial=True), where


def test_resume_tables_are_proven_and_their_mutations_caught(load_example: Callable[[str], App]) -> None:
    """The checker simulates the arena symbolically; a resume point one step deeper than the table's, where the
    table stops short of the shared prefix, must be caught (it reads overwritten or missing values)."""
    plan = build_unit_plan(load_example("tiny"), "auto")
    accesses = {s: step_accesses(plan, s) for s in plan.scenarios}
    tables = resume_tables(plan)
    assert check_resume(accesses, tables) == []
    caught = 0
    for pair, table in tables.items():
        for c, r in enumerate(table.after):
            if r < min(c, len(accesses[pair[1]])):
                deeper = ResumeTable(table.old, table.new, table.prefix,
                                     (*table.after[:c], r + 1, *table.after[c + 1:]), table.during)
                assert check_resume(accesses, {pair: deeper}), f"{pair} after {c}: resume at {r + 1} not caught"
                caught += 1
    assert caught


@pytest.mark.parametrize("granularity", ["auto", "layer"])
@pytest.mark.parametrize("name", example_apps_by_tier())
def test_resume_plans_keep_every_shared_prefix_valid_and_are_proven(load_example: Callable[[str], App], name: str,
                                                                     granularity: str) -> None:
    """Units and arena made for resume (``build_unit_plan(on_switch="resume")``): every ordered pair resumes at
    its whole shared prefix wherever the old frame stopped past it (the arena keeps the live-in tensors valid
    across the jump), the symbolic checker proves every resume point, with and without shadow slots, and the
    SBRS-TP tables of the same plan still pass the hazard checker. With the app's own settings
    (``share_min_mb``), too."""
    from sbrs.app import load_app

    for app in (load_example(name), load_app(REPO / "apps" / f"{name}.yaml")):
        plan = build_unit_plan(app, granularity, on_switch="resume")
        shadowed, offsets = plan_shadow(plan)
        for candidate in (plan, shadowed):
            tables = resume_tables(candidate)
            accesses = {s: step_accesses(candidate, s) for s in candidate.scenarios}
            assert check_resume(accesses, tables) == [], f"{name} {granularity}"
            for (old, new), table in tables.items():
                steps = len(candidate.sequences[old])
                assert table.after[table.prefix:] == (table.prefix,) * (steps + 1 - table.prefix), (old, new)
                assert table.during[table.prefix:] == (table.prefix,) * (steps - table.prefix), (old, new)
        assert check_plan_transitions(plan, build_transition_plan(plan)) == []
        assert check_plan_transitions(shadowed, build_transition_plan(shadowed, arena="shadow", shadow=offsets)) == []


def test_drone_scenarios_share_their_first_layers_under_resume(load_example: Callable[[str], App]) -> None:
    """drone.yaml with its own settings: the stem and first block (0.33 MB of weights, below share_min_mb) are
    private to each scenario normally, and one shared unit under resume, so every pair can resume."""
    from sbrs.app import load_app

    app = load_app(REPO / "apps" / "drone.yaml")
    plain = resume_tables(build_unit_plan(app))
    assert all(table.prefix == 0 for table in plain.values())
    resuming = resume_tables(build_unit_plan(app, on_switch="resume"))
    assert all(table.prefix >= 1 for table in resuming.values())
    assert max(table.prefix for table in resuming.values()) >= 3


@pytest.fixture(scope="module")
def tiny_resume(load_example: Callable[[str], App]) -> Iterator[tuple[Runtime, References]]:
    app = load_example("tiny")
    with runtime_for(app, on_switch="resume") as runtime:
        yield runtime, References(app)


def ask_once(runtime: Runtime, scenario: str, step: int, target: str, after: bool) -> None:
    """``scenario``'s step ``step`` asks for ``target`` once, just before or after its call, then is itself again."""
    real = runtime.runner.calls[scenario]

    def call() -> Any:
        runtime.runner.calls[scenario] = real
        if not after:
            runtime.switch(target)
        result = real[step - 1]()
        if after:
            runtime.switch(target)
        return result

    runtime.runner.calls[scenario] = (*real[:step - 1], call, *real[step:])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 3), st.booleans(), st.integers(0, 2)),
                         min_size=1, max_size=6))
def test_random_requests_resume_correctly(tiny_resume: tuple[Runtime, References], load_example: Callable[[str], App],
                                          requests: list[tuple[int, int, bool, int]]) -> None:
    """Requests at random frames and steps (before or after the call, naming any scenario, the current one
    included): every frame comes out once, in order, equal to the reference of the scenario that delivered it."""
    runtime, refs = tiny_resume
    frames = [random_frame(load_example("tiny"), 160 + k) for k in range(6)]
    names = runtime.scenarios
    runtime.switch(names[0])
    runtime.infer(frames[0])
    plan = {frame: (step, after, names[target]) for frame, step, after, target in requests}

    def source() -> Iterator[np.ndarray]:
        for k, frame in enumerate(frames):
            if k in plan:
                step, after, target = plan[k]
                current = runtime.node.target
                ask_once(runtime, current, min(step, len(runtime.runner.calls[current])), target, after)
            yield frame

    originals = dict(runtime.runner.calls)
    try:
        results = list(runtime.process(source()))
    finally:
        runtime.runner.calls.update(originals)  # a step whose frame never came asks no more
    check_stream(results, frames, refs, f"tiny resume, requests {requests}")


def test_on_switch_resume_comes_from_the_app_and_the_command_line(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    text = (REPO / "apps" / "tiny.yaml").read_text()
    path = tmp_path / "tiny.yaml"
    path.write_text(text + "runtime: {on_switch: resume}\n")
    from sbrs.app import load_app

    app = load_app(path)
    assert app.config.runtime.on_switch == "resume"
    with runtime_for(replace(app), use_build=False) as runtime:
        assert runtime.on_switch == "resume"
    assert main(["run", str(path), "--frames", "3", "--no-socket", "--on-switch", "resume"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["frame"] for line in lines] == [0, 1, 2]
