"""Shared helpers of the runtime tests: reference ONNX Runtime sessions, random frames, equivalence checks
(the ``load_example`` fixture is in tests/conftest.py: the build tests use it too).

Reference sessions run on the global thread pool like every session of the test suite (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sbrs.app import App
from tests.conftest import quiet_options

if TYPE_CHECKING:
    from sbrs.runtime.engine import Runtime


def with_adaptive(app: App, adaptive: tuple[str, ...]) -> App:
    """The same app with another adaptive set A."""
    return replace(app, config=replace(app.config, adaptive=adaptive))


#: A short, seeded reduction search on the analytic cost model: enough to find band heights for a small CNN.
SMALL_SEARCH = ("--generations", "6", "--population", "12", "--cost", "analytic")


def build_under_its_plan(path: Path, template: str, factor: float = 0.95) -> int:
    """Write ``template`` (with ``{limit}`` left empty) to ``path`` and build it, then build it again with
    ``memory_limit_mb`` at ``factor`` of that unreduced plan on one stream (a short search); the unreduced plan's
    bytes on one stream (where ``runtime.streams: auto`` took two, each holds its own tensors: the plan's part
    beyond the parameters is halved)."""
    from sbrs.artifact.read import load_build
    from sbrs.cli import main

    path.write_text(template.format(limit=""))
    assert main(["build", str(path), "--json"]) == 0
    built = load_build(path)
    assert built.footprint is not None
    params, plan_bytes = built.footprint.params_bytes, built.footprint.plan_bytes
    unreduced = params + (plan_bytes - params) // built.streams
    path.write_text(template.format(limit=f"memory_limit_mb: {round(factor * unreduced / 1e6, 6)}"))
    assert main(["build", str(path), "--json", *SMALL_SEARCH]) == 0
    return unreduced


def random_frame(app: App, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(app.config.input.shape).astype(app.config.input.dtype)


class References:
    """Each scenario's own ONNX file in a standalone ONNX Runtime session: the ground truth (invariant 1). A
    scenario with its own ``input_size`` gets the frame through ONNX Runtime's Resize first, as documented."""

    def __init__(self, app: App) -> None:
        import onnxruntime as ort  # a default session, as a user of plain ONNX Runtime makes it

        self.sessions = {s.name: ort.InferenceSession(s.model_path, quiet_options(), providers=["CPUExecutionProvider"])
                         for s in app.config.scenarios}
        frame_shape = app.config.input.shape
        self.resizes = {s.name: resize_session(frame_shape, s.input_size, app.config.input.dtype)
                        for s in app.config.scenarios
                        if s.input_size is not None and tuple(s.input_size) != tuple(frame_shape[2:])}

    def outputs(self, scenario: str, frame: np.ndarray) -> dict[str, np.ndarray]:
        session = self.sessions[scenario]
        if scenario in self.resizes:
            frame = self.resizes[scenario].run(None, {"frame": frame})[0]
        values = session.run(None, {session.get_inputs()[0].name: frame})
        return {out.name: value for out, value in zip(session.get_outputs(), values, strict=True)}


def resize_session(frame_shape: tuple[int, ...], size: tuple[int, int], dtype: str = "float32") -> object:
    """A plain ONNX Runtime session of the one Resize (linear, half_pixel) that app.yaml's ``input_size`` means."""
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    element = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    sizes = numpy_helper.from_array(np.array([*frame_shape[:2], *size], np.int64), "sizes")
    node = helper.make_node("Resize", ["frame", "", "", "sizes"], ["resized"], mode="linear",
                            coordinate_transformation_mode="half_pixel")
    graph = helper.make_graph([node], "resize", [helper.make_tensor_value_info("frame", element, list(frame_shape))],
                              [helper.make_tensor_value_info("resized", element, None)], [sizes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ort.InferenceSession(model.SerializeToString(), quiet_options(), providers=["CPUExecutionProvider"])


def assert_equivalent(got: dict[str, np.ndarray], want: dict[str, np.ndarray], where: str) -> None:
    """Invariant 1: max abs diff <= 1e-5 * max(1, max |ref|), for every output, same names and shapes."""
    assert set(got) == set(want), where
    for name, reference in want.items():
        assert got[name].shape == reference.shape, f"{where}: {name}"
        tolerance = 1e-5 * max(1.0, float(np.abs(reference).max()))
        diff = float(np.abs(got[name] - reference).max())
        assert diff <= tolerance, f"{where}: output {name} differs by {diff} > {tolerance}"


def assert_switch_at_steps_equal(runtime: Runtime, refs: References, frames: list[np.ndarray], old: str, new: str,
                                 steps: Iterable[int]) -> None:
    """For each step k: a request for ``new`` at step k of a frame of ``old`` gives that frame on ``old`` and the
    next on ``new``, both equal to ONNX Runtime (``frames[2]`` warms ``old`` first)."""
    for step in steps:
        runtime.switch(old)
        runtime.infer(frames[2])
        results = list(runtime.process_with_hooks(frames[:2], order="stream", inject=(step, new)))
        assert [r.scenario for r in results] == [old, new]
        for result, frame in zip(results, frames[:2], strict=True):
            assert_equivalent(result.outputs, refs.outputs(result.scenario, frame), f"{old}->{new}@{step}")


class NeverWaiting:
    """Frames of an iterator that says it never waits for the world (``live`` false, as a file's source says):
    on streams, ``process`` runs stream 0 on the caller's own thread (``sbrs.runtime.streams.frames_never_wait``)."""

    live = False

    def __init__(self, frames: Iterator[np.ndarray]) -> None:
        self._frames = frames

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter(self._frames)
