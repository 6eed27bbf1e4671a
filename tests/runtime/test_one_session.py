"""``runtime.session: one``: the app as one graph on one ONNX Runtime session, through the one engine.

Every frame equals ONNX Runtime running the scenario's own model (invariant 1): in steady state, around a switch
of every ordered pair (the request as the old frame's call starts), through random switch sequences from a
thread and from three at once (requests at random moments, naive and SBRS-TP on either arena, cancelling the
frame in flight), on two streams, from a build as ``sbrs run`` opens it; the transition tables hold for the real bindings
(invariant 3); a run of such a build imports nothing of the compile stage.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sbrs.app import App, load_app
from sbrs.artifact.read import load_build
from sbrs.cli import main
from sbrs.compile.transitions import check_schedule
from sbrs.runtime import runtime_for
from sbrs.runtime.engine import Runtime
from tests.compile.test_one_graph import TORCHVISION_APP
from tests.conftest import FORBIDDEN, REPO, modules_a_run_loads, write_derived_app
from tests.runtime.conftest import References, assert_equivalent, assert_switch_at_steps_equal, random_frame
from tests.runtime.test_cancel import Cancellations, check_stream, request_at_step
from tests.runtime.test_switching_stress import DISTINCT_FRAMES, SECONDS_PER_CASE, stress

#: Runtimes of every way a switch runs: (transition, transition arena, on_switch).
KINDS = {"naive": ("naive", None, "finish"), "tp-shadow": ("sbrs-tp", "shadow", "finish"),
         "tp-shared": ("sbrs-tp", "shared", "finish"), "cancel": ("sbrs-tp", None, "cancel")}


def as_one(app: App, **runtime: object) -> App:
    """``app`` with ``runtime.session: one`` (and the other runtime options given)."""
    return replace(app, config=replace(app.config, runtime=replace(app.config.runtime, session="one", **runtime)))


def one_runtime(app: App, kind: str = "tp-shadow") -> Runtime:
    transition, arena, on_switch = KINDS[kind]
    runtime = runtime_for(as_one(app), transition=transition, transition_arena=arena, on_switch=on_switch)
    assert runtime.execution == "one" and runtime.session_count == 1
    return runtime


def assert_steady_state(runtime: Runtime, app: App, refs: References, frames: int = 2) -> None:
    for scenario in runtime.scenarios:
        runtime.switch(scenario)
        for seed in range(frames):
            frame = random_frame(app, seed)
            assert_equivalent(runtime.infer(frame), refs.outputs(scenario, frame), f"{scenario} frame {seed}")


def assert_every_pair(runtime: Runtime, app: App, refs: References) -> None:
    """Every ordered pair, the request as the old frame's one call starts (the frame in flight finishes on the old
    scenario, the next runs on the new one), in both delivery orders."""
    frames = [random_frame(app, 10 + k) for k in range(3)]
    for old in runtime.scenarios:
        for new in runtime.scenarios:
            if old != new:
                assert_switch_at_steps_equal(runtime, refs, frames, old, new, [1])


@pytest.fixture(scope="module")
def tiny(load_example: Callable[[str], App]) -> App:
    return load_example("tiny")


@pytest.fixture(scope="module")
def tiny_refs(tiny: App) -> References:
    return References(tiny)


@pytest.fixture(scope="module")
def tiny_runtimes(tiny: App) -> Iterator[dict[str, Runtime]]:
    runtimes = {kind: one_runtime(tiny, kind) for kind in KINDS}
    yield runtimes
    for runtime in runtimes.values():
        runtime.close()


@pytest.mark.parametrize("name", ["tiny", "pamap2", "cifar10"])
def test_example_apps_equal_onnx_runtime_in_steady_state_and_at_every_switch(load_example: Callable[[str], App],
                                                                             name: str) -> None:
    app = load_example(name)
    refs = References(app)
    for kind in ("tp-shadow", "naive"):
        with one_runtime(app, kind) as runtime:
            assert_steady_state(runtime, app, refs)
            assert_every_pair(runtime, app, refs)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["drone", "detect", "adaptive", "multi-cnn"])
def test_big_example_apps_equal_onnx_runtime(load_example: Callable[[str], App], name: str) -> None:
    app = load_example(name)
    refs = References(app)
    with one_runtime(app) as runtime:
        assert_steady_state(runtime, app, refs, frames=1)
        assert_every_pair(runtime, app, refs)


def test_derived_scenarios_and_models_nobody_here_wrote(tmp_path: Path) -> None:
    (tmp_path / "derived").mkdir()
    derived = load_app(write_derived_app(tmp_path / "derived", frames=2, seed=3200))
    (tmp_path / "tv.yaml").write_text(TORCHVISION_APP)
    for app in (derived, load_app(tmp_path / "tv.yaml")):
        refs = References(app)
        with one_runtime(app) as runtime:
            assert_steady_state(runtime, app, refs)
            assert_every_pair(runtime, app, refs)


def test_real_bindings_pass_the_hazard_checker(tiny_runtimes: dict[str, Runtime]) -> None:
    for kind, runtime in tiny_runtimes.items():
        waits = {key: table.wait for key, table in runtime.transitions.pairs.items()}
        assert check_schedule(runtime.bound_accesses(), waits,
                              new_accesses=runtime.bound_accesses(new_frame=True)) == [], kind


def test_sbrs_tp_runs_the_new_frame_before_the_old_frame_is_copied_out(tiny_runtimes: dict[str, Runtime],
                                                                      tiny: App, tiny_refs: References) -> None:
    """The one call of a frame is its last step: a request seen after it lets the next frame run first on the new
    scenario, in its shadow slots (``new_first``), and its result comes first."""
    runtime = tiny_runtimes["tp-shadow"]
    frames = [random_frame(tiny, 20), random_frame(tiny, 21)]
    runtime.switch("full")
    runtime.infer(frames[0])
    results = list(runtime.process_with_hooks(frames, order="completion", inject=(1, "exit")))
    assert [r.index for r in results] == [1, 0] and [r.scenario for r in results] == ["exit", "full"]
    assert results[0].switch is not None and results[0].switch.mode == "sbrs-tp"
    for result in results:
        assert_equivalent(result.outputs, tiny_refs.outputs(result.scenario, frames[result.index]), "new first")


@pytest.mark.parametrize("kind", list(KINDS))
def test_random_switches_keep_every_frame(tiny_runtimes: dict[str, Runtime], tiny: App, tiny_refs: References,
                                          kind: str) -> None:
    """Requests before frames and from a thread at random moments: every frame once, in order, equal."""
    runtime = tiny_runtimes[kind]
    scenarios = runtime.scenarios
    for seed in range(4):
        rng = random.Random(seed)
        frames = [random_frame(tiny, 30 + k) for k in range(12)]
        at = {rng.randrange(12): rng.randrange(len(scenarios)) for _ in range(4)}

        def source(frames: list[np.ndarray] = frames, at: dict[int, int] = at) -> Iterator[np.ndarray]:
            for index, frame in enumerate(frames):
                if index in at:
                    runtime.switch(scenarios[at[index]])
                yield frame

        done = threading.Event()

        def pester(rng: random.Random = rng, done: threading.Event = done) -> None:
            while not done.is_set():
                runtime.switch(rng.choice(scenarios), "socket")
                time.sleep(rng.random() * 3e-4)

        thread = threading.Thread(target=pester)
        thread.start()
        try:
            results = sorted(runtime.process(source()), key=lambda r: r.index)
        finally:
            done.set()
            thread.join()
        check_stream(results, frames, tiny_refs, f"{kind} seed {seed}")


def test_a_request_cancels_the_one_call_in_flight(tiny: App, tiny_refs: References) -> None:
    """``on_switch: cancel``: a request as the frame's one call starts stops it (``RunOptions.terminate``) and the
    frame runs again on the new scenario."""
    seen = Cancellations()
    frames = [random_frame(tiny, 50 + k) for k in range(3)]
    with runtime_for(as_one(tiny), on_switch="cancel", observers=[seen]) as runtime:
        assert runtime.execution == "one"
        runtime.switch("full")
        runtime.infer(frames[0])
        with request_at_step(runtime, "full", 1, lambda: runtime.switch("skip")):
            results = list(runtime.process(frames))
    check_stream(results, frames, tiny_refs, "cancel full->skip")
    assert [r.scenario for r in results] == ["skip"] * 3
    assert results[0].switch is not None and results[0].switch.cancelled_steps == 0
    assert seen.events == [("full", 0)]


def test_two_streams_on_the_one_session(tiny: App, tiny_refs: References) -> None:
    with runtime_for(as_one(tiny, streams=2)) as runtime:
        assert runtime.execution == "one" and runtime.memory_report()["streams"] == 2
        frames = [random_frame(tiny, 60 + k) for k in range(8)]

        def source() -> Iterator[np.ndarray]:
            for index, frame in enumerate(frames):
                if index in (2, 5):
                    runtime.switch({2: "exit", 5: "skip"}[index])
                yield frame

        results = sorted(runtime.process(source()), key=lambda r: r.index)
    check_stream(results, frames, tiny_refs, "two streams")


def test_a_build_runs_it_without_the_compile_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app_path = tmp_path / "tiny.yaml"
    app_path.write_text((REPO / "apps" / "tiny.yaml").read_text().replace(
        "initial: full\n", "initial: full\nruntime: {session: one}\n"))
    assert main(["build", str(app_path), "-q"]) == 0
    assert main(["inspect", str(app_path)]) == 0
    assert "runs as one graph on one ONNX Runtime session" in capsys.readouterr().out  # which mode, and why
    files = sorted(path.name for path in (tmp_path / "tiny.build").iterdir())
    # the graph, and ONNX Runtime's optimised form of it for this machine (its names made unique again)
    assert files == ["manifest.json", "one.onnx", "one.opt.onnx", "weights.bin", "weights.opt.bin"]
    assert load_build(app_path).optimized_here
    loaded = modules_a_run_loads(app_path, (*FORBIDDEN, "sbrs.compile.one_graph", "sbrs.moc", "sbrs.compile.layout"))
    assert loaded == []
    app = load_app(app_path)
    refs = References(app)
    with runtime_for(app_path) as runtime:
        assert runtime.execution == "one" and runtime.session_count == 1
        assert_steady_state(runtime, app, refs)
        assert_every_pair(runtime, app, refs)


@pytest.mark.parametrize("name", ["tiny", "cifar10"])
def test_concurrent_switches_never_lose_a_frame(load_example: Callable[[str], App], name: str) -> None:
    """Three threads sending requests at random moments while paced frames arrive (``test_switching_stress``'s
    ``stress``), every way a switch runs: every frame once, each equal to its scenario's own model."""
    app = load_example(name)
    refs = References(app)
    frames = [random_frame(app, 100 + k) for k in range(DISTINCT_FRAMES)]
    want = {(s, k): refs.outputs(s, frame) for s in refs.sessions for k, frame in enumerate(frames)}
    for case, kind in enumerate(KINDS):
        with one_runtime(app, kind) as runtime:
            for order in ("completion", "stream"):
                results = stress(runtime, frames, SECONDS_PER_CASE / 2, seed=case, order=order)
                indices = [r.index for r in results]
                assert sorted(indices) == list(range(len(results))), f"{kind}/{order}: frames lost or repeated"
                for result in results:
                    assert_equivalent(result.outputs, want[(result.scenario, result.index % DISTINCT_FRAMES)],
                                      f"{kind}/{order} frame {result.index} on {result.scenario}")
