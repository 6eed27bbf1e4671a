"""Where the runtime's tensors live and how its calls run: the arena memory, bound calls, host/device copies.

Providers, sessions, the thread pool and the optimised forms of units are the process's ONNX Runtime
environment, which the build uses too: ``sbrs.ort_env``.

Arena memory: on the CPU provider the arena is one numpy buffer, aligned to 64 bytes, and views of it are
bound with IOBinding. For a GPU provider (CUDA, TensorRT) the arena is one device allocation
(``OrtValue.ortvalue_from_shape_and_type([bytes], uint8, "cuda", 0)``) and bindings point at
``data_ptr() + offset``; frames are copied in and outputs out through two tiny Identity sessions whose host
side is bound to numpy buffers (ONNX Runtime does the host/device copies). The GPU path cannot be tested on
the CPU-only machines this project's CI runs on: it is kept small and is untested.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

from sbrs.ort_env import GPU_PROVIDERS, create_session

if TYPE_CHECKING:  # onnx is imported where a model is built, never on the path that runs a compiled build
    import onnx


def device_of(providers: tuple[str, ...]) -> str:
    """``"cuda"`` when the first provider runs on the GPU, else ``"cpu"``: where the arena lives."""
    return "cuda" if providers[0] in GPU_PROVIDERS else "cpu"


def iobinding_runner(session: ort.InferenceSession, binding: ort.IOBinding,
                     run_options: ort.RunOptions | None = None) -> Callable[[], Any]:
    """A call that runs ``session`` on ``binding``: ``session.run_with_iobinding(binding, run_options)`` without
    the Python wrapper around it when its native parts are there. ``run_options``: the runtime's, whose
    ``terminate`` flag cancels the call in flight (``runtime.on_switch: cancel``).

    onnxruntime's wrapper (1.32) checks for WebGPU graph capture on every call before the native call: about
    1 µs a call (tiny's unit: 120.3 against 121.4 µs, interleaved medians), paid once per unit per frame and
    again in a switch's critical path; it does nothing else for bindings to raw pointers, as all of the
    runtime's are. The native
    objects (``_sess``, ``_iobinding``) are private to onnxruntime, so without them the public method runs.
    """
    native_session = getattr(session, "_sess", None)
    native_binding = getattr(binding, "_iobinding", None)
    if native_binding is None or not hasattr(native_session, "run_with_iobinding"):
        return functools.partial(session.run_with_iobinding, binding, run_options)
    return functools.partial(native_session.run_with_iobinding, native_binding, run_options)


class ArenaMemory:
    """The arena's bytes: a 64-byte-aligned numpy buffer (CPU) or one device allocation (GPU, untested).

    ``pointer(offset)`` is the address to bind; ``view(offset, shape, dtype)`` a numpy view (CPU only).
    """

    def __init__(self, nbytes: int, device: str, alignment: int = 64) -> None:
        self.nbytes = nbytes
        self.device = device
        self._device_value: Any = None
        if device == "cpu":
            raw = np.zeros(nbytes + alignment, dtype=np.uint8)
            start = (-raw.ctypes.data) % alignment
            self.host: np.ndarray | None = raw[start:start + nbytes]
            self._base = int(self.host.ctypes.data)
        else:
            self.host = None
            self._device_value = ort.OrtValue.ortvalue_from_shape_and_type([max(nbytes, 1)], np.uint8, device, 0)
            self._base = int(self._device_value.data_ptr())

    @property
    def base(self) -> int:
        return self._base

    def pointer(self, offset: int) -> int:
        return self._base + offset

    def view(self, offset: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """A numpy view of ``shape``/``dtype`` at ``offset`` (CPU arenas only)."""
        if self.host is None:
            raise ValueError("a device arena has no host views")
        count = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if offset < 0 or offset + count > self.nbytes:
            raise ValueError(f"view [{offset}, {offset + count}) outside the arena of {self.nbytes} bytes")
        return self.host[offset:offset + count].view(dtype).reshape(shape)


def device_copy(pointer: int, shape: tuple[int, ...], dtype: np.dtype, device: str, providers: tuple[str, ...], *,
                to_device: bool) -> tuple[Callable[..., Any], ort.InferenceSession]:
    """GPU arena only (untested here): a copy between a host buffer and the device slot at ``pointer``, made by an
    Identity session (``copy_model``) whose host side is bound to a numpy buffer. ``to_device``: a frame's
    copy-in (``copy(array)``), else an output's copy-out (``copy()`` returns the host copy). Returns the copy
    and its session (kept by the runtime)."""
    session = create_session(copy_model(shape, dtype.name), providers)
    host = np.zeros(shape, dtype)
    binding = session.io_binding()
    host_side, device_side = ("x", "y") if to_device else ("y", "x")
    bind_host = binding.bind_input if to_device else binding.bind_output
    bind_device = binding.bind_output if to_device else binding.bind_input
    bind_host(host_side, "cpu", 0, dtype, list(shape), host.ctypes.data)
    bind_device(device_side, device, 0, dtype, list(shape), pointer)

    def copy_in(array: np.ndarray) -> None:
        np.copyto(host, array)
        session.run_with_iobinding(binding)

    def copy_out() -> np.ndarray:
        session.run_with_iobinding(binding)
        return host.copy()

    return (copy_in if to_device else copy_out), session


def copy_model(shape: tuple[int, ...], dtype: str) -> onnx.ModelProto:
    """An Identity model ``x → y`` of ``shape``/``dtype``: a host/device copy when x and y live apart."""
    from onnx import helper

    element = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "copy",
                              [helper.make_tensor_value_info("x", element, list(shape))],
                              [helper.make_tensor_value_info("y", element, list(shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
