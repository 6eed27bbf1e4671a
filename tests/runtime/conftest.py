"""Shared fixtures of the runtime tests: loaded example apps, reference ONNX Runtime sessions, random frames.

Reference sessions run on the global thread pool like every session of the test suite (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sbrs.app import App, load_app

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def load_example() -> Callable[[str], App]:
    """``load_example("tiny")`` → the app of apps/tiny.yaml with every shared run shared
    (``runtime.share_min_mb = 0``), so the tests exercise shared units even on apps whose weights are small;
    loaded once per test session. ``load_app`` gives the app with its own settings."""
    loaded: dict[str, App] = {}

    def load(name: str) -> App:
        if name not in loaded:
            app = load_app(REPO / "apps" / f"{name}.yaml")
            loaded[name] = replace(app, config=replace(app.config, runtime=replace(app.config.runtime,
                                                                                 share_min_mb=0.0)))
        return loaded[name]

    return load


def with_adaptive(app: App, adaptive: tuple[str, ...]) -> App:
    """The same app with another adaptive set A."""
    return replace(app, config=replace(app.config, adaptive=adaptive))


def random_frame(app: App, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(app.config.input.shape).astype(app.config.input.dtype)


class References:
    """Each scenario's own ONNX file in a standalone ONNX Runtime session: the ground truth (invariant 1)."""

    def __init__(self, app: App) -> None:
        from sbrs.runtime.device import create_session, use_global_thread_pool

        use_global_thread_pool(None)
        self.sessions = {s.name: create_session(s.model_path, ("CPUExecutionProvider",)) for s in app.config.scenarios}

    def outputs(self, scenario: str, frame: np.ndarray) -> dict[str, np.ndarray]:
        session = self.sessions[scenario]
        values = session.run(None, {session.get_inputs()[0].name: frame})
        return {out.name: value for out, value in zip(session.get_outputs(), values, strict=True)}


def assert_equivalent(got: dict[str, np.ndarray], want: dict[str, np.ndarray], where: str) -> None:
    """Invariant 1: max abs diff <= 1e-5 * max(1, max |ref|), for every output, same names and shapes."""
    assert set(got) == set(want), where
    for name, reference in want.items():
        assert got[name].shape == reference.shape, f"{where}: {name}"
        tolerance = 1e-5 * max(1.0, float(np.abs(reference).max()))
        diff = float(np.abs(got[name] - reference).max())
        assert diff <= tolerance, f"{where}: output {name} differs by {diff} > {tolerance}"
