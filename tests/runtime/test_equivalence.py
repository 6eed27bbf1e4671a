"""Invariant 1 (Equivalence): every scenario of every example app equals ONNX Runtime on its own ONNX file.

Under granularity ``auto`` and ``layer``, for A = {I, O, par} and {I, O}, and on every frame of random
switch sequences. The big apps (drone, multi-cnn) run fewer combinations to keep the suite fast.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbrs.app import App
from sbrs.runtime import Runtime, runtime_for
from tests.runtime.conftest import References, assert_equivalent, random_frame, with_adaptive

SMALL_APPS = ("tiny", "cifar10", "pamap2")
ADAPTIVE_SETS = (("I", "O", "par"), ("I", "O"))


def check_every_scenario(app: App, runtime: Runtime, references: References, seeds: tuple[int, ...]) -> None:
    for scenario in app.config.scenario_names:
        runtime.switch(scenario)
        for seed in seeds:
            frame = random_frame(app, seed)
            assert_equivalent(runtime.infer(frame), references.outputs(scenario, frame),
                              f"{app.name}/{scenario}/{runtime.plan.granularity}/A={app.config.adaptive}/seed {seed}")


def small_app_cases() -> list[object]:
    """Every small app, granularity and A; cifar10 by layer (115 units, 8 s a case) in the slow tier, where tiny and
    pamap2 by layer and cifar10 by auto units keep both in the fast one."""
    return [pytest.param(name, granularity, adaptive, id=f"{name}-{granularity}-{''.join(adaptive)}",
                         marks=[pytest.mark.slow] if (name, granularity) == ("cifar10", "layer") else [])
            for name in SMALL_APPS for granularity in ("auto", "layer") for adaptive in ADAPTIVE_SETS]


@pytest.mark.parametrize(("name", "granularity", "adaptive"), small_app_cases())
def test_small_apps_equal_onnxruntime(load_example: Callable[[str], App], name: str, granularity: str,
                                      adaptive: tuple[str, ...]) -> None:
    app = with_adaptive(load_example(name), adaptive)
    with runtime_for(app, granularity=granularity) as runtime:
        check_every_scenario(app, runtime, References(app), seeds=(1, 2))


@pytest.mark.parametrize(("name", "granularity", "adaptive"), [
    ("drone", "auto", ("I", "O", "par")),
    pytest.param("drone", "layer", ("I", "O", "par"), marks=pytest.mark.slow),  # 6 s; drone by auto units stays
    ("drone", "auto", ("I", "O")),
    ("multi-cnn", "auto", ("I", "O", "par")),
    pytest.param("multi-cnn", "layer", ("I", "O", "par"), marks=pytest.mark.slow),  # 112 units
])
def test_big_apps_equal_onnxruntime(load_example: Callable[[str], App], name: str, granularity: str,
                                    adaptive: tuple[str, ...]) -> None:
    app = with_adaptive(load_example(name), adaptive)
    with runtime_for(app, granularity=granularity) as runtime:
        check_every_scenario(app, runtime, References(app), seeds=(3,))


@pytest.mark.parametrize(("name", "granularity"), [
    ("tiny", "auto"), ("tiny", "layer"), ("cifar10", "auto"),
    pytest.param("cifar10", "layer", marks=pytest.mark.slow),  # 115 units, 6.5 s
])
def test_equal_on_every_frame_of_random_switch_sequences(load_example: Callable[[str], App], name: str,
                                                         granularity: str) -> None:
    app = load_example(name)
    references = References(app)
    runtime = runtime_for(app, granularity=granularity)
    scenarios = app.config.scenario_names

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(st.tuples(st.sampled_from(scenarios), st.integers(0, 2**16)), min_size=1, max_size=8))
    def run(sequence: list[tuple[str, int]]) -> None:
        for scenario, seed in sequence:
            runtime.switch(scenario)
            assert runtime.scenario == scenario
            frame = random_frame(app, seed)
            assert_equivalent(runtime.infer(frame), references.outputs(scenario, frame),
                              f"{name}/{granularity}: {scenario} after {sequence}")

    with runtime:
        run()
