"""``sbrs.ort_env``: how a session that cannot be made on the provider asked for is reported."""

from __future__ import annotations

from collections.abc import Callable

import onnxruntime as ort
import pytest

from sbrs.errors import InputError
from sbrs.ort_env import new_session, session_options

# what onnxruntime-gpu 1.31 raised on an H200 for TensorrtExecutionProvider, which it lists as available, on a
# machine without TensorRT's libraries (benchmarks/gpu_check.py, docs/MEASUREMENTS.md "On a GPU")
TENSORRT_MISSING = ("/onnxruntime_src/onnxruntime/python/onnxruntime_pybind_state.cc:729 void onnxruntime::python::"
                    "RegisterTensorRTPluginsAsCustomOps(PySessionOptions&, const onnxruntime::ProviderOptions&) "
                    "Please install TensorRT libraries as mentioned in the GPU requirements page, make sure they're "
                    "in the PATH or LD_LIBRARY_PATH, and that your GPU is supported.\n")


def _failing(message: str) -> Callable[..., ort.InferenceSession]:
    def session(*args: object, **kwargs: object) -> ort.InferenceSession:
        raise RuntimeError(message)

    return session


def test_a_gpu_provider_that_cannot_run_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ort, "InferenceSession", _failing(TENSORRT_MISSING))
    with pytest.raises(InputError) as raised:
        new_session("model.onnx", session_options(), ("TensorrtExecutionProvider", "CPUExecutionProvider"))
    message = str(raised.value)
    assert raised.value.field == "runtime.providers" and "\n" not in message
    assert "TensorrtExecutionProvider" in message and "Please install TensorRT libraries" in message
    assert ".cc:729" not in message and "RegisterTensorRTPluginsAsCustomOps" not in message


def test_a_cpu_session_error_is_not_blamed_on_a_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ort, "InferenceSession", _failing("[ONNXRuntimeError] : 1 : FAIL : bad model"))
    with pytest.raises(RuntimeError, match="bad model") as raised:
        new_session("model.onnx", session_options(), ("CPUExecutionProvider",))
    assert not isinstance(raised.value, InputError)


def _threads() -> set[str]:
    import os

    return set(os.listdir("/proc/self/task"))


def _cpu_ns(threads: set[str]) -> int:
    """Time the ``threads`` of this process spent on a CPU, in ns (``/proc/self/task/TID/schedstat``)."""
    total = 0
    for tid in threads:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", encoding="ascii") as stat:
                total += int(stat.read().split()[0])
        except (OSError, ValueError):  # a thread that ended
            continue
    return total


def test_a_new_sessions_threads_sleep_until_its_first_call_and_it_runs_as_before(tmp_path: object) -> None:
    """A new pool's threads spin as after a call, and ``force_spinning_stop`` stops them only when a call ends:
    sessions created one after the other spun together (detect: 160 ms of CPU in the 0.5 s after opening), on the
    cores the first frame needed. ``create_session`` puts them to sleep at once (``park_threads``); the session
    then runs as any other, its outputs ONNX Runtime's."""
    import time
    from pathlib import Path

    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    from sbrs.ort_env import create_session

    if not Path("/proc/self/task").is_dir():
        pytest.skip("needs Linux's /proc")
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), f"w{k}")
               for k in range(3)]
    nodes = [helper.make_node("Conv", ["x" if k == 0 else f"y{k - 1}", f"w{k}"], [f"y{k}"], pads=[1, 1, 1, 1])
             for k in range(3)]
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                                                [1, 8, 64, 64])],
                              [helper.make_tensor_value_info("y2", onnx.TensorProto.FLOAT, None)], weights)
    path = Path(str(tmp_path)) / "convs.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)

    before = _threads()
    sessions = [create_session(str(path), ("CPUExecutionProvider",), threads=2) for _ in range(3)]
    pools = _threads() - before
    assert pools, "each session has threads of its own"
    start = _cpu_ns(pools)
    time.sleep(0.3)
    spent_ms = (_cpu_ns(pools) - start) / 1e6
    # asleep: nothing; spinning, each thread spends tens of ms of the 0.3 s (about 50 ms each measured)
    assert spent_ms < 10, f"the new sessions' threads spent {spent_ms:.1f} ms of CPU while idle"
    x = rng.standard_normal((1, 8, 64, 64)).astype(np.float32)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for session in sessions:
        np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, rtol=1e-5, atol=1e-5)
