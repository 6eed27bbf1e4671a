"""Band streams (``sbrs.runtime.streams``): a runtime by parts whose plan chose two streams keeps two frames in
flight, each in an arena of its own, and every result equals ONNX Runtime on the scenario's own model, in
steady state, across switches requested from other threads, beside ``infer`` from another thread, and when a
frame is malformed or the caller stops early.

The app is tests/data/limited/limited.yaml (two CIFAR ResNet-14 scenarios), its build's band heights compiled
as two streams with a limit that holds both arenas (at 0.87 MB the search keeps one stream).
"""

from __future__ import annotations

import itertools
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbrs.app import App, load_app
from sbrs.cli import main
from sbrs.compile.fit import app_parts, fit_parts, strategy_of
from sbrs.compile.footprint import parts_footprint
from sbrs.compile.parts_plan import PartsPlan
from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.runtime.engine import Runtime
from sbrs.runtime.runner import FrameResult
from sbrs.runtime.streams import caller_busy, frames_never_wait
from tests.runtime.conftest import NeverWaiting, References, assert_equivalent, random_frame

# one worker runs this module: its module-scoped builds are made once, not once on each xdist worker
pytestmark = pytest.mark.xdist_group("band-streams")

LIMITED = Path(__file__).resolve().parents[1] / "data" / "limited" / "limited.yaml"
SMALL_SEARCH = ("--generations", "6", "--population", "12", "--cost", "analytic")
LIMIT = 2_000_000


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> App:
    path = tmp_path_factory.mktemp("streams") / "limited.yaml"
    shutil.copy(LIMITED, path)
    assert main(["build", str(path), "--json", *SMALL_SEARCH]) == 0
    return load_app(path)


@pytest.fixture(scope="module")
def refs(app: App) -> References:
    return References(app)


def two_stream_plan(app: App) -> PartsPlan:
    from sbrs.reduction.search import saved_reduction

    reduction = saved_reduction(app)
    assert reduction is not None
    chosen = {**reduction["chosen"], "streams": 2,
              "memory_bytes": reduction["chosen"]["params_bytes"] + 2 * reduction["chosen"]["arena_bytes"]}
    return app_parts(app, reduction["band_rows"], {"memory_limit_bytes": LIMIT, "chosen": chosen},
                     strategy_of(reduction))


@pytest.fixture(scope="module")
def runtime(app: App) -> Runtime:
    rt = Runtime.from_app(app, parts=two_stream_plan(app))
    assert rt._streams is not None and rt._streams.count == 2
    return rt


def switching_as_handed(runtime: Runtime, frames: list[np.ndarray], at: dict[int, str]) -> Iterator[np.ndarray]:
    """``frames`` as ``process`` takes them, asking for scenario ``at[k]`` just before frame k is handed over."""
    for k, frame in enumerate(frames):
        if k in at:
            runtime.switch(at[k])
        yield frame


def assert_each_scenario_in_stream_order(results: list) -> None:
    """Results in arrival order: a switch's new frames may pass older frames of another scenario, never of their own
    (so the frame that took a request is the first of its scenario to come out)."""
    last: dict[str, int] = {}
    for result in results:
        assert result.index > last.get(result.scenario, -1), f"frame {result.index} came after a later {result.scenario}"
        last[result.scenario] = result.index


def test_frames_that_never_wait_are_told_from_those_that_may() -> None:
    from sbrs.run.sources import FrameSource

    frame = np.zeros((1, 3, 8, 8), np.float32)
    assert all(frames_never_wait(f) for f in ([frame], (frame,), itertools.repeat(frame, 2),
                                               NeverWaiting(iter([frame])), FrameSource("a folder")))
    camera = FrameSource("a camera")
    camera.live = True
    assert not any(frames_never_wait(f) for f in (iter([frame]), (f for f in [frame]), camera))


@pytest.mark.parametrize("never_waits", [True, False], ids=["caller-runs-stream-0", "a-worker-per-stream"])
def test_the_callers_thread_runs_stream_0_only_where_the_frames_never_wait(
        runtime: Runtime, app: App, refs: References, monkeypatch: pytest.MonkeyPatch, never_waits: bool) -> None:
    threads: dict[int, set[str]] = {0: set(), 1: set()}
    run = runtime._streams._run  # type: ignore[union-attr]
    stream_0_ran = threading.Event()

    def recorded(stream: int, *args: object) -> object:
        threads[stream].add(threading.current_thread().name)
        if stream == 0:
            stream_0_ran.set()
        else:  # stream 1 waits for stream 0's first frame: on a loaded machine its worker could take them all
            stream_0_ran.wait(timeout=10)
        return run(stream, *args)

    monkeypatch.setattr(runtime._streams, "_run", recorded)
    frames = [random_frame(app, 120 + k) for k in range(8)]
    runtime.switch("full")
    results = list(runtime.process(frames if never_waits else iter(frames)))
    assert sorted(r.index for r in results) == list(range(8))
    for result in results:
        assert_equivalent(result.outputs, refs.outputs("full", frames[result.index]), f"frame {result.index}")
    here = threading.current_thread().name
    assert (threads[0] == {here}) is never_waits and here not in threads[1]


def threads_running_stream_0(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of the thread that runs each of stream 0's frames, in order, filled as the run goes. Stream 1 waits
    for stream 0's first frame and is slow (5 ms a frame), so it never takes every frame there is: while the
    caller's thread is away, a fast stream 1 would hold every slot and stream 0 might run no frame at all."""
    threads: list[str] = []
    run = runtime._streams._run  # type: ignore[union-attr]
    stream_0_ran = threading.Event()

    def recorded(stream: int, *args: object) -> object:
        if stream == 0:
            threads.append(threading.current_thread().name)
            stream_0_ran.set()
        else:
            stream_0_ran.wait(timeout=10)
            time.sleep(0.005)
        return run(stream, *args)

    monkeypatch.setattr(runtime._streams, "_run", recorded)
    return threads


def test_a_caller_busy_with_each_result_gets_a_thread_for_stream_0(runtime: Runtime, app: App, refs: References,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Stream 0 stands still while the caller's thread works on a result: past ``MAX_CALLER_AWAY_S`` a result
    (over ``CALLER_WINDOW`` of them) a worker thread takes stream 0 over, and no frame is lost or run twice."""
    from sbrs.runtime import streams as streams_module

    threads = threads_running_stream_0(runtime, monkeypatch)
    monkeypatch.setattr(streams_module, "CALLER_WINDOW", 4)
    frames = [random_frame(app, 130 + k) for k in range(6)] * 4
    runtime.switch("full")
    results = []
    for result in runtime.process(frames):
        results.append(result)
        time.sleep(0.002)  # a caller drawing each result
    assert sorted(r.index for r in results) == list(range(len(frames)))
    for result in results:
        assert_equivalent(result.outputs, refs.outputs("full", frames[result.index]), f"frame {result.index}")
    here = threading.current_thread().name
    assert threads[0] == here and threads[-1] == "sbrs-stream-0"
    assert here not in threads[threads.index("sbrs-stream-0"):]  # handed over once, for good


def test_a_stall_of_the_callers_thread_keeps_stream_0_on_it(runtime: Runtime, app: App, refs: References,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """One long result in a window (the caller's thread stalled while the system ran something else) is not a
    caller busy with each result: stream 0 stays on the caller's thread. Counted in full, the stall alone put the
    window's mean over ``MAX_CALLER_AWAY_S`` and stream 0 went to a worker for the rest of the call."""
    from sbrs.runtime import streams as streams_module

    threads = threads_running_stream_0(runtime, monkeypatch)
    monkeypatch.setattr(streams_module, "CALLER_WINDOW", 4)
    monkeypatch.setattr(streams_module, "MAX_CALLER_AWAY_S", 1e-3)  # far above a result handed out at once
    frames = [random_frame(app, 150 + k) for k in range(6)] * 4
    runtime.switch("full")
    results = []
    for result in runtime.process(frames):
        results.append(result)
        if len(results) % 4 == 2:
            time.sleep(0.02)  # one stall a window: 5 ms a result on average, 20 times the bound
    assert sorted(r.index for r in results) == list(range(len(frames)))
    for result in results:
        assert_equivalent(result.outputs, refs.outputs("full", frames[result.index]), f"frame {result.index}")
    assert threads and set(threads) == {threading.current_thread().name}


def test_caller_busy_leaves_a_windows_longest_results_out() -> None:
    """``caller_busy`` on figures: a stall or two among quick results is not a busy caller; more of them, or every
    result over the bound, is."""
    quick, stall = 2e-6, 440e-6
    assert not caller_busy([quick] * 31 + [stall])
    assert not caller_busy([quick] * 30 + [stall] * 2)
    assert caller_busy([quick] * 29 + [stall] * 3)  # the third counts: (29 x 2 + 440) / 30 µs > 10 µs
    assert caller_busy([12e-6] * 32)
    assert not caller_busy([9e-6] * 32)


def test_each_stream_has_an_arena_of_its_own_and_the_plan_counts_both(runtime: Runtime) -> None:
    plan = runtime.plan
    assert plan.streams == 2  # type: ignore[union-attr]
    one, two = runtime._streams.arenas  # type: ignore[union-attr]
    assert one is runtime._arena and one.nbytes == two.nbytes == plan.arena_bytes
    assert abs(one.base - two.base) >= plan.arena_bytes  # two allocations: their bytes never meet
    report = runtime.memory_report()
    assert report["streams"] == 2 and report["arena_bytes"] == 2 * plan.arena_bytes
    footprint = parts_footprint(plan)  # type: ignore[arg-type]
    chosen = plan.reduction["chosen"]
    assert footprint.tensors_bytes == 2 * chosen["arena_bytes"]  # every stream's tensors, inside calls too
    assert report["total_bytes"] == footprint.params_bytes + footprint.tensors_bytes <= LIMIT


@pytest.mark.parametrize("order", ["completion", "stream"])
def test_frames_in_flight_at_once_equal_onnx_runtime(runtime: Runtime, app: App, refs: References,
                                                     order: str) -> None:
    frames = [random_frame(app, seed) for seed in range(7)]
    for scenario in runtime.scenarios:
        runtime.switch(scenario)
        results = list(runtime.process(frames, order=order))
        assert sorted(r.index for r in results) == list(range(len(frames)))
        if order == "stream":
            assert [r.index for r in results] == list(range(len(frames)))
        for result in results:
            assert result.scenario == scenario
            assert_equivalent(result.outputs, refs.outputs(scenario, frames[result.index]), f"{order} {scenario}")


def test_both_streams_really_run_frames(runtime: Runtime, app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[int] = []
    run = runtime._streams._run  # type: ignore[union-attr]
    second_started = threading.Event()

    def counted(stream: int, *args: object) -> object:
        used.append(stream)
        if stream == 0 and used.count(0) == 1:  # hold the first stream's first frame until the second took one:
            second_started.wait(timeout=10)  # on a loaded machine its worker may start late and find none left
        elif stream == 1:
            second_started.set()
        return run(stream, *args)

    monkeypatch.setattr(runtime._streams, "_run", counted)
    list(runtime.process([random_frame(app, 1)] * 6))
    assert set(used) == {0, 1}


def test_a_worker_finds_a_slot_while_the_callers_thread_runs_a_frame(runtime: Runtime, app: App, refs: References,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the caller's thread runs stream 0, it cannot hand out results during its own frame. When its frame ends
    before the worker's, it takes the next one (the result due first is the worker's); the worker, finishing then,
    must still find a slot for its next frame, or its core stands idle for the rest of the caller's frame (a whole
    frame: drone on two streams lost 10 % of its frames so, 12.6 against 11.0 ms a frame in blocks of 20)."""
    run = runtime._streams._run  # type: ignore[union-attr]
    calls = {0: 0, 1: 0}
    worker_started, caller_second, worker_second = threading.Event(), threading.Event(), threading.Event()
    worker_went_on: list[bool] = []

    def timed(stream: int, *args: object) -> object:
        calls[stream] += 1
        if stream == 1 and calls[1] == 1:  # the worker's first frame ends once the caller runs its second
            worker_started.set()
            caller_second.wait(timeout=10)
        elif stream == 1 and calls[1] == 2:
            worker_second.set()
        elif stream == 0 and calls[0] == 1:  # the caller's first frame ends at once, after the worker's began
            worker_started.wait(timeout=10)
        elif stream == 0 and calls[0] == 2:  # inside the caller's second frame: the worker takes its next one
            caller_second.set()
            worker_went_on.append(worker_second.wait(timeout=10))
        return run(stream, *args)

    monkeypatch.setattr(runtime._streams, "_run", timed)
    frames = [random_frame(app, 140 + k) for k in range(6)]
    runtime.switch("full")
    results = list(runtime.process(frames))
    assert worker_went_on == [True]
    assert sorted(r.index for r in results) == list(range(6))
    for result in results:
        assert_equivalent(result.outputs, refs.outputs("full", frames[result.index]), f"frame {result.index}")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=st.lists(st.tuples(st.integers(0, 9), st.sampled_from(["full", "skip"])), max_size=4),
       order=st.sampled_from(["completion", "stream"]), never_waits=st.booleans())
def test_switches_between_frames_in_flight_keep_every_output_equal(runtime: Runtime, app: App, refs: References,
                                                                   requests: list[tuple[int, str]],
                                                                   order: str, never_waits: bool) -> None:
    """A request made as frame k is handed over (two frames may then be in flight) applies to a frame that has
    not started; every frame runs whole on one scenario, and its output equals that scenario's model. Both ways
    of running stream 0: on the caller's thread (frames that never wait) and on a worker."""
    frames = [random_frame(app, 20 + k) for k in range(10)]
    at = dict(requests)
    runtime.switch("full")
    runtime.infer(frames[0])
    source = switching_as_handed(runtime, frames, at)
    results = list(runtime.process(NeverWaiting(source) if never_waits else source, order=order))
    assert sorted(r.index for r in results) == list(range(len(frames)))
    by_index = sorted(results, key=lambda r: r.index)
    expected = "full"
    for k, result in enumerate(by_index):
        expected = at.get(k, expected)
        assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[k]), f"frame {k}")
        # a request made before frame k is handed over is taken by frame k at the latest
        if k in at:
            assert result.scenario == at[k]
    assert by_index[-1].scenario == expected
    switched = [r for r in by_index if r.switch is not None]
    assert all(r.switch.new == r.scenario for r in switched)  # type: ignore[union-attr]


def test_switches_from_three_threads_never_lose_a_frame(runtime: Runtime, app: App, refs: References) -> None:
    from tests.runtime.test_switching_stress import DISTINCT_FRAMES, stress

    frames = [random_frame(app, 100 + k) for k in range(DISTINCT_FRAMES)]
    want = {(s, k): refs.outputs(s, frame) for s in refs.sessions for k, frame in enumerate(frames)}
    for order, never_waits in itertools.product(("completion", "stream"), (False, True)):
        results = stress(runtime, frames, 0.4, seed=3, order=order, never_waits=never_waits)
        assert sorted(r.index for r in results) == list(range(len(results))), f"{order}: frames lost"
        assert_each_scenario_in_stream_order(results)
        assert len({r.scenario for r in results}) == 2, "the run never switched"
        for result in results:
            assert_equivalent(result.outputs, want[(result.scenario, result.index % DISTINCT_FRAMES)],
                              f"{order} frame {result.index} on {result.scenario}")


def test_infer_from_another_thread_waits_for_stream_0(runtime: Runtime, app: App, refs: References) -> None:
    frames = [random_frame(app, 40 + k) for k in range(4)]
    runtime.switch("skip")
    runtime.infer(frames[0])
    errors: list[BaseException] = []
    done = threading.Event()

    def infer_loop() -> None:
        try:
            while not done.is_set():
                for frame in frames:
                    assert_equivalent(runtime.infer(frame), refs.outputs("skip", frame), "infer beside process")
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=infer_loop)
    thread.start()
    try:
        results = list(runtime.process(itertools.islice(itertools.cycle(frames), 24)))
    finally:
        done.set()
        thread.join()
    assert not errors, repr(errors[0])
    assert sorted(r.index for r in results) == list(range(24))
    for result in results:
        assert_equivalent(result.outputs, refs.outputs("skip", frames[result.index % 4]), "process beside infer")


@pytest.mark.parametrize("never_waits", [True, False], ids=["caller-runs-stream-0", "a-worker-per-stream"])
def test_a_malformed_frame_comes_after_the_frames_before_it(runtime: Runtime, app: App, refs: References,
                                                            never_waits: bool) -> None:
    good = [random_frame(app, 60 + k) for k in range(3)]
    runtime.switch("full")
    seen = []
    frames = [*good, np.zeros((1, 3, 8, 8), np.float32), good[0]]
    with pytest.raises(InputError, match="shape"):
        for result in runtime.process(frames if never_waits else iter(frames)):
            seen.append(result)
    assert sorted(r.index for r in seen) == [0, 1, 2]
    for result in seen:
        assert_equivalent(result.outputs, refs.outputs("full", good[result.index]), "before the bad frame")
    assert_equivalent(runtime.infer(good[1]), refs.outputs("full", good[1]), "after the bad frame")


@pytest.mark.parametrize("never_waits", [True, False], ids=["caller-runs-stream-0", "a-worker-per-stream"])
def test_an_error_of_the_frame_source_comes_after_the_frames_before_it(runtime: Runtime, app: App,
                                                                       refs: References, never_waits: bool) -> None:
    """The streams' workers take the caller's frames; an error the caller's own iterator raises reaches the
    caller in that frame's turn, and the runtime stays usable."""
    good = [random_frame(app, 70 + k) for k in range(3)]

    def source() -> Iterator[np.ndarray]:
        yield from good
        raise OSError("camera unplugged")

    runtime.switch("full")
    seen = []
    with pytest.raises(OSError, match="camera unplugged"):
        for result in runtime.process(NeverWaiting(source()) if never_waits else source()):
            seen.append(result)
    assert sorted(r.index for r in seen) == [0, 1, 2]
    assert_equivalent(runtime.infer(good[0]), refs.outputs("full", good[0]), "after the source's error")


def test_results_come_out_while_a_live_source_waits_for_its_next_frame(runtime: Runtime, app: App,
                                                                       refs: References) -> None:
    """A camera-like source holds its third frame until the caller has the first two results: the caller gets
    them while a stream waits on the source (the source gives up after 10 s, and the test fails, if not)."""
    frames = [random_frame(app, 110 + k) for k in range(3)]
    two_results = threading.Event()

    def camera() -> Iterator[np.ndarray]:
        yield frames[0]
        yield frames[1]
        if not two_results.wait(10):
            raise TimeoutError("the caller never got the first two results")
        yield frames[2]

    runtime.switch("full")
    results = []
    for result in runtime.process(camera()):
        results.append(result)
        if len(results) == 2:
            two_results.set()
    assert sorted(r.index for r in results) == [0, 1, 2]
    for result in results:
        assert_equivalent(result.outputs, refs.outputs("full", frames[result.index]), "live source")


@pytest.mark.parametrize("never_waits", [True, False], ids=["caller-runs-stream-0", "a-worker-per-stream"])
def test_a_frame_that_fails_in_a_stream_is_raised_in_its_turn(runtime: Runtime, app: App, refs: References,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              never_waits: bool) -> None:
    frames = [random_frame(app, 90 + k) for k in range(6)]
    run = runtime._streams._run  # type: ignore[union-attr]

    def failing(stream: int, scenario: str, arrays: dict[str, np.ndarray], *frame: object) -> object:
        if any(np.array_equal(array, frames[2]) for array in arrays.values()):
            raise RuntimeError("a call failed")
        return run(stream, scenario, arrays, *frame)

    runtime.switch("full")
    monkeypatch.setattr(runtime._streams, "_run", failing)
    seen = []
    with pytest.raises(RuntimeError, match="a call failed"):
        for result in runtime.process(frames if never_waits else iter(frames)):
            seen.append(result)
    assert sorted(r.index for r in seen) == [0, 1]
    for result in seen:
        assert_equivalent(result.outputs, refs.outputs("full", frames[result.index]), "before the failure")
    monkeypatch.undo()
    assert sorted(r.index for r in runtime.process(frames)) == list(range(6))


class FrameCounter:
    def __init__(self) -> None:
        self.frames = 0

    def frame_done(self, scenario: str, seconds: float) -> None:
        self.frames += 1


@pytest.mark.parametrize("never_waits", [True, False], ids=["caller-runs-stream-0", "a-worker-per-stream"])
def test_a_caller_that_stops_early_leaves_the_runtime_usable(app: App, refs: References, never_waits: bool) -> None:
    frames = [random_frame(app, 80 + k) for k in range(6)]
    counter = FrameCounter()
    taken: list[int] = []

    def handed(frames: list[np.ndarray]) -> Iterator[np.ndarray]:
        for k, frame in enumerate(frames):
            taken.append(k)
            yield frame

    with Runtime.from_app(app, parts=two_stream_plan(app), observers=[counter]) as rt:
        stream = rt.process(NeverWaiting(handed(frames)) if never_waits else handed(frames))
        first = next(stream)
        time.sleep(0.3)  # a slow caller: the streams do not run ahead of it
        stream.close()  # the frames the streams took finish and are counted
        assert first.index == 0
        # the streams take at most one frame beyond one each while the caller holds a result, and one more where
        # the caller's thread runs stream 0 (a worker's slot while the caller runs a frame)
        assert 1 <= len(taken) <= 1 + rt._streams.count + 1 + never_waits  # type: ignore[union-attr]
        rt.infer(frames[2])
        assert counter.frames == len(taken) + 1
        results = list(rt.process(frames[:3]))
        assert counter.frames == len(taken) + 4
        for result in results:
            assert_equivalent(result.outputs, refs.outputs("full", frames[result.index]), "after an early stop")


def test_cancel_and_resume_run_one_frame_at_a_time(app: App) -> None:
    """A frame in flight that a switch gives up needs one frame at a time: the plan's second arena is not
    allocated then (the memory stays within the plan)."""
    for on_switch in ("cancel", "resume"):
        with Runtime.from_app(app, parts=two_stream_plan(app), on_switch=on_switch) as rt:
            assert rt._streams is None and rt.memory_report()["streams"] == 1
            assert rt.arena_bytes == rt.plan.arena_bytes


def test_fit_counts_an_arena_per_stream(app: App) -> None:
    """``fit_parts`` checks the limit on parameters plus every stream's arena: a limit that holds one arena but
    not two refuses the two-stream point, naming the figure."""
    from sbrs.reduction.search import saved_reduction

    reduction = saved_reduction(app)
    assert reduction is not None
    one = fit_parts(app, reduction)
    params = int(one.model_bytes["params_bytes"])
    limit = params + one.arena_bytes + one.arena_bytes // 2
    chosen = {**reduction["chosen"], "streams": 2}
    with pytest.raises(InputError, match="memory limit"):
        fit_parts(app, {**reduction, "memory_limit_bytes": limit, "chosen": chosen, "pareto": []})
    two = fit_parts(app, {**reduction, "memory_limit_bytes": params + 2 * one.arena_bytes, "chosen": chosen,
                          "pareto": []})
    assert two.streams == 2 and params + 2 * two.arena_bytes <= params + 2 * one.arena_bytes


def test_a_closed_runtime_refuses_frames(app: App) -> None:
    from sbrs.errors import SbrsRuntimeError

    rt = Runtime.from_app(app, parts=two_stream_plan(app))
    rt.close()
    with pytest.raises(SbrsRuntimeError, match="closed"):
        list(rt.process([random_frame(app, 1)]))


# -- execution units on two streams (``runtime.streams: 2``) ------------------------------------------------


TINY = Path(__file__).resolve().parents[2] / "apps" / "tiny.yaml"


@pytest.fixture(scope="module")
def unit_app(tmp_path_factory: pytest.TempPathFactory) -> App:
    """apps/tiny.yaml asking for two streams."""
    path = tmp_path_factory.mktemp("unit-streams") / "tiny.yaml"
    path.write_text(TINY.read_text(encoding="utf-8") + "runtime: {streams: 2}\n", encoding="utf-8")
    return load_app(path)


@pytest.fixture(scope="module")
def unit_runtime(unit_app: App) -> Runtime:
    return Runtime.from_app(unit_app)


def test_units_on_two_streams_run_one_thread_sessions_and_count_both_arenas(unit_runtime: Runtime,
                                                                            load_example) -> None:
    rt = unit_runtime
    assert rt.execution == "units" and rt._streams is not None and rt._streams.count == 2
    assert all(s.get_session_options().intra_op_num_threads == 1 for s in rt._sessions.values())
    report = rt.memory_report()
    assert report["streams"] == 2 and report["arena_bytes"] == 2 * rt.plan.arena_bytes
    with Runtime.from_app(load_example("tiny")) as one:
        alone = one.memory_report()
        assert alone["streams"] == 1 and one._streams is None
    assert report["plan_tensors_bytes"] == 2 * alone["plan_tensors_bytes"]
    assert report["params_bytes"] == alone["params_bytes"]  # the weights once, whatever the streams


@pytest.mark.parametrize("order", ["completion", "stream"])
def test_units_on_two_streams_equal_onnx_runtime_across_switches(unit_runtime: Runtime, unit_app: App,
                                                                 order: str) -> None:
    refs = References(unit_app)
    frames = [random_frame(unit_app, 200 + k) for k in range(12)]
    at = {2: "skip", 5: "exit", 6: "full", 9: "skip"}
    unit_runtime.switch("full")
    unit_runtime.infer(frames[0])
    results = sorted(unit_runtime.process(switching_as_handed(unit_runtime, frames, at), order=order),
                     key=lambda r: r.index)
    assert [r.index for r in results] == list(range(len(frames)))
    for k, result in enumerate(results):
        if k in at:
            assert result.scenario == at[k]
        assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[k]), f"{order} frame {k}")
    assert {r.scenario for r in results} == {"full", "skip", "exit"}


def test_units_on_two_streams_never_lose_a_frame_under_three_switching_threads(unit_runtime: Runtime,
                                                                              unit_app: App) -> None:
    from tests.runtime.test_switching_stress import DISTINCT_FRAMES, stress

    refs = References(unit_app)
    frames = [random_frame(unit_app, 300 + k) for k in range(DISTINCT_FRAMES)]
    want = {(s, k): refs.outputs(s, frame) for s in refs.sessions for k, frame in enumerate(frames)}
    results = stress(unit_runtime, frames, 0.4, seed=9, order="completion")
    assert sorted(r.index for r in results) == list(range(len(results)))
    assert_each_scenario_in_stream_order(results)
    assert len({r.scenario for r in results}) >= 2, "the run never switched"
    for result in results:
        assert_equivalent(result.outputs, want[(result.scenario, result.index % DISTINCT_FRAMES)],
                          f"frame {result.index} on {result.scenario}")


@pytest.mark.parametrize("order", ["completion", "stream"])
@pytest.mark.parametrize("both_cores", [True, False], ids=["on-both-cores", "on-one-core"])
def test_units_on_two_streams_stopping_a_frame_at_every_switch_never_lose_one(
        unit_runtime: Runtime, unit_app: App, order: str, both_cores: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three threads ask for switches while frames come without a pause, and every request that finds both
    streams busy stops frames (``MIN_LEFT_S`` and ``BOTH_CORES_MIN_LEFT_S`` lowered: tiny's frames are too short
    to stop otherwise): both, the switch's frame then running on both cores, or, without sessions for that, the
    younger. No frame is lost or comes out twice, frames of one scenario come out in order, every output equals
    ONNX Runtime, and frames were stopped."""
    from tests.runtime.test_switching_stress import DISTINCT_FRAMES, stress

    streams = unit_runtime._streams
    assert streams is not None and streams.both_cores is not None
    if not both_cores:
        monkeypatch.setattr(streams, "both_cores", None)
    monkeypatch.setattr("sbrs.runtime.streams.MIN_LEFT_S", float("-inf"))
    monkeypatch.setattr("sbrs.runtime.streams.BOTH_CORES_MIN_LEFT_S", float("-inf"))
    stops = 0
    stop_for = streams.stop_for

    def counted(scenario: str) -> None:
        nonlocal stops
        already = any(streams._stopping)
        stop_for(scenario)
        stops += not already and any(streams._stopping)

    monkeypatch.setattr(streams, "stop_for", counted)
    on_both_cores = 0
    solo_role = streams.solo_role

    def counted_role(stream: int) -> str | None:
        nonlocal on_both_cores
        role = solo_role(stream)
        on_both_cores += role == "run"
        return role

    monkeypatch.setattr(streams, "solo_role", counted_role)
    refs = References(unit_app)
    frames = [random_frame(unit_app, 700 + k) for k in range(DISTINCT_FRAMES)]
    want = {(s, k): refs.outputs(s, frame) for s in refs.sessions for k, frame in enumerate(frames)}
    results = stress(unit_runtime, frames, 0.4, seed=11, order=order, frame_gap_s=0.0)
    assert sorted(r.index for r in results) == list(range(len(results)))
    assert_each_scenario_in_stream_order(results)
    for result in results:
        assert_equivalent(result.outputs, want[(result.scenario, result.index % DISTINCT_FRAMES)],
                          f"frame {result.index} on {result.scenario}")
    assert stops > 0, "no frame was stopped"
    assert (on_both_cores > 0) == both_cores, f"{on_both_cores} switches' frames on both cores"


def test_units_on_two_streams_from_a_build(unit_app: App, tmp_path: Path) -> None:
    """``sbrs build`` records the two streams' plan, and ``runtime_for`` of the build runs them."""
    from sbrs.artifact.read import load_build
    from sbrs.runtime import runtime_for

    path = tmp_path / "tiny.yaml"
    path.write_text(Path(unit_app.config.path).read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["build", str(path), "--json"]) == 0
    footprint = load_build(path).footprint
    with runtime_for(path) as rt:
        assert rt._streams is not None and rt.memory_report()["plan_tensors_bytes"] == footprint.tensors_bytes
        refs = References(load_app(path))
        frames = [random_frame(unit_app, 400 + k) for k in range(4)]
        for result in rt.process(frames):
            assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]), "from the build")


def watch_the_switch(runtime: Runtime, before: Callable[[int], None], ran: list[tuple[int, str]],
                     monkeypatch: pytest.MonkeyPatch, stopped_late: frozenset[int] = frozenset()) -> list[list[int]]:
    """Frames 0 and 1 run on ``full`` and a switch to ``skip`` comes. The first call of every ``full`` frame on the
    streams runs ``before(frame)`` first and appends (frame, ``"stopped"`` or ``"whole"``) to ``ran`` as it ends; a
    frame of ``stopped_late`` leaves a stopped call 50 ms late (as one whose node in flight is long). The first call
    of a ``skip`` frame on the sessions for both cores appends (frame, ``"on both cores"``). Returns, filled as the
    run goes, for each frame on both cores the other streams that were inside a call as it began."""
    streams = runtime._streams
    assert streams is not None
    others_in_calls: list[list[int]] = []

    def gated(stream: int, call: Callable[[], object]) -> Callable[[], object]:
        def step() -> object:
            running = streams._running[stream]
            assert running is not None
            before(running.index)
            try:
                outcome = call()
            except Exception:
                if running.index in stopped_late:
                    time.sleep(0.05)
                ran.append((running.index, "stopped"))
                raise
            ran.append((running.index, "whole"))
            return outcome
        return step

    def noted(stream: int, call: Callable[[], object]) -> Callable[[], object]:
        def step() -> object:
            running = streams._running[stream]
            ran.append((-1 if running is None else running.index, "on both cores"))
            others_in_calls.append([s for s, other in enumerate(streams._running) if s != stream and other])
            return call()
        return step

    for stream, bound in enumerate(streams.bounds):
        first, *rest = bound.calls["full"]
        monkeypatch.setitem(bound.calls, "full", (gated(stream, first), *rest))
    for stream, bound in enumerate(streams.both_cores or []):
        first, *rest = bound.calls["skip"]
        monkeypatch.setitem(bound.calls, "skip", (noted(stream, first), *rest))
    return others_in_calls


def check_full_then_skip(results: list[FrameResult], frames: list[np.ndarray], refs: References) -> None:
    """Every frame came out once, frames 0 and 1 on ``full`` and the rest on ``skip``, each equal to ONNX Runtime,
    and frame 2 took the switch."""
    assert sorted(r.index for r in results) == list(range(len(frames)))
    for result in results:
        assert result.scenario == ("full" if result.index < 2 else "skip")
        assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]), f"frame {result.index}")
    switched = next(r for r in results if r.switch is not None)
    assert switched.index == 2 and switched.switch.old == "full" and switched.switch.new == "skip"


@pytest.mark.parametrize("order", ["completion", "stream"])
@pytest.mark.parametrize("frame_s", [10.0, 0.0], ids=["frames-long-enough-to-stop", "frames-too-short"])
@pytest.mark.parametrize("both_cores", [True, False], ids=["on-both-cores", "on-one-core"])
def test_a_switch_stops_old_frames_and_runs_them_again_after_the_new_one(
        unit_runtime: Runtime, unit_app: App, order: str, frame_s: float, both_cores: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames 0 and 1 run on ``full``, one on each stream, when a request for ``skip`` comes (from frame 1's own
    call, as it starts). Where ``full``'s frames take long (its last frame on the streams, ``frame_s``), the stop
    takes at once (``Streams.stop_for``): with the units' sessions of the runtime's threads (``both_cores``) both
    frames stop, frame 2 runs ``skip`` on both cores while the other stream waits, then frames 0 and 1 run again,
    whole; without them only the younger, frame 1, stops, and frame 2 runs on its stream's one-thread sessions.
    Frame 0's stopped call returns late (as a call does whose node in flight is long), and frame 2 starts on both
    cores only once it has: no other stream is inside a call then (``Streams.wait_for_stopped``).
    Where the frames take less than ``MIN_LEFT_S``, nothing stops. Either way every result equals ONNX Runtime,
    each frame comes out once, and in completion order the stopped frames come out after the switch's frame."""
    streams = unit_runtime._streams
    assert streams is not None and streams.both_cores is not None  # the runtime's threads: 2 on every test machine
    if not both_cores:
        monkeypatch.setattr(streams, "both_cores", None)
    refs = References(unit_app)
    frames = [random_frame(unit_app, 600 + k) for k in range(6)]
    both_started = threading.Barrier(2, timeout=10)
    requested = threading.Event()
    ran: list[tuple[int, str]] = []  # (frame, how its first call ended), in the order they ended

    def before(frame: int) -> None:
        if frame in (0, 1) and not requested.is_set():
            both_started.wait()
            if frame == 1:
                unit_runtime.switch("skip")
                requested.set()
            requested.wait(10)

    unit_runtime.switch("full")
    unit_runtime.infer(frames[0])
    others_in_calls = watch_the_switch(unit_runtime, before, ran, monkeypatch, stopped_late=frozenset({0}))
    monkeypatch.setitem(streams._frame_s, "full", frame_s)
    results = list(unit_runtime.process(iter(frames), order=order))
    check_full_then_skip(results, frames, refs)
    stopped = frame_s > 0
    assert ran.count((1, "stopped")) == stopped and ran.count((1, "whole")) == 1 and ran.count((0, "whole")) == 1
    assert ran.count((0, "stopped")) == (stopped and both_cores)
    assert [k for k, how in ran if how == "on both cores"] == ([2] if stopped and both_cores else [])
    assert others_in_calls == ([[]] if stopped and both_cores else [])
    out = [r.index for r in results]
    if order == "stream":
        assert out == sorted(out)
    elif stopped:  # (unstopped, frame 2 may still pass frame 1: both streams were free to take it)
        assert out.index(2) < out.index(1)
        if both_cores:
            assert out.index(2) < out.index(0)


def test_units_on_two_streams_have_sessions_of_the_runtimes_threads_for_a_switch(unit_runtime: Runtime,
                                                                                 load_example) -> None:
    """Every unit has a second session with the runtime's threads, bound to each stream's arena, for a switch's
    frame on both cores; a runtime on one stream has none."""
    rt = unit_runtime
    assert rt._streams is not None and rt._streams.both_cores is not None and len(rt._streams.both_cores) == 2
    assert set(rt._switch_sessions) == set(rt._sessions)
    assert rt.memory_report()["switch_sessions"] == len(rt._sessions) == rt.switch_session_count
    assert all(s.get_session_options().intra_op_num_threads == rt.thread_pool.count
               for s in rt._switch_sessions.values())
    with Runtime.from_app(load_example("tiny")) as one:
        assert one._switch_sessions == {} and one.memory_report()["switch_sessions"] == 0


def test_the_sessions_for_a_switch_on_both_cores_are_made_where_the_build_timed_long_frames() -> None:
    """``Program.longest_frame_s`` from a build's streams choice: the longest scenario's frame on one stream; the
    runtime makes the sessions of the runtime's threads where it is ``BOTH_CORES_MIN_FRAME_S`` or more, or where
    the build timed nothing (an app that asks for two streams)."""
    from sbrs.runtime.engine import BOTH_CORES_MIN_FRAME_S
    from sbrs.runtime.program import longest_frame_s

    timed = {"streams": 2, "figures": {"a": {"one_stream_s": 0.0007}, "b": {"one_stream_s": 0.0011}}}
    assert longest_frame_s(timed) == 0.0011 < BOTH_CORES_MIN_FRAME_S  # cifar10's and adaptive's kind of frames
    assert longest_frame_s({"streams": 2, "figures": {"large": {"one_stream_s": 0.0097}}}) >= BOTH_CORES_MIN_FRAME_S
    assert longest_frame_s({"streams": 2, "figures": None}) is None and longest_frame_s(None) is None


@pytest.mark.parametrize("order", ["completion", "stream"])
def test_a_switch_waits_for_a_frame_about_to_end_and_runs_on_both_cores(
        unit_runtime: Runtime, unit_app: App, order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames 0 and 1 run on ``full``, one on each stream, when a request for ``skip`` comes; frame 0 has 0.5 ms
    left by ``full``'s last frame time, frame 1 much longer. Only frame 1 is stopped (stopping a frame about to
    end saves nothing); frame 0 runs whole (held 50 ms, as a call whose last node is long), and frame 2, which
    took the request, runs on both cores once frame 0 has left its call. Then frame 1 runs again. Before, the
    younger frame alone was stopped and frame 2 ran on its stream's one-thread sessions."""
    streams = unit_runtime._streams
    assert streams is not None and streams.both_cores is not None
    refs = References(unit_app)
    frames = [random_frame(unit_app, 640 + k) for k in range(6)]
    both_started = threading.Barrier(2, timeout=10)
    requested = threading.Event()
    ran: list[tuple[int, str]] = []

    def before(frame: int) -> None:
        if frame in (0, 1) and not requested.is_set():
            both_started.wait()
            if frame == 1:
                first = next(f for f in streams._running if f is not None and f.index == 0)
                first.began = time.perf_counter() - streams._frame_s["full"] + 0.0005  # 0.5 ms left
                unit_runtime.switch("skip")
                requested.set()
            requested.wait(10)
            if frame == 0:
                time.sleep(0.05)  # its call runs whole, and ends after frame 1's stopped one

    unit_runtime.switch("full")
    unit_runtime.infer(frames[0])
    others_in_calls = watch_the_switch(unit_runtime, before, ran, monkeypatch)
    monkeypatch.setitem(streams._frame_s, "full", 10.0)
    results = list(unit_runtime.process(iter(frames), order=order))
    check_full_then_skip(results, frames, refs)
    assert ran.count((0, "stopped")) == 0 and ran.count((0, "whole")) == 1
    assert ran.count((1, "stopped")) == 1 and ran.count((1, "whole")) == 1
    assert [k for k, how in ran if how == "on both cores"] == [2] and others_in_calls == [[]]
    assert ran.index((0, "whole")) < ran.index((2, "on both cores")) < ran.index((1, "whole"))


def test_a_frame_of_none_is_malformed_on_streams_too(load_example: Callable[[str], App]) -> None:
    """Not the end of the frames: the frames after it were silently dropped."""
    from dataclasses import replace

    tiny = load_example("tiny")
    app = replace(tiny, config=replace(tiny.config, runtime=replace(tiny.config.runtime, streams=2)))
    frame = random_frame(app, 5)
    with Runtime.from_app(app) as runtime:
        assert runtime.stream_count == 2
        for frames in ([frame, None, frame], iter([frame, None, frame])):  # the caller's thread, or workers only
            results = []
            with pytest.raises(InputError, match="NoneType"):
                for result in runtime.process(frames):  # type: ignore[arg-type]
                    results.append(result.index)
            assert results == [0]


def test_a_source_that_refills_one_array_gets_each_frame_s_own_result(load_example: Callable[[str], App]) -> None:
    """A capture loop that hands every frame over in the same array and refills it for the next: on two streams
    the next frame is taken (the array refilled) by the other stream, maybe before this frame was copied into its
    arena, so each frame is taken as a copy; one stream, like plain ONNX Runtime, is done with it before."""
    from dataclasses import replace

    from sbrs.runtime.streams import _Feeder

    tiny = load_example("tiny")
    app = replace(tiny, config=replace(tiny.config, runtime=replace(tiny.config.runtime, streams=2)))
    refs = References(app)
    frames = [random_frame(app, k) for k in range(200)]
    one_array = np.empty_like(frames[0])

    def refilled() -> Iterator[np.ndarray]:
        for frame in frames:
            one_array[...] = frame
            yield one_array

    with Runtime.from_app(app) as runtime:
        assert runtime.stream_count == 2
        feeder = _Feeder(runtime.runner, refilled(), slots=1, workers=1, own_copies=True)
        taken = feeder.take()
        assert taken is not None and not np.shares_memory(taken.arrays["input"], one_array)
        feeder.stop()
        runtime.switch(runtime.scenarios[0])
        for result in runtime.process(refilled()):
            if result.index % 50 == 0:
                runtime.switch(runtime.scenarios[result.index // 50 % len(runtime.scenarios)])
            assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]),
                              f"frame {result.index} on {result.scenario}")


def test_close_releases_every_session_while_the_runtime_is_still_referenced(
        load_example: Callable[[str], App]) -> None:
    """``close`` releases the sessions (their weights and state) of every stream, of the switch on both cores and
    of a transition's shadow slots, not only when the runtime object goes: the streams' and the shadow slots'
    bindings held six of tiny's on two streams (adaptive: 16 MB of RSS) until then."""
    import gc
    import weakref
    from dataclasses import replace

    tiny = load_example("tiny")
    app = replace(tiny, config=replace(tiny.config, runtime=replace(tiny.config.runtime, streams=2)))
    frame = random_frame(app, 1)
    runtime = Runtime.from_app(app)
    sessions = [*runtime._sessions.values(), *runtime._switch_sessions.values()]
    assert runtime.stream_count == 2 and len(sessions) > len(runtime._sessions)
    alive = [weakref.ref(session._sess) for session in sessions]
    del sessions
    for _ in runtime.process([frame] * 8):
        runtime.switch(runtime.scenarios[1])
    runtime.close()
    gc.collect()
    assert [ref() for ref in alive] == [None] * len(alive)
    with pytest.raises(SbrsRuntimeError, match="closed"):
        runtime.infer(frame)


@pytest.mark.parametrize("streams", [1, 2])
def test_a_frame_is_counted_before_the_loop_waits_for_the_next(load_example: Callable[[str], App],
                                                               streams: int) -> None:
    """The frames' bookkeeping (observers' ``frame_done``: the metrics, ``sbrs status``) ran when the next frame
    started: a camera's a frame period later, a stream being reopened's seconds later, and until then the metrics
    lagged the outputs by a frame. It runs before the loop waits for the caller's next frame."""
    from dataclasses import replace

    from sbrs.runtime.events import Observers

    class Counting:
        def __init__(self) -> None:
            self.frames: list[str] = []

        def frame_done(self, scenario: str, seconds: float) -> None:
            self.frames.append(scenario)

    tiny = load_example("tiny")
    app = replace(tiny, config=replace(tiny.config, runtime=replace(tiny.config.runtime, streams=streams)))
    frame = random_frame(app, 2)
    second_may_come = threading.Event()

    def camera() -> Iterator[np.ndarray]:  # a live source: the second frame comes later
        yield frame
        second_may_come.wait(30)
        yield frame

    counting = Counting()
    with Runtime.from_app(app, observers=Observers([counting])) as runtime:
        assert runtime.stream_count == streams
        results = runtime.process(camera())
        first = next(results)
        waiting = threading.Thread(target=lambda: next(results, None))
        waiting.start()
        deadline = time.monotonic() + 3
        while not counting.frames and time.monotonic() < deadline:
            time.sleep(0.01)
        counted_while_waiting = list(counting.frames)
        second_may_come.set()
        waiting.join(30)
        results.close()
    assert first.index == 0 and counted_while_waiting == [first.scenario]


def test_two_streams_asked_under_cancel_say_they_run_one(load_example: Callable[[str], App],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """``runtime.streams: 2`` with ``on_switch: cancel`` runs one stream (a frame given up needs one frame at a
    time): the app file asked for two and was not told why it had one."""
    from dataclasses import replace

    tiny = load_example("tiny")
    app = replace(tiny, config=replace(tiny.config, runtime=replace(tiny.config.runtime, streams=2,
                                                                    on_switch="cancel")))
    with caplog.at_level("INFO", logger="sbrs"), Runtime.from_app(app) as runtime:
        assert runtime.stream_count == 1
    assert any("runtime.streams: 2 runs one stream under on_switch: cancel" in record.getMessage()
               for record in caplog.records)
