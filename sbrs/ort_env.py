"""The process's ONNX Runtime environment: providers, one global thread pool, one shared CPU allocator, and
the sessions made on them (the build's, which optimise units for this machine, and the runtime's).

Execution providers come from app.yaml ``runtime.providers`` (``CPUExecutionProvider`` by default;
``CUDAExecutionProvider`` and ``TensorrtExecutionProvider`` are accepted). A provider this onnxruntime build
does not have is an ``InputError`` naming it and the available ones. ``CPUExecutionProvider`` is always
appended as the fallback for operators a GPU provider cannot run.

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

import ctypes
import os
import sys
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import onnxruntime as ort

from sbrs.errors import InputError

if TYPE_CHECKING:  # onnx is imported where a model is built, never on the path that runs a compiled build
    import onnx

CPU_PROVIDER = "CPUExecutionProvider"
GPU_PROVIDERS: tuple[str, ...] = ("CUDAExecutionProvider", "TensorrtExecutionProvider")
ACCEPTED_PROVIDERS: tuple[str, ...] = (CPU_PROVIDER, *GPU_PROVIDERS)


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
