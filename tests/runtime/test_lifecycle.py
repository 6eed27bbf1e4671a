"""A runtime's life beside its callers' threads: ``close`` while frames run, a frame that fails after it took a
switch request, and a caller's own thread coming back to the runtime while it holds a switch's first result.
Each interleaving is forced with events (bounded waits), not left to chance."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np
import pytest

from sbrs.app import App
from sbrs.errors import SbrsRuntimeError
from sbrs.runtime.engine import Runtime
from tests.runtime.conftest import References, assert_equivalent, random_frame

WAIT_S = 10.0  # the longest any step of these tests waits for another thread


def on_streams(app: App, streams: int = 2) -> App:
    return replace(app, config=replace(app.config, runtime=replace(app.config.runtime, streams=streams)))


def generated(frames: list[np.ndarray]) -> Iterator[np.ndarray]:
    """Frames from a generator: on streams every stream gets a worker thread (none runs on the caller's)."""
    yield from frames


def test_close_from_another_thread_while_a_stream_runs_a_frame_is_a_closed_runtime(
        load_example: Callable[[str], App]) -> None:
    """``close`` while stream 0's worker is inside a frame: the frame finishes (or the runtime is closed for it), and
    the caller gets the results before it, then ``SbrsRuntimeError``. ``close`` used to drop stream 0's bindings
    under the runner's lock alone, which a stream's frame never takes: the frame read a table already emptied and
    the caller got a ``KeyError`` of its scenario's name."""
    app = on_streams(load_example("tiny"))
    refs = References(app)
    frames = [random_frame(app, 30 + k) for k in range(40)]
    runtime = Runtime.from_app(app)
    streams = runtime._streams
    assert streams is not None and streams.count == 2
    inside, go, releasing = threading.Event(), threading.Event(), threading.Event()
    bound = streams.bounds[0]
    for scenario, calls in list(bound.calls.items()):
        def first_call(call: Callable[[], object] = calls[0]) -> object:
            if not inside.is_set():  # the first frame on stream 0 waits here until close is under way
                inside.set()
                go.wait(WAIT_S)
            return call()
        bound.calls[scenario] = (first_call, *calls[1:])
    release = streams.release

    def releasing_streams() -> None:
        releasing.set()  # the runner's part of close is done; the streams' part waits for stream 0's frame
        release()

    streams.release = releasing_streams  # type: ignore[method-assign]
    results = []
    closing = threading.Thread(target=lambda: (inside.wait(WAIT_S), runtime.close()))
    closing.start()
    with pytest.raises(SbrsRuntimeError, match="closed"):
        for result in runtime.process(generated(frames)):
            results.append(result)
            if not go.is_set():
                assert releasing.wait(WAIT_S)
                go.set()
    go.set()
    closing.join(WAIT_S)
    assert not closing.is_alive()
    assert [r.index for r in results] == list(range(len(results)))
    for result in results:
        assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]), f"frame {result.index}")
    with pytest.raises(SbrsRuntimeError, match="closed"):
        runtime.infer(frames[0])
    assert not [t for t in threading.enumerate() if t.name.startswith("sbrs-stream")]


def test_a_result_settled_after_close_raises_nothing(load_example: Callable[[str], App]) -> None:
    """The first frame of a switch is settled (its switch ended) when the caller asks for the next result or stops;
    where the runtime was closed in between, that bookkeeping used to trigger the control node's ``switch_done``
    from state ``stopped`` (``transitions.MachineError``), out of the generator's ``close`` or its garbage
    collection."""
    app = load_example("tiny")
    frames = [random_frame(app, 40 + k) for k in range(4)]
    runtime = Runtime.from_app(app)
    runtime.switch("skip")
    results = runtime.process(frames)
    first = next(results)
    assert first.switch is not None and first.scenario == "skip"
    runtime.close()
    results.close()  # its bookkeeping runs now, after close
    assert runtime.node.state == "stopped" and runtime.node.switches == 1


def failing_once(tables: list[dict[str, tuple[Callable[[], object], ...]]], scenario: str,
                 error: BaseException) -> None:
    """``scenario``'s first call in ``tables`` (each stream's calls) raises ``error`` the first time one of them runs
    (as ONNX Runtime's failure, or a ``KeyboardInterrupt`` on the caller's thread, would)."""
    failed = threading.Event()
    for calls in tables:
        def first_call(call: Callable[[], object] = calls[scenario][0]) -> object:
            if not failed.is_set():
                failed.set()
                raise error
            return call()

        calls[scenario] = (first_call, *calls[scenario][1:])


def assert_no_switch_under_way(runtime: Runtime) -> None:
    status = runtime.status()
    assert (status["state"], status["switching_to"]) == ("running", None), status


@pytest.mark.parametrize("entry", ["infer", "process"])
@pytest.mark.parametrize("error", [RuntimeError("ONNX Runtime failed"), KeyboardInterrupt()],
                         ids=["error", "interrupt"])
def test_a_frame_that_fails_after_taking_a_request_ends_its_switch(load_example: Callable[[str], App], entry: str,
                                                                   error: BaseException) -> None:
    """The first frame of a switch fails: the error reaches the caller and the switch ends without an output. It used
    to stay under way for good: ``status`` said ``switching`` to it ever after, through later switches too."""
    app = load_example("tiny")
    refs = References(app)
    frames = [random_frame(app, 50 + k) for k in range(4)]
    with Runtime.from_app(app) as runtime:
        failing_once([runtime.runner.calls], "skip", error)
        runtime.switch("skip")
        with pytest.raises(type(error)):
            if entry == "infer":
                runtime.infer(frames[0])
            else:
                list(runtime.process(frames))
        assert_no_switch_under_way(runtime)
        assert_equivalent(runtime.infer(frames[1]), refs.outputs("skip", frames[1]), "after the failure")
        runtime.switch("exit")
        assert [r.scenario for r in runtime.process(frames)] == ["exit"] * len(frames)
        assert_no_switch_under_way(runtime)


@pytest.mark.parametrize("error", [RuntimeError("ONNX Runtime failed"), KeyboardInterrupt()],
                         ids=["error", "interrupt"])
def test_a_frame_that_fails_on_a_stream_after_taking_a_request_ends_its_switch(
        load_example: Callable[[str], App], error: BaseException) -> None:
    """As on one stream: the error comes in the frame's turn, and the switch it took ends with the call."""
    app = on_streams(load_example("tiny"))
    refs = References(app)
    frames = [random_frame(app, 60 + k) for k in range(6)]
    with Runtime.from_app(app) as runtime:
        assert runtime._streams is not None
        failing_once([bound.calls for bound in runtime._streams.bounds], "skip", error)
        runtime.switch("skip")
        with pytest.raises(type(error)):
            list(runtime.process(generated(frames)))
        assert_no_switch_under_way(runtime)
        results = list(runtime.process(generated(frames)))
        assert sorted(r.index for r in results) == list(range(len(frames)))
        for result in results:
            assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]), "after the failure")
        assert_no_switch_under_way(runtime)


def test_the_thread_holding_a_switchs_first_result_is_told_not_left_waiting_for_itself(
        load_example: Callable[[str], App]) -> None:
    """While a switch's first result is with the caller, the runtime stays locked until the caller asks for the next
    one (``Runtime.process``). ``infer``, ``close`` or a second ``process`` on that same thread used to wait for that
    lock for ever; they raise ``SbrsRuntimeError`` saying why, and everything works once the generator went on."""
    app = load_example("tiny")
    refs = References(app)
    frames = [random_frame(app, 70 + k) for k in range(4)]
    with Runtime.from_app(app) as runtime:
        results = runtime.process_with_hooks(frames, inject=(1, "skip"))  # the request arrives inside frame 0
        first = next(results)
        assert (first.index, first.scenario) == (1, "skip") and first.switch is not None
        for call in (lambda: runtime.infer(frames[0]), runtime.close, lambda: next(runtime.process(frames))):
            with pytest.raises(SbrsRuntimeError, match="holds a switch's first result"):
                call()
        waiting = threading.Thread(target=runtime.infer, args=(frames[3],))  # another thread waits, as documented
        waiting.start()
        rest = list(results)
        waiting.join(WAIT_S)
        assert not waiting.is_alive()
        assert [(r.index, r.scenario) for r in rest] == [(0, "full"), (2, "skip"), (3, "skip")]
        for result in [first, *rest]:
            assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]), f"{result.index}")
        assert_equivalent(runtime.infer(frames[0]), refs.outputs("skip", frames[0]), "after")
        assert_no_switch_under_way(runtime)
