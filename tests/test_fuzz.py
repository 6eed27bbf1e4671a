"""Property-based fuzzing of the three places outside input enters: the YAML loader, the socket protocol
decoder, the frame sources. Whatever the bytes, the answer is a value or a one-line error of the project's
own kind (``InputError``, ``RequestError``), never another exception. Bounded: a fixed number of examples
each, no deadline per example (the machine is shared), about half a minute in all.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbrs.app.config import InputSpec, load_app_config
from sbrs.app.yaml_lines import load_yaml
from sbrs.control import RequestError
from sbrs.errors import InputError
from sbrs.run.frames import open_source
from sbrs.server.protocol import decode_message, parse_request

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])
SCENARIOS = ("accurate", "eco")

yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                         st.text(max_size=20))
yaml_values = st.recursive(yaml_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=10), inner, max_size=5)), max_leaves=30)
app_keys = st.sampled_from(["name", "input", "scenarios", "runtime", "policy", "metrics", "adaptive", "initial",
                            "memory_limit_mb", "shape", "dtype", "layers", "requirements", "op"])


def _one_line(error: Exception) -> None:
    assert "\n" not in str(error).strip(), str(error)


@FUZZ
@given(st.binary(max_size=400))
def test_yaml_loader_on_any_bytes(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_bytes(data)
    try:
        load_yaml(path)
    except InputError as error:
        _one_line(error)


@FUZZ
@given(st.dictionaries(app_keys, yaml_values, max_size=8))
def test_app_config_on_any_structure(tmp_path: Path, document: dict[str, object]) -> None:
    """Structures near an app file (its own keys, random values) reach validation and are answered there."""
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump(document, allow_unicode=True))
    try:
        load_app_config(path)
    except InputError as error:
        _one_line(error)


json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
                           lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                   st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=20)
request_like = st.fixed_dictionaries({}, optional={"op": st.one_of(st.sampled_from(["switch", "env", "status"]),
                                                                   json_values),
                                                   "scenario": st.one_of(st.sampled_from(SCENARIOS), json_values),
                                                   "battery": json_values, "min_fps": json_values,
                                                   "requirements": json_values, "id": json_values})


@FUZZ
@given(st.one_of(st.binary(max_size=300), request_like.map(lambda r: json.dumps(r).encode()),
                 st.integers(min_value=4000, max_value=6000).map(lambda n: b'{"id": ' + b"7" * n + b"}")))
def test_protocol_decoder_on_any_line(line: bytes) -> None:
    try:
        parse_request(decode_message(line), SCENARIOS)
    except RequestError as error:
        assert error.code and "\n" not in error.message


npy_payloads = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda shape, dtype, fill: (shape, dtype, fill),
              st.lists(st.integers(1, 4), min_size=1, max_size=4),
              st.sampled_from(["float32", "float64", "int64", "uint8", "complex64", "bool"]),
              st.sampled_from([0.0, 1.0, float("nan"), float("inf")])))


@FUZZ
@given(st.lists(npy_payloads, min_size=1, max_size=3))
def test_npy_frame_source_on_any_files(tmp_path: Path, payloads: list[object]) -> None:
    folder = tmp_path / "frames"
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for index, payload in enumerate(payloads):
        path = folder / f"{index:03d}.npy"
        if isinstance(payload, bytes):
            path.write_bytes(payload)
        else:
            shape, dtype, fill = payload
            with np.errstate(invalid="ignore"):  # NaN or infinity cast to an integer type: whatever it gives
                np.save(path, np.full(shape, fill).astype(dtype))
    spec = InputSpec("input", (1, 2, 2), "float32")
    try:
        for frame in open_source(str(folder), spec):
            assert frame.shape == spec.shape and frame.dtype == np.float32 and np.isfinite(frame).all()
    except InputError as error:
        _one_line(error)


@FUZZ
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=3))
def test_image_frame_source_on_any_files(tmp_path: Path, blobs: list[bytes]) -> None:
    pytest.importorskip("PIL")
    folder = tmp_path / "images"
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for index, blob in enumerate(blobs):
        (folder / f"{index:03d}.png").write_bytes(b"\x89PNG\r\n\x1a\n" + blob if index % 2 else blob)
    spec = InputSpec("input", (1, 3, 8, 8), "float32")
    try:
        for frame in open_source(str(folder), spec):
            assert frame.shape == spec.shape
    except InputError as error:
        _one_line(error)
