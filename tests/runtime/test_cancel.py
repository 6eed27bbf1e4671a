"""``runtime.on_switch: cancel``: a switch request abandons the frame in flight (ONNX Runtime stops the call
under way through ``RunOptions.terminate``, or the loop stops between steps) and that same frame runs again from
its start on the new scenario. No frame is lost or run twice, every output equals ONNX Runtime running the
scenario that delivered it, the cancellation is reported (the record's ``cancelled_steps``, observers'
``frame_cancelled``), and requests that switch nothing cancel nothing. The races are in
test_switching_stress.py (its ``cancel`` configuration); by parts in tests/runtime/test_parts.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sbrs.app import App, load_app
from sbrs.cli import main
from sbrs.errors import InputError
from sbrs.runtime import runtime_for
from sbrs.runtime.engine import FrameResult, Runtime
from tests.runtime.conftest import References, assert_equivalent, random_frame

REPO = Path(__file__).resolve().parents[2]
#: Requests the starvation test makes at most (4 frames of a few calls each need far fewer).
MAX_ASKS = 200


class Cancellations:
    """An observer keeping the ``frame_cancelled`` events (every other event is ignored)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def frame_cancelled(self, scenario: str, steps_done: int) -> None:
        self.events.append((scenario, steps_done))

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args: None


@contextlib.contextmanager
def request_at_step(runtime: Runtime, scenario: str, step: int, ask: Callable[[], None], *,
                    after: bool = False) -> Iterator[None]:
    """Within the block, ``ask`` runs once just before ``scenario``'s step ``step`` calls ONNX Runtime (a request
    arriving as that call starts: ONNX Runtime finds ``terminate`` set and stops the call at once), or with
    ``after`` just after the call returned (the loop sees the request between two steps)."""
    real_calls = runtime.runner.calls[scenario]
    real = real_calls[step - 1]
    asked: list[bool] = []

    def call() -> Any:
        if not asked and not after:
            asked.append(True)
            ask()
        result = real()
        if not asked and after:
            asked.append(True)
            ask()
        return result

    runtime.runner.calls[scenario] = (*real_calls[:step - 1], call, *real_calls[step:])
    try:
        yield
    finally:
        runtime.runner.calls[scenario] = real_calls


def check_stream(results: list[FrameResult], frames: list[np.ndarray], refs: References, where: str) -> None:
    assert [r.index for r in results] == list(range(len(frames))), f"{where}: frames lost, repeated or reordered"
    for result in results:
        assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]),
                          f"{where} frame {result.index} on {result.scenario}")


@pytest.mark.parametrize("name", ["tiny", "pamap2", "cifar10"])
def test_a_request_cancels_the_frame_in_flight_and_the_new_scenario_runs_it(
        load_example: Callable[[str], App], name: str) -> None:
    app = load_example(name)
    refs = References(app)
    frames = [random_frame(app, 40 + k) for k in range(4)]
    old, new = app.config.scenarios[0].name, app.config.scenarios[1].name
    seen = Cancellations()
    with runtime_for(app, on_switch="cancel", observers=[seen]) as runtime:
        steps = len(runtime.runner.calls[old])
        for step in range(1, steps + 1):
            for after in (False, True):
                runtime.switch(old)
                runtime.infer(frames[0])
                seen.events.clear()
                with request_at_step(runtime, old, step, lambda: runtime.switch(new), after=after):
                    results = list(runtime.process(frames))
                where = f"{name} {old}->{new} {'after' if after else 'at'} step {step}/{steps}"
                check_stream(results, frames, refs, where)
                status = runtime.status()
                assert status["state"] == "running" and status["pending"] is None, where
                assert runtime._run_options.terminate is False, where
                if after and step == steps:  # the frame was complete: delivered, the switch at the boundary
                    assert [r.scenario for r in results] == [old] + [new] * (len(frames) - 1), where
                    assert results[1].switch is not None and results[1].switch.cancelled_steps is None, where
                    assert seen.events == [], where
                    continue
                done = step if after else step - 1
                assert [r.scenario for r in results] == [new] * len(frames), where  # frame 0 ran again on new
                record = results[0].switch
                assert record is not None and (record.old, record.new) == (old, new), where
                assert record.cancelled_steps == done and record.mode == "cancel", where
                assert seen.events == [(old, done)], where
                assert status["last_switch"]["cancelled_steps"] == done, where


def test_a_frame_is_cancelled_once_and_a_newer_request_waits_for_its_end(
        load_example: Callable[[str], App]) -> None:
    """Requests coming faster than frames must not keep every frame from finishing: while a cancelled frame
    runs again on the new scenario, a newer request waits for the frame boundary."""
    app = load_example("tiny")
    refs = References(app)
    frames = [random_frame(app, 50 + k) for k in range(3)]
    first, second, third = (s.name for s in app.config.scenarios)
    seen = Cancellations()
    with runtime_for(app, on_switch="cancel", observers=[seen]) as runtime:
        runtime.switch(first)
        runtime.infer(frames[0])
        with request_at_step(runtime, first, 1, lambda: runtime.switch(second)), \
                request_at_step(runtime, second, 1, lambda: runtime.switch(third)):
            results = list(runtime.process(frames))
        check_stream(results, frames, refs, "tiny, a request during the frame run again")
        assert [r.scenario for r in results] == [second, third, third]
        assert seen.events == [(first, 0)]
        records = [r.switch for r in results]
        assert records[0] is not None and (records[0].old, records[0].new, records[0].cancelled_steps) == \
            (first, second, 0)
        assert records[1] is not None and (records[1].old, records[1].new, records[1].cancelled_steps) == \
            (second, third, None)
        status = runtime.status()
        assert status["state"] == "running" and status["switches_done"] == 2 and status["switching_to"] is None


def test_switches_faster_than_frames_still_let_frames_finish(load_example: Callable[[str], App]) -> None:
    """Every call of the old frame's steps asks for another scenario: each frame is cancelled at most once."""
    app = load_example("cifar10")
    refs = References(app)
    frames = [random_frame(app, 80 + k) for k in range(4)]
    names = [s.name for s in app.config.scenarios]
    with runtime_for(app, on_switch="cancel") as runtime:
        real = dict(runtime.runner.calls)
        asked = iter(range(MAX_ASKS + 1))

        def asking_first(call: Callable[[], Any]) -> Callable[[], Any]:
            def ask_then_call() -> Any:
                # frames that never finish would ask forever: fail instead of hanging
                assert next(asked) < MAX_ASKS, "requests at every call keep every frame from finishing"
                runtime.switch(next(n for n in names if n != runtime.node.scenario))
                return call()
            return ask_then_call

        runtime.runner.calls.update({name: tuple(asking_first(c) for c in real[name]) for name in names})
        try:
            results = list(runtime.process(frames))
        finally:
            runtime.runner.calls.update(real)
        check_stream(results, frames, refs, "cifar10, a request at every call")
        assert all(r.switch is not None and r.switch.cancelled_steps == 0 for r in results)


def test_requests_that_switch_nothing_cancel_nothing(load_example: Callable[[str], App]) -> None:
    app = load_example("cifar10")
    refs = References(app)
    frames = [random_frame(app, 60 + k) for k in range(3)]
    current, other = app.config.scenarios[0].name, app.config.scenarios[1].name
    seen = Cancellations()
    with runtime_for(app, on_switch="cancel", observers=[seen]) as runtime:
        runtime.switch(other)
        assert runtime._run_options.terminate is True  # pending while nothing runs: the next frame takes it
        runtime.switch(current)  # back to the running scenario before any frame: nothing to switch
        assert runtime._run_options.terminate is False and runtime.status()["pending"] is None
        with request_at_step(runtime, current, 1, lambda: runtime.switch(current)):
            results = list(runtime.process(frames))
        check_stream(results, frames, refs, "cifar10 same scenario")
        assert [r.scenario for r in results] == [current] * 3 and all(r.switch is None for r in results)
        runtime.switch(other)  # pending between frames: the frame boundary takes it, nothing is in flight
        output = runtime.infer(frames[0])
        assert_equivalent(output, refs.outputs(other, frames[0]), "cifar10 infer after a request")
        assert seen.events == [] and runtime.status()["last_switch"]["cancelled_steps"] is None


def test_finish_leaves_the_frame_in_flight_alone(load_example: Callable[[str], App]) -> None:
    app = load_example("tiny")
    frames = [random_frame(app, 70 + k) for k in range(2)]
    old, new = app.config.scenarios[0].name, app.config.scenarios[1].name
    with runtime_for(app) as runtime:
        assert runtime.on_switch == "finish"
        runtime.switch(old)
        runtime.infer(frames[0])
        with request_at_step(runtime, old, 1, lambda: runtime.switch(new)):
            results = list(runtime.process(frames))
        assert runtime._run_options.terminate is False
        assert sorted((r.index, r.scenario) for r in results) == [(0, old), (1, new)]


def test_on_switch_comes_from_the_app_and_is_checked(tmp_path: Path) -> None:
    text = (REPO / "apps" / "tiny.yaml").read_text()
    assert "runtime:" not in text
    path = tmp_path / "tiny.yaml"
    path.write_text(text + "runtime: {on_switch: cancel}\n")
    app = load_app(path)
    assert app.config.runtime.on_switch == "cancel"
    with runtime_for(app) as runtime:
        assert runtime.on_switch == "cancel"
    with runtime_for(app, on_switch="finish") as runtime:
        assert runtime.on_switch == "finish"
    with pytest.raises(InputError, match="on_switch"):
        runtime_for(app, on_switch="drop")
    path.write_text(text + "runtime: {on_switch: drop}\n")
    with pytest.raises(InputError, match="on_switch"):
        load_app(path)


def test_sbrs_run_takes_on_switch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = tmp_path / "tiny.yaml"
    app.write_text((REPO / "apps" / "tiny.yaml").read_text())
    assert main(["run", str(app), "--frames", "3", "--no-socket", "--on-switch", "cancel"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["frame"] for line in lines] == [0, 1, 2]
    with pytest.raises(SystemExit) as refused:  # argparse's own one-line refusal of a bad choice
        main(["run", str(app), "--frames", "1", "--no-socket", "--on-switch", "drop"])
    assert refused.value.code == 2 and "--on-switch" in capsys.readouterr().err
