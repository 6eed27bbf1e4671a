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
