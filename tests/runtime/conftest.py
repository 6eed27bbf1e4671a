"""Shared helpers of the runtime tests: reference ONNX Runtime sessions, random frames, equivalence checks
(the ``load_example`` fixture is in tests/conftest.py: the build tests use it too).

Reference sessions run on the global thread pool like every session of the test suite (tests/conftest.py).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sbrs.app import App


def with_adaptive(app: App, adaptive: tuple[str, ...]) -> App:
    """The same app with another adaptive set A."""
    return replace(app, config=replace(app.config, adaptive=adaptive))


def random_frame(app: App, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(app.config.input.shape).astype(app.config.input.dtype)


class References:
    """Each scenario's own ONNX file in a standalone ONNX Runtime session: the ground truth (invariant 1)."""

    def __init__(self, app: App) -> None:
        import onnxruntime as ort  # a default session, as a user of plain ONNX Runtime makes it

        self.sessions = {s.name: ort.InferenceSession(s.model_path, providers=["CPUExecutionProvider"])
                         for s in app.config.scenarios}

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
