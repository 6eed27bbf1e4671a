"""Frame I/O of a plan bound to the arena (``sbrs.runtime.binding``): what the caller gets back is its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sbrs.app import load_app
from sbrs.reduction import maximal_bands
from sbrs.runtime.engine import Runtime

#: Two scenarios whose output is a one-channel map ([1, 1, 16, 16]), as a mask or a depth map is: by parts it
#: lives in the rows layout, where the transposed view of its line buffer is already contiguous.
ONE_CHANNEL_MAPS = """\
name: maps
input: {name: input, shape: [1, 3, 16, 16], dtype: float32}
initial: wide
scenarios:
  - name: wide
    seed: 1
    layers:
      - {name: stem, op: conv, out: 8, kernel: 3, pad: 1, bn: true, act: relu}
      - {name: mask, op: conv, out: 1, kernel: 3, pad: 1}
  - name: narrow
    seed: 1
    layers:
      - {name: stem, op: conv, out: 8, kernel: 3, pad: 1, bn: true, act: relu}
      - {name: mask_1x1, op: conv, out: 1, kernel: 1}
"""


def test_outputs_by_parts_are_copies_that_later_frames_leave_alone(tmp_path: Path) -> None:
    path = tmp_path / "maps.yaml"
    path.write_text(ONE_CHANNEL_MAPS)
    app = load_app(path)
    rng = np.random.default_rng(0)
    frames = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    with Runtime.from_models(app.models, {name: maximal_bands(model) for name, model in app.models.items()}) as rt:
        assert rt.execution == "parts"
        first = rt.infer(frames[0])
        kept = {name: array.copy() for name, array in first.items()}
        streamed = next(iter(rt.process(frames[:1]))).outputs
        for frame in frames[1:]:
            rt.infer(frame)
        rt.switch("narrow")
        rt.infer(frames[1])
        for outputs in (first, streamed):
            for name, array in outputs.items():
                assert array.shape == (1, 1, 16, 16)
                assert array.flags.owndata, f"{name}: a view of the runtime's arena"
                np.testing.assert_array_equal(array, kept[name])


def test_a_switch_leaves_a_streamed_frame_alone_when_the_source_refills_its_buffer(tmp_path: Path) -> None:
    """A band on the graph input streams the frame: its feeds read the caller's array as the calls need its rows.
    An SBRS-TP switch takes the next frame while the old frame's feeds still read it; a source that refills one
    buffer (a capture loop) must not change the old frame's rows under them."""
    from tests.runtime.conftest import References, assert_equivalent

    path = tmp_path / "maps.yaml"
    path.write_text(ONE_CHANNEL_MAPS)
    app = load_app(path)
    refs = References(app)
    rng = np.random.default_rng(1)
    frames = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(2)]

    def capture() -> Iterator[np.ndarray]:
        buffer = np.empty((1, 3, 16, 16), np.float32)
        for frame in frames:
            buffer[...] = frame  # refilled in place when the next frame is asked for
            yield buffer

    bands = {name: maximal_bands(model, stream_input=True) for name, model in app.models.items()}
    with Runtime.from_models(app.models, bands) as rt:
        assert all(parts.streamed for parts in rt.plan.scenarios.values())
        assert rt.runner.transition_starts[("narrow", "wide")][0]  # the new frame may start before the old ends
        calls = rt.plan.scenarios["narrow"].calls
        last_feed = max(step for step, call in enumerate(calls, 1) if call.feed)
        for step in (1, last_feed // 2, last_feed - 1):
            rt.switch("narrow")
            results = list(rt.process_with_hooks(capture(), inject=(step, "wide")))
            assert [r.scenario for r in sorted(results, key=lambda r: r.index)] == ["narrow", "wide"]
            for result in results:
                assert_equivalent(result.outputs, refs.outputs(result.scenario, frames[result.index]),
                                  f"switch at step {step}, frame {result.index}")
