"""Frame I/O of a plan bound to the arena (``sbrs.runtime.binding``): what the caller gets back is its own."""

from __future__ import annotations

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
