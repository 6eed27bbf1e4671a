"""How many intra-op threads each execution unit runs on, measured on this machine when the build is made.

A unit's session has ``runtime.threads`` threads of its own (default: every core). A pool pays for its
threads on every call: they sleep between calls (they must, or idle pools of other units take the cores) and
are woken by the next, some 20-50 µs a call on this 2-core machine, while a small unit's layers leave a second
thread little to do. pamap2 (0.1 ms a frame) with every unit on one thread ran at 0.78-0.87 of plain ONNX
Runtime's better setting against 0.65-0.80 on two; tiny the other way (0.56-0.61 against 0.68-0.88), though
two of its three units alone measured faster on one while their pools slept. A unit that is a scenario's whole
frame keeps its pool warm instead (``whole_frame_units``, ``sbrs.ort_env``), and is measured so. So the build
times each small unit both ways, interleaved, and keeps one thread where that was faster; a unit whose call
takes longer than ``MEASURED_MAX_S`` on the pool keeps it without more measuring, as does every unit when the
app sets ``runtime.threads`` or ``threads_scope: process``. Units that compute the same thing on other weights
(``unit_structure``) are measured once: an app of many variants of one network has many units of few
structures (60 ResNet-18 variants: 226 units, 40 structures), and measuring each took 13-26 s of a 60-80 s
build here. The choice is the build's (``unit_threads`` in the manifest), never a test's: timing decides only
what the build records.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import numpy as np

#: Units whose call takes longer than this on the pool keep it unmeasured: their layers split well (ResNet-18
#: units of 2-8 ms ran 1.7-1.9x faster on two threads than on one here), and the build stays quick.
MEASURED_MAX_S = 0.0005
#: Interleaved rounds per unit, and the shortest timed block of calls (seconds).
ROUNDS = 5
MIN_BLOCK_S = 0.002


def _block(session: object, feed: dict[str, np.ndarray], calls: int) -> float:
    run = session.run  # type: ignore[attr-defined]
    start = time.perf_counter()
    for _ in range(calls):
        run(None, feed)
    return (time.perf_counter() - start) / calls


def whole_frame_units(sequences: Mapping[str, Sequence[str]]) -> frozenset[str]:
    """The units that are some scenario's whole frame (its one step): called frame after frame, their pools
    are kept warm (``sbrs.ort_env``, "warm")."""
    return frozenset(steps[0] for steps in sequences.values() if len(steps) == 1)


def measure_unit_threads(paths: Mapping[str, str], providers: tuple[str, ...], threads: int,
                         *, optimized: bool, warm: Collection[str] = ()) -> dict[str, int]:
    """The units of ``paths`` (unit id → model file) that ran faster on one thread than on ``threads``, each
    mapped to 1 (medians of ``ROUNDS`` interleaved blocks on random inputs of the unit's shapes); the pools of
    the units in ``warm`` are measured warm, as the runtime runs them."""
    rng = np.random.default_rng(0)
    warm_units = frozenset(warm)
    answers: dict[tuple[str, bool], bool] = {}  # (what a unit computes, warm) → one thread was faster
    chosen: dict[str, int] = {}
    for unit, path in paths.items():
        key = (unit_structure(path), unit in warm_units)
        if key not in answers:
            answers[key] = _one_thread_faster(path, providers, threads, optimized, unit in warm_units, rng)
        if answers[key]:
            chosen[unit] = 1
    return chosen


def _one_thread_faster(path: str, providers: tuple[str, ...], threads: int, optimized: bool, warm: bool,
                       rng: np.random.Generator) -> bool:
    """Whether the unit of ``path`` ran faster on one thread than on ``threads`` (``measure_unit_threads``)."""
    import statistics  # only a build measures: the runtime imports this module for ``whole_frame_units``

    from sbrs.ort_env import create_session

    pool = create_session(path, providers, threads=threads, optimized=optimized, warm=warm)
    feed = random_feed(pool, rng)
    first = _block(pool, feed, 3)
    if first > MEASURED_MAX_S:
        return False
    sessions = {threads: pool, 1: create_session(path, providers, threads=1, optimized=optimized)}
    calls = max(1, int(MIN_BLOCK_S / max(first, 1e-6)))
    samples: dict[int, list[float]] = {count: [] for count in sessions}
    _block(sessions[1], feed, 3)
    for _ in range(ROUNDS):
        for count, session in sessions.items():
            samples[count].append(_block(session, feed, calls))
    return statistics.median(samples[1]) < statistics.median(samples[threads])


def unit_structure(path: str) -> str:
    """A digest of what the unit model of ``path`` computes, whatever its weights hold and its tensors are called:
    its nodes in order (op, domain, attributes), how they are wired (tensor names numbered as they first appear),
    the types and shapes of its inputs and outputs, the shape and type of each initializer and the values of
    those of integer type (shapes, axes, indices: they change what is computed). Two units of
    one structure take the same time; ``measure_unit_threads`` measures one of them (a family of 60 ResNet-18
    variants: 226 units of 40 structures)."""
    import hashlib

    import onnx
    from onnx import numpy_helper
    from onnx.external_data_helper import load_external_data_for_tensor

    model = onnx.load_model(path, load_external_data=False)
    graph = model.graph
    numbers: dict[str, int] = {}

    def number(name: str) -> int:
        return -1 if not name else numbers.setdefault(name, len(numbers))

    def initializer(tensor: onnx.TensorProto) -> tuple[object, ...]:
        if tensor.data_type not in _INTEGER_TYPES:
            return (tuple(tensor.dims), tensor.data_type)
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            load_external_data_for_tensor(tensor, str(Path(path).parent))
        return (tuple(tensor.dims), tensor.data_type, numpy_helper.to_array(tensor).tobytes())

    initializers = {tensor.name: initializer(tensor) for tensor in graph.initializer}
    digest = hashlib.sha256(repr(sorted((o.domain, o.version) for o in model.opset_import)).encode())
    for value in graph.input:
        digest.update(repr(("input", number(value.name), value.type.SerializeToString())).encode())
    for node in graph.node:
        operands = [(number(name), initializers.get(name)) for name in node.input]
        attributes = [attribute.SerializeToString() for attribute in node.attribute]
        digest.update(repr((node.op_type, node.domain, attributes, operands,
                            [number(name) for name in node.output])).encode())
    for value in graph.output:
        digest.update(repr(("output", number(value.name), value.type.SerializeToString())).encode())
    return digest.hexdigest()


def _random_input(rng: np.random.Generator, shape: list[int], dtype: np.dtype) -> np.ndarray:
    """A random input of ``shape``: float32 drawn as float32, not drawn as float64 and converted (4.9 against
    7.3 ms for a 1x64x56x56 input on this machine; a build of 226 units drew 1.3 s of inputs)."""
    if dtype == np.float32:
        return rng.standard_normal(shape, dtype=np.float32)
    return rng.standard_normal(shape).astype(dtype)


#: ONNX element types whose initializer values ``unit_structure`` keeps (``TensorProto`` numbers: uint8, int8,
#: uint16, int16, int32, int64, bool, uint32, uint64).
_INTEGER_TYPES = frozenset({2, 3, 4, 5, 6, 7, 9, 12, 13})


def random_feed(session: object, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random inputs of ``session``'s shapes and types (a unit's inputs have fixed shapes)."""
    return {i.name: _random_input(rng, [int(d) for d in i.shape], numpy_type(i.type))
            for i in session.get_inputs()}  # type: ignore[attr-defined]


def numpy_type(onnx_type: str) -> np.dtype:
    """numpy's dtype for ONNX Runtime's ``tensor(float)``-style type names."""
    names = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
             "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(int32)": np.int32,
             "tensor(int64)": np.int64, "tensor(bool)": np.bool_}
    return np.dtype(names.get(onnx_type, np.float32))
