"""``runtime.session: one``: the app's one graph (``sbrs.compile.one_graph``) run by one ONNX Runtime session.

The build holds the graph as the unit ``one`` of a ``OnePlan`` (``sbrs.compile.one_plan``): every scenario's frame
is one call of that session. ``bind_one`` binds it per scenario as ``sbrs.runtime.binding.bind_units`` binds
units: the frame's slot in the arena as the app's input, the scenario's index (a small int64 array of its own,
in host memory on any provider: ``If`` takes its condition on the CPU) as the ``scenario`` input, and the
scenario's own outputs to their arena slots (the graph's other outputs, empty for this scenario, are not
fetched). The engine is the same: a switch takes effect at the next frame; under SBRS-TP the next frame may
start before the frame in flight is copied out (``sbrs.runtime.switching.new_first``), in its shadow slots, on
the same session (ONNX Runtime runs concurrent calls of one session, each with its own binding).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from sbrs.compile.one_plan import ONE_UNIT, SCENARIO_INPUT
from sbrs.runtime.binding import Bound, bind_frame_io
from sbrs.runtime.device import ArenaMemory, iobinding_runner

if TYPE_CHECKING:
    import onnxruntime as ort

    from sbrs.compile.one_plan import OnePlan


def bind_one(plan: OnePlan, sessions: Mapping[str, ort.InferenceSession], arena: ArenaMemory, device: str,
             input_name: str, run_options: ort.RunOptions, offsets: Mapping[str, int] | None = None) -> Bound:
    """Every scenario of ``plan`` bound once to the one session (module docstring), and the frame I/O;
    ``offsets`` as ``bind_units``'s (the shadow slots of a transition's new frame)."""
    bound = Bound()
    session = sessions[ONE_UNIT]
    tensors = {t.id: t for t in plan.tensors}

    def slot(tensor_id: str) -> tuple[int, tuple[int, ...], np.dtype, tuple[str, int, int]]:
        tensor = tensors[tensor_id]
        pointer = arena.pointer(tensor.offset if offsets is None else offsets[tensor_id])
        span = (tensor_id, pointer - arena.base, pointer - arena.base + tensor.nbytes)
        bound.ranges.append(span)
        return pointer, tensor.shape, np.dtype(tensor.dtype), span

    for index, scenario in enumerate(plan.sequences):
        binding = session.io_binding()
        reads, writes = bound.accesses.setdefault((scenario, 1), ([], []))
        pointer, shape, dtype, span = slot(plan.inputs[scenario][input_name])
        binding.bind_input(input_name, device, 0, dtype, list(shape), pointer)
        reads.append(span)
        chosen = bound.operands.setdefault((index,), np.array(index, np.int64))  # alive as long as the binding
        binding.bind_input(SCENARIO_INPUT, "cpu", 0, chosen.dtype, [], chosen.ctypes.data)
        for name, tensor_id in plan.outputs[scenario].items():
            pointer, shape, dtype, span = slot(tensor_id)
            binding.bind_output(name, device, 0, dtype, list(shape), pointer)
            writes.append(span)
        bound.calls[scenario] = (iobinding_runner(session, binding, run_options),)
        bound.steps[scenario] = (ONE_UNIT,)
    bind_frame_io(plan, bound, arena, device, input_name, offsets)
    return bound
