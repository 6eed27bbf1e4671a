"""The arena's memory and the GPU path's host/device copies, as far as a CPU-only machine can check them (the
GPU itself: ``benchmarks/gpu_check.py``, docs/MEASUREMENTS.md "On a GPU")."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from sbrs.errors import SbrsRuntimeError
from sbrs.runtime.device import ArenaMemory, cuda_runtime, device_copy, device_of


def test_the_first_provider_decides_where_the_arena_lives() -> None:
    assert device_of(("CUDAExecutionProvider", "CPUExecutionProvider")) == "cuda"
    assert device_of(("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")) == "cuda"
    assert device_of(("CPUExecutionProvider",)) == "cpu"


def test_a_cpu_arena_is_aligned_and_its_views_stay_inside_it() -> None:
    arena = ArenaMemory(1000, "cpu")
    assert arena.base % 64 == 0 and arena.pointer(128) == arena.base + 128
    view = arena.view(64, (2, 3), "float32")
    view[...] = 7.0
    assert arena.view(64, (6,), "float32").tolist() == [7.0] * 6
    with pytest.raises(ValueError, match="outside the arena"):
        arena.view(992, (4,), "float32")


@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(),
                    reason="this onnxruntime has the CUDA provider: its runtime library may be mapped already")
def test_without_a_gpu_provider_the_device_copy_says_cuda_is_missing() -> None:
    # this onnxruntime build has no CUDA provider, so no libcudart is mapped: a clear error, not a ctypes crash
    cuda_runtime.cache_clear()
    try:
        with pytest.raises(SbrsRuntimeError, match="no CUDA runtime library"):
            device_copy(0, (1, 4), np.dtype("float32"), to_device=True)
    finally:
        cuda_runtime.cache_clear()
