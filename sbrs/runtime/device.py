"""Where the runtime's tensors live and how its calls run: the arena memory, bound calls, host/device copies.

Providers, sessions, the thread pool and the optimised forms of units are the process's ONNX Runtime
environment, which the build uses too: ``sbrs.ort_env``.

Arena memory: on the CPU provider the arena is one numpy buffer, aligned to 64 bytes, and views of it are
bound with IOBinding. For a GPU provider (CUDA, TensorRT) the arena is one device allocation
(``OrtValue.ortvalue_from_shape_and_type([bytes], uint8, "cuda", 0)``) and bindings point at
``data_ptr() + offset``; frames are copied in and outputs out with ``cudaMemcpy`` (``device_copy``). CI has no GPU:
``benchmarks/gpu_check.py`` checks this path by hand where one is (docs/MEASUREMENTS.md, "On a GPU").
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort

from sbrs.errors import SbrsRuntimeError
from sbrs.ort_env import GPU_PROVIDERS


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
    """The arena's bytes: a 64-byte-aligned numpy buffer (CPU) or one device allocation (GPU).

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


def device_copy(pointer: int, shape: tuple[int, ...], dtype: np.dtype, *, to_device: bool) -> Callable[..., Any]:
    """GPU arena only: a synchronous copy between a host buffer and the device slot at ``pointer``.
    ``to_device``: a frame's copy-in (``copy(array)``), else an output's copy-out (``copy()`` returns a new host
    array). Made with ``cudaMemcpy`` of the CUDA runtime ONNX Runtime's provider has loaded (``cuda_runtime``).

    Why not an ONNX Runtime session: an Identity model with its input bound to host memory and its output to
    the device slot left the slot unwritten on onnxruntime-gpu 1.31 (H100: every output of every example app
    wrong, ``benchmarks/gpu_check.py``), and ORT's Python API has no copy into an address it did not allocate.
    A copy out of the device returns once it is done; a copy in from pageable memory may return once the bytes
    are staged, before the DMA lands, so it waits for the default stream too (ONNX Runtime's stream need not
    be ordered after it). Every ORT call has synchronised its own stream before it returns, so the copies are
    ordered with the calls as on the CPU arena.
    """
    runtime = cuda_runtime()
    copy, wait = runtime.cudaMemcpy, runtime.cudaStreamSynchronize
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if to_device:
        def copy_in(array: np.ndarray) -> None:
            host = np.ascontiguousarray(array, dtype=dtype)
            _check_cuda(copy(pointer, host.ctypes.data, nbytes, CUDA_HOST_TO_DEVICE), "copying a frame in")
            _check_cuda(wait(None), "waiting for a frame's copy")

        return copy_in

    def copy_out() -> np.ndarray:
        host = np.empty(shape, dtype)
        _check_cuda(copy(host.ctypes.data, pointer, nbytes, CUDA_DEVICE_TO_HOST), "copying an output out")
        return host

    return copy_out


#: ``cudaMemcpyKind`` values (CUDA runtime API).
CUDA_HOST_TO_DEVICE, CUDA_DEVICE_TO_HOST = 1, 2


@functools.cache
def cuda_runtime() -> ctypes.CDLL:
    """The CUDA runtime library (``libcudart.so.N``) mapped into this process: the one ONNX Runtime's CUDA or
    TensorRT provider loaded with the arena's allocation, whatever its CUDA version (12 on JetPack 6, 13 on
    onnxruntime-gpu 1.31 from PyPI)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            path = next((line.split()[-1] for line in maps if "/libcudart.so" in line), None)
    except OSError:
        path = None
    if path is None:
        raise SbrsRuntimeError("no CUDA runtime library (libcudart) is loaded: the GPU provider did not start")
    library = ctypes.CDLL(path)
    library.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    library.cudaMemcpy.restype = ctypes.c_int
    library.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
    library.cudaStreamSynchronize.restype = ctypes.c_int
    return library


def _check_cuda(status: int, what: str) -> None:
    if status != 0:
        raise SbrsRuntimeError(f"CUDA error {status} {what}")
