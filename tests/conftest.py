"""Test-wide settings: a private model cache, and ONNX Runtime sessions on the runtime's global thread pool.

ONNX Runtime's global thread pool (which the sbrs runtime uses) is process-wide: once it exists, ONNX Runtime
refuses sessions with per-session threads anywhere in the process. Every test therefore makes its reference
sessions with ``ort_session``, on the same global pool, so tests may run in any order.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

REPO = Path(__file__).resolve().parents[1]
APPS = sorted((REPO / "apps").glob("*.yaml"))


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    previous = os.environ.get("SBRS_CACHE_DIR")
    os.environ["SBRS_CACHE_DIR"] = str(tmp_path_factory.mktemp("sbrs-cache"))
    yield
    if previous is None:
        os.environ.pop("SBRS_CACHE_DIR", None)
    else:
        os.environ["SBRS_CACHE_DIR"] = previous


def ort_session(model: onnx.ModelProto | str | Path) -> ort.InferenceSession:
    """A CPU reference session on the global thread pool (created here on first use)."""
    from sbrs.runtime.device import session_options, use_global_thread_pool

    use_global_thread_pool(None)
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(source, session_options(), providers=["CPUExecutionProvider"])
