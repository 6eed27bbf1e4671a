"""The ONNX Runtime environment sbrs' sessions run in: providers, threads, one shared CPU allocator, sessions.

Execution providers come from app.yaml ``runtime.providers`` (``CPUExecutionProvider`` by default;
``CUDAExecutionProvider`` and ``TensorrtExecutionProvider`` are accepted). A provider this onnxruntime build
does not have is an ``InputError`` naming it and the available ones. ``CPUExecutionProvider`` is always
appended as the fallback for operators a GPU provider cannot run.

Threads (app.yaml ``runtime.threads`` and ``runtime.threads_scope``). sbrs lives inside other people's
applications, which create ONNX Runtime sessions of their own with default options, before or after sbrs. So
by default (``threads_scope: session``) every sbrs session has its own threads, as a default session does, and
nothing process-wide changes: a session that runs a whole execution unit gets ``runtime.threads`` intra-op
threads (default: every core) that stop spinning when its call returns (``session.force_spinning_stop``), so the
pools of the units not running never take the cores from the one that runs (spinning idle pools made the drone
app 7x slower). The one exception is a *warm* session, a unit that is some scenario's whole frame: frame after
frame it is the only session called, so its threads spin for a moment after a call (``WARM_SPIN_US``) and the
next frame finds them awake instead of paying their wake-up (tiny's 0.1 ms frames: 0.92-0.98 of plain ONNX
Runtime's default session against 0.74-0.88 asleep); a moment later they sleep, so the application's own
sessions get the cores back (one of them beside a running sbrs kept the speed it has beside another default
session). A band call of a run by parts runs on the calling thread alone (one intra-op thread: no pool,
no fork/join per node). ``threads_scope: process`` is the opt-in to ONNX Runtime's *global* thread pool, which
every session of the process then shares: a little faster on frames of a fraction of a millisecond (the pool
is already awake when the next unit starts), but ONNX Runtime then refuses every later session of the process
that has threads of its own, the application's included (``use_per_session_threads must be false when using a
global thread pool``). Where the process already has a global pool (the application made one), sbrs'
sessions join it. sbrs' sessions never print ONNX Runtime's "EP Error" banner: they are created without the
Python wrapper's provider fallback, and a failure is an error of sbrs'.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
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
#: ``runtime.threads_scope``: each session its own threads (default), or ONNX Runtime's process-wide pool.
THREAD_SCOPES: tuple[str, ...] = ("session", "process")
#: How long a session with ONNX Runtime's default options keeps its intra-op threads spinning after a call returns,
#: with margin: on this machine (onnxruntime 1.32, 2 cores) frames of one-thread sessions on two threads started
#: within 20-30 ms of such a call ran at one thread's speed (ShuffleNetV2 int8: 0.85-0.89 ms a frame, then 0.49-0.52
#: once the pool slept). A benchmark that times another side after a default session's block waits this long.
DEFAULT_SPIN_SETTLE_S = 0.05
#: ``session.intra_op.spin_duration_us`` of a warm session's threads (module docstring). On this machine
#: (onnxruntime 1.32) 10 kept a pool spinning some 30-60 µs of CPU after a call, 20 some 0.2-0.4 ms.
WARM_SPIN_US = 10
#: How ONNX Runtime refuses a session with threads of its own once the process has a global pool.
_GLOBAL_POOL_REFUSAL = "use_per_session_threads must be false"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Threads:
    """The threads a runtime's sessions run on (module docstring).

    ``count``: intra-op threads of a session that runs a whole execution unit (``runtime.threads``, default:
    every core); ``scope``: ``session`` or ``process``; ``created``: under ``process``, whether this runtime
    created ONNX Runtime's global pool (false: it already existed, with a size this runtime cannot query).
    """

    count: int
    scope: str = "session"
    created: bool = False

    @property
    def requested(self) -> int:
        return self.count


def use_threads(threads: int | None, scope: str = "session", tensors_bytes: int | None = None) -> Threads:
    """The threads of a runtime: ``threads`` intra-op threads (default: every core) in ``scope``; its sessions
    share one CPU arena whose first region is sized from ``tensors_bytes``, the plan's tensors
    (:func:`_share_cpu_allocator`).

    ``process`` creates ONNX Runtime's global thread pool with ``threads`` once; if it already exists it is used
    as it is (a ``RuntimeWarning`` when ``threads`` was set explicitly). ONNX Runtime decides at the first
    session of the process whether global pools exist: where the application already made a session of its
    own without them, ``process`` cannot be had and the error says so.
    """
    if scope not in THREAD_SCOPES:
        raise InputError(f"unknown threads scope '{scope}' (allowed: {', '.join(THREAD_SCOPES)})",
                         field="runtime.threads_scope")
    count = threads or os.cpu_count() or 1
    if scope == "session":
        _share_cpu_allocator(tensors_bytes)
        return Threads(count, scope)
    try:
        ort.set_global_thread_pool_sizes(count, 1)
    except Exception as exc:  # onnxruntime raises its own Fail type: "Global thread pools have already been created"
        if "already" not in str(exc):
            raise
        if threads is not None:
            warnings.warn(f"ONNX Runtime's global thread pool already exists in this process; this runtime runs on "
                          f"it as it is (runtime.threads asked for {threads})", RuntimeWarning, stacklevel=3)
        return Threads(count, scope, created=False)
    log.warning("runtime.threads_scope: process: ONNX Runtime's global thread pool (%d threads) now serves every "
                "later session of this process; ONNX Runtime will refuse sessions created with threads of their own "
                "(its default: 'use_per_session_threads must be false when using a global thread pool')", count)
    _share_cpu_allocator(tensors_bytes)
    return Threads(count, scope, created=True)


#: The first region of the shared CPU arena, as a multiple of the plan's tensors (``_share_cpu_allocator``).
ARENA_FIRST_REGION_FACTOR = 2
ARENA_REGION_ROUNDING = 1 << 20


def _share_cpu_allocator(tensors_bytes: int | None = None) -> None:
    """One CPU memory arena for every sbrs session, registered with ONNX Runtime's environment.

    By default each ONNX Runtime session keeps its own arena for the tensors inside it, sized by its own
    peak, so a runtime of many units pays the sum of their peaks although units run one at a time. Sessions
    created with ``session.use_env_allocators`` (``session_options()``) share this one instead; sessions that do
    not ask for it (the application's own) are not affected (a second runtime registers it again, which ONNX
    Runtime accepts). Measured on the drone app (24 units): 209 → 159 MB
    resident, multi-cnn 273 → 229 MB; no throughput change beyond noise.

    The arena's first region is ``ARENA_FIRST_REGION_FACTOR`` times the plan's tensors (every tensor any scenario
    has live at once, ``sbrs.compile.footprint``), rounded up to a MiB; ONNX Runtime's default starts at 1 MiB
    and doubles each new region, so a unit's tensors end up spread over regions of 1, 2, 4, 8 MiB whose touched
    pages stay resident. One region large enough holds them together; it is reserved address space, resident only
    where touched. Measured on MobileNetV2 1.0@224 (6.02 MB of tensors): 11.0 → 7.8 MB of heap after running,
    3.2 MB less device memory, no change in speed beyond noise.
    """
    first_region = -1
    if tensors_bytes:
        wanted = ARENA_FIRST_REGION_FACTOR * int(tensors_bytes)
        first_region = -(-wanted // ARENA_REGION_ROUNDING) * ARENA_REGION_ROUNDING
    memory = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(memory, ort.OrtArenaCfg(0, -1, first_region, -1))


def share_cuda_allocator() -> None:
    """One CUDA memory arena for every sbrs session on the GPU, registered with ONNX Runtime's environment as
    the CPU one is (``_share_cpu_allocator``): each CUDA session otherwise keeps a BFC arena of its own, grown to
    its peak (cuDNN's convolution workspaces included) and never given back, so a runtime of many units pays the
    sum of their peaks. Only sessions made with ``session.use_env_allocators`` (sbrs') use it. Measured in
    docs/MEASUREMENTS.md ("On a GPU")."""
    memory = ort.OrtMemoryInfo("Cuda", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    try:
        ort.create_and_register_allocator_v2("CUDAExecutionProvider", memory, {}, ort.OrtArenaCfg(0, -1, -1, -1))
    except Exception as exc:  # onnxruntime raises its own Fail type when a second runtime registers it again
        if "already" not in str(exc).lower():
            raise


def session_options(threads: int = 1, scope: str = "session", *, warm: bool = False) -> ort.SessionOptions:
    """Options of an sbrs session: ``threads`` intra-op threads of its own (``scope`` ``session``) or ONNX
    Runtime's global pool (``process``), and the shared CPU allocator. Threads of its own stop spinning when a
    call returns, or, ``warm``, spin for a moment first (``WARM_SPIN_US``, module docstring)."""
    options = ort.SessionOptions()
    if scope == "process":
        options.use_per_session_threads = False
    else:
        options.intra_op_num_threads = threads
        if threads > 1 and warm:
            options.add_session_config_entry("session.intra_op.allow_spinning", "1")
            options.add_session_config_entry("session.intra_op.spin_duration_us", str(WARM_SPIN_US))
        elif threads > 1:
            options.add_session_config_entry("session.force_spinning_stop", "1")
    options.add_session_config_entry("session.use_env_allocators", "1")
    options.log_severity_level = 3
    return options


def new_session(path: str, options: ort.SessionOptions, providers: tuple[str, ...] | list[str],
                **kwargs: object) -> ort.InferenceSession:
    """``ort.InferenceSession(path, options, providers, **kwargs)`` without the wrapper's provider fallback (which
    prints an "EP Error" banner on stdout before retrying), joining the process's global thread pool where one
    exists and ``options`` asked for threads of the session's own (module docstring). A session that cannot be
    made on a GPU provider of ``providers`` is an ``InputError`` of ``runtime.providers``, on one line. Under
    ``session.force_spinning_stop`` its threads are put to sleep before it returns (``park_threads``)."""
    try:
        session = _session_in_any_pool(path, options, providers, **kwargs)
    except RuntimeError as error:
        gpu = [provider for provider in providers if provider in GPU_PROVIDERS]
        if not gpu:
            raise
        # listed by onnxruntime yet unusable here (its libraries missing: TensorRT without libnvinfer, measured on
        # an H200), or failing on this model: one line naming the provider, with ONNX Runtime's reason
        raise InputError(f"ONNX Runtime could not create a session on {', '.join(gpu)}: {_reason(error)}",
                         field="runtime.providers") from error
    if _stops_spinning_after_calls(options):
        park_threads(session)
    return session


def _session_in_any_pool(path: str, options: ort.SessionOptions, providers: tuple[str, ...] | list[str],
                         **kwargs: object) -> ort.InferenceSession:
    """The session, on the process's global thread pool where ONNX Runtime refuses one with threads of its own."""
    try:
        return ort.InferenceSession(path, options, providers=list(providers), enable_fallback=0, **kwargs)
    except RuntimeError as error:
        if _GLOBAL_POOL_REFUSAL not in str(error) or not options.use_per_session_threads:
            raise
    options.use_per_session_threads = False
    return ort.InferenceSession(path, options, providers=list(providers), enable_fallback=0, **kwargs)


def _reason(error: Exception) -> str:
    """ONNX Runtime's error message on one line, without the source location and signature it starts with."""
    text = " ".join(str(error).split())
    return re.sub(r"^\S+\.(?:cc|h|cpp):\d+ (?:[^()]*\([^)]*\)\s*)?", "", text) or type(error).__name__


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


def create_session(model: onnx.ModelProto | str, providers: tuple[str, ...], *, threads: int = 1,
                   scope: str = "session", optimized: bool = False, warm: bool = False) -> ort.InferenceSession:
    """One ONNX Runtime session with ``threads`` intra-op threads in ``scope``, kept ``warm`` or not
    (``session_options``).

    A ``ModelProto`` is written to a temporary file and loaded from its path, never from bytes: from bytes,
    ONNX Runtime keeps a copy of the initializers next to its prepacked weights (measured on ResNet-18:
    99.5 MB resident per session from bytes, 54.7 MB from a path). ``optimized``: the file is already ONNX
    Runtime's optimised form for this machine (``save_optimized``), loaded without optimising it again.
    """
    options = session_options(threads, scope, warm=warm)
    if isinstance(model, str):
        if optimized:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return new_session(model, options, providers)
    import tempfile

    import onnx

    with tempfile.TemporaryDirectory(prefix="sbrs-unit-") as folder:
        path = os.path.join(folder, "unit.onnx")
        onnx.save_model(model, path)
        return new_session(path, options, providers)


def _stops_spinning_after_calls(options: ort.SessionOptions) -> bool:
    """Whether ``options`` ask for ``session.force_spinning_stop`` (onnxruntime raises for an entry never set)."""
    try:
        return options.get_session_config_entry("session.force_spinning_stop") == "1"
    except RuntimeError:
        return False


def park_threads(session: ort.InferenceSession) -> None:
    """Put a new session's intra-op threads to sleep now, not after its first call.

    A new pool's threads spin as they would after a call, and under ``session.force_spinning_stop`` only the end of
    a call stops them: until then each spins for tens of ms. A runtime of many units creates its sessions one after
    the other, so their threads spun together on the cores that the next session's creation and the first frame
    needed (detect's 9 units: 160 ms of CPU in the 0.5 s after they opened, its first frame 60-100 ms against
    12-23 ms with them asleep). A call refused by ONNX Runtime's checks ends like any other ("when the last of
    concurrent Run() calls returns", the option says) and computes nothing: a binding with nothing bound (onnxruntime
    1.32: "At least one output should be requested"). ``new_session`` does it for every session whose options ask
    for ``session.force_spinning_stop``: without that option a pool spins after every call anyway."""
    with contextlib.suppress(Exception):  # the refusal is the expected outcome
        session.run_with_iobinding(session.io_binding())


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
    from sbrs.digest import sha256

    digest = sha256(flags.encode()).hexdigest()[:16]
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
    new_session(source, options, providers)


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
