"""ONNX Runtime plumbing: execution providers, the process-wide thread pool, session options, the arena memory.

Execution providers come from app.yaml ``runtime.providers`` (``CPUExecutionProvider`` by default;
``CUDAExecutionProvider`` and ``TensorrtExecutionProvider`` are accepted). A provider this onnxruntime build
does not have is an ``InputError`` naming it and the available ones. ``CPUExecutionProvider`` is always
appended as the fallback for operators a GPU provider cannot run.

Threads and the shared CPU allocator: ``sbrs.ort_env`` (one global ONNX Runtime thread pool per process).

Arena memory: on the CPU provider the arena is one numpy buffer, aligned to 64 bytes, and views of it are
bound with IOBinding. For a GPU provider (CUDA, TensorRT) the arena is one device allocation
(``OrtValue.ortvalue_from_shape_and_type([bytes], uint8, "cuda", 0)``) and bindings point at
``data_ptr() + offset``; frames are copied in and outputs out through two tiny Identity sessions whose host
side is bound to numpy buffers (ONNX Runtime does the host/device copies). The GPU path cannot be tested on
the CPU-only machines this project's CI runs on: it is kept small and is untested.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

from sbrs.errors import InputError
from sbrs.ort_env import ThreadPool as ThreadPool  # re-exported: the runtime stage's view of the environment
from sbrs.ort_env import session_options as session_options
from sbrs.ort_env import use_global_thread_pool as use_global_thread_pool

if TYPE_CHECKING:  # onnx is imported where a model is built, never on the path that runs a compiled build
    import onnx

CPU_PROVIDER = "CPUExecutionProvider"
GPU_PROVIDERS: tuple[str, ...] = ("CUDAExecutionProvider", "TensorrtExecutionProvider")
ACCEPTED_PROVIDERS: tuple[str, ...] = (CPU_PROVIDER, *GPU_PROVIDERS)


def resolve_providers(requested: tuple[str, ...], *, where: str | None = None) -> tuple[str, ...]:
    """The provider list for sessions: ``requested`` (checked against this build) plus the CPU fallback."""
    available = ort.get_available_providers()
    for provider in requested:
        if provider not in ACCEPTED_PROVIDERS:
            raise InputError(f"unknown execution provider '{provider}' (accepted: {', '.join(ACCEPTED_PROVIDERS)})",
                             file=where, field="runtime.providers")
        if provider not in available:
            raise InputError(f"execution provider '{provider}' is not available in this onnxruntime build "
                             f"(available: {', '.join(available)})", file=where, field="runtime.providers")
    providers = tuple(dict.fromkeys(requested or (CPU_PROVIDER,)))
    return providers if CPU_PROVIDER in providers else (*providers, CPU_PROVIDER)


def device_of(providers: tuple[str, ...]) -> str:
    """``"cuda"`` when the first provider runs on the GPU, else ``"cpu"``: where the arena lives."""
    return "cuda" if providers[0] in GPU_PROVIDERS else "cpu"


def create_session(model: onnx.ModelProto | str, providers: tuple[str, ...], *,
                   optimized: bool = False) -> ort.InferenceSession:
    """One ONNX Runtime session on the global thread pool (``use_global_thread_pool`` must have run).

    A ``ModelProto`` is written to a temporary file and loaded from its path, never from bytes: from bytes,
    ONNX Runtime keeps a copy of the initializers next to its prepacked weights (measured on ResNet-18:
    99.5 MB resident per session from bytes, 54.7 MB from a path). ``optimized``: the file is already ONNX
    Runtime's optimised form for this machine (``save_optimized``), loaded without optimising it again.
    """
    if isinstance(model, str):
        options = session_options()
        if optimized:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return ort.InferenceSession(model, options, providers=list(providers))
    import tempfile

    import onnx

    with tempfile.TemporaryDirectory(prefix="sbrs-unit-") as folder:
        path = os.path.join(folder, "unit.onnx")
        onnx.save_model(model, path)
        return ort.InferenceSession(path, session_options(), providers=list(providers))


def iobinding_runner(session: ort.InferenceSession, binding: ort.IOBinding) -> Callable[[], Any]:
    """A call that runs ``session`` on ``binding``: ``session.run_with_iobinding(binding)`` without the Python
    wrapper around it when its native parts are there.

    onnxruntime's wrapper (1.32) checks for WebGPU graph capture on every call before the native call: about
    1 µs a call (tiny's unit: 120.3 against 121.4 µs, interleaved medians), paid once per unit per frame and
    again in a switch's critical path; it does nothing else for bindings to raw pointers, as all of the
    runtime's are. The native
    objects (``_sess``, ``_iobinding``) are private to onnxruntime, so without them the public method runs.
    """
    native_session = getattr(session, "_sess", None)
    native_binding = getattr(binding, "_iobinding", None)
    if native_binding is None or not hasattr(native_session, "run_with_iobinding"):
        return functools.partial(session.run_with_iobinding, binding)
    return functools.partial(native_session.run_with_iobinding, native_binding, None)


def machine_key(providers: tuple[str, ...]) -> str | None:
    """What ONNX Runtime's fully optimised form of a model depends on besides the model: the onnxruntime
    version, the providers, the CPU architecture and its instruction-set flags (ONNX Runtime's layout pass
    blocks convolutions for the vector width it finds, so the form is only valid where it was made). None
    when the CPU's flags cannot be read (``/proc/cpuinfo``): no optimised form is made or used then."""
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as stream:
            for line in stream:
                name, _, value = line.partition(":")
                if name.strip() in ("flags", "Features"):  # x86, ARM
                    flags = " ".join(sorted(value.split()))
                    break
    except OSError:
        return None
    if not flags:
        return None
    import hashlib

    digest = hashlib.sha256(flags.encode()).hexdigest()[:16]
    return f"onnxruntime {ort.__version__}; {os.uname().machine}; {','.join(providers)}; cpu flags {digest}"


def save_optimized(source: str, target: str, providers: tuple[str, ...]) -> None:
    """Write ONNX Runtime's fully optimised form of the model file ``source`` to ``target`` (its initializers of
    1 KiB or more in ``target`` + ``.bin``), as ``create_session(target, providers, optimized=True)`` loads it.

    What a session would otherwise redo at every start (fusions, constant folding, the NCHWc layout and its
    reordered weights) is done once here. Measured on this machine: cifar10's 6 units load in 9 ms instead of
    54 ms, drone's 24 in 13-16 ms instead of 250-270 ms, at the same speed per frame.
    """
    options = session_options()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = target
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                     os.path.basename(target) + ".bin")
    options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    ort.InferenceSession(source, options, providers=list(providers))


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


def copy_model(shape: tuple[int, ...], dtype: str) -> onnx.ModelProto:
    """An Identity model ``x → y`` of ``shape``/``dtype``: a host/device copy when x and y live apart."""
    from onnx import helper

    element = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "copy",
                              [helper.make_tensor_value_info("x", element, list(shape))],
                              [helper.make_tensor_value_info("y", element, list(shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def release_free_memory() -> bool:
    """Give memory the C allocator holds but no longer uses back to the system (glibc ``malloc_trim``).

    Loading an app parses every scenario's weights into Python; once the runtime is built and the ``App`` is
    dropped, glibc keeps most of those freed bytes (its mmap threshold grows as big blocks are freed), so the
    resident set stays at its peak. Measured on apps/drone.yaml: 508 MB after building and dropping the app,
    190 MB after this call. Returns whether it could be called (Linux with glibc only).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:  # the process's own symbols, libc's among them (ctypes.util.find_library would run ldconfig)
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True
