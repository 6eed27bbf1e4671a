"""The process's ONNX Runtime environment: one global thread pool and one shared CPU allocator.

Every session sbrs creates — the runtime's units, and the one the canonical form of an imported model needs
(``sbrs.model.canonical``) — runs on ONNX Runtime's *global* thread pool (``use_per_session_threads =
False``): many small sessions with their own spinning pools were 80x slower (docs/DESIGN.md). ONNX Runtime
creates its environment with the first session of the process and decides then, once, whether it has global
pools; a process whose first session had its own threads can never run sbrs' sessions. So the first session
sbrs makes, in whichever stage, creates the pool first (``use_global_thread_pool``), sized from the app's
``runtime.threads`` (default: every core). It cannot be resized: a later runtime asking for another size runs
on the existing pool (a warning when app.yaml sets ``runtime.threads`` explicitly). Once it exists, ONNX
Runtime refuses sessions with per-session threads anywhere in the process: create other sessions with
``session_options()`` (or ``use_per_session_threads = False``).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import onnxruntime as ort


@dataclass(frozen=True)
class ThreadPool:
    """The global ONNX Runtime thread pool a runtime runs on.

    ``created`` is true when this runtime created it with ``requested`` threads; false when it already existed
    (created by an earlier runtime in this process, with a size this runtime cannot query).
    """

    requested: int
    created: bool


def use_global_thread_pool(threads: int | None) -> ThreadPool:
    """Create the process's global ONNX Runtime thread pool with ``threads`` (default: every core), once.

    If the pool already exists it is used as it is. When ``threads`` was set explicitly (app.yaml
    ``runtime.threads``) a ``RuntimeWarning`` says that the existing pool's size applies. Note the process-wide
    consequence, which is ONNX Runtime's: once the global pool exists, every session in the process must be
    created with ``use_per_session_threads = False`` (``session_options()``), else ONNX Runtime refuses it.
    """
    requested = threads or os.cpu_count() or 1
    try:
        ort.set_global_thread_pool_sizes(requested, 1)
    except Exception as exc:  # onnxruntime raises its own Fail type: "Global thread pools have already been created"
        if "already" not in str(exc):
            raise
        if threads is not None:
            warnings.warn(f"ONNX Runtime's global thread pool already exists in this process; this runtime runs on "
                          f"it as it is (runtime.threads asked for {threads})", RuntimeWarning, stacklevel=3)
        return ThreadPool(requested, created=False)
    _share_cpu_allocator()
    return ThreadPool(requested, created=True)


def _share_cpu_allocator() -> None:
    """One CPU memory arena for every session of the process, registered with the global thread pool.

    By default each ONNX Runtime session keeps its own arena for the tensors inside it, sized by its own
    peak, so a runtime of many units pays the sum of their peaks although units run one at a time. Sessions
    created with ``session.use_env_allocators`` (``session_options()``) share this one instead. Measured on
    the drone app (24 units): 209 → 159 MB resident, multi-cnn 273 → 229 MB; no throughput change beyond noise.
    """
    memory = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(memory, ort.OrtArenaCfg(0, -1, -1, -1))


def session_options() -> ort.SessionOptions:
    """Options of every sbrs session (and of the standalone baseline in ``sbrs bench``): the global pool."""
    options = ort.SessionOptions()
    options.use_per_session_threads = False
    options.add_session_config_entry("session.use_env_allocators", "1")
    options.log_severity_level = 3
    return options


