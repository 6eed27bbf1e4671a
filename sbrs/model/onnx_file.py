"""An ONNX file read with its weights held once: mapped from the file, never copied into Python.

``onnx.load`` parses every tensor into protobuf's memory, and each read of a tensor's ``raw_data`` from Python
copies it again, so loading a model and converting its weights to numpy held them two to three times
(``sbrs check`` on a 510 MB VGG-style file peaked at 1.5 GB). Here the file is memory-mapped and its
protobuf walked at the wire level (https://protobuf.dev/programming-guides/encoding/): every initializer
whose ``raw_data`` has at least ``MAPPED_MIN_BYTES`` becomes a *placeholder* (name, type, shape, and an
external-data reference to where its bytes lie in the file), and its value a read-only numpy view of the
mapped file. Everything else (nodes, small tensors, metadata) is parsed by protobuf as usual. Tensors the
file already stores as external data are mapped from their own files the same way.

The mapped pages are the file's: the kernel reads them when the weights are first touched and may drop them
again under memory pressure, and nothing is copied until a later stage writes the weights somewhere else
(the build's ``weights.bin``). Files below ``MAPPED_MIN_FILE_BYTES`` are read into memory once instead (the
same walk over bytes): their weights then belong to the process, so rewriting the file cannot reach them.
"""

from __future__ import annotations

import mmap
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from sbrs.errors import InputError

#: Initializers with at least this many bytes of ``raw_data`` are mapped instead of parsed (weights; shape
#: tensors and scales stay inline, where shape inference and constant folding read them).
MAPPED_MIN_BYTES = 4096
#: Files of at least this size are memory-mapped; smaller ones are read into memory once (the weights are
#: views of that one copy), so that rewriting a small model file cannot touch a loaded App (DESIGN.md).
MAPPED_MIN_FILE_BYTES = 64 * 1024 * 1024

# Field numbers of onnx.proto3 that the walk needs.
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_RAW_DATA = 9
_LENGTH_DELIMITED = 2


@dataclass
class OnnxFile:
    """A model whose large initializers are placeholders, and their values (``arrays``, by tensor name)."""

    model: onnx.ModelProto
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def read_onnx(path: str | Path) -> OnnxFile:
    """Read the ONNX file ``path`` (module docstring); every failure is a one-line ``InputError`` naming it."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such ONNX file", file=str(path))
    size = path.stat().st_size
    if size == 0:
        raise InputError("not an ONNX model: an empty file (export the model again)", file=str(path))
    data: mmap.mmap | bytes
    if size >= MAPPED_MIN_FILE_BYTES:
        with open(path, "rb") as stream:
            data = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    else:  # read once: its weights are then the process's own, whatever happens to the file later
        data = path.read_bytes()
    try:
        loaded = _read(memoryview(data), path)
    except InputError:
        raise
    except Exception as exc:  # the walk raises ValueError/IndexError, protobuf several unrelated types
        raise InputError(f"not a readable ONNX model ({type(exc).__name__}: {exc})", file=str(path)) from None
    if not loaded.model.graph.node:  # protobuf parses an all-unknown file as an empty model
        raise InputError("not an ONNX model: a model without a graph (export the model again)", file=str(path))
    return loaded


def _read(data: memoryview, path: Path) -> OnnxFile:
    model_rest = bytearray()
    graph_rest = bytearray()
    tensors: list[onnx.TensorProto] = []
    arrays: dict[str, np.ndarray] = {}
    for number, wire, start, payload, end in _fields(data, 0, len(data)):
        if number != _MODEL_GRAPH or wire != _LENGTH_DELIMITED:
            model_rest += data[start:end]
            continue
        for g_number, g_wire, g_start, g_payload, g_end in _fields(data, payload, end):
            if g_number == _GRAPH_INITIALIZER and g_wire == _LENGTH_DELIMITED:
                tensors.append(_tensor(data, g_payload, g_end, path, arrays))
            else:
                graph_rest += data[g_start:g_end]
    model = onnx.ModelProto.FromString(bytes(model_rest))
    model.graph.MergeFrom(onnx.GraphProto.FromString(bytes(graph_rest)))
    model.graph.initializer.extend(tensors)
    return OnnxFile(model, arrays)


def _tensor(data: memoryview, start: int, end: int, path: Path, arrays: dict[str, np.ndarray]) -> onnx.TensorProto:
    """One initializer: parsed without its ``raw_data`` when that is large and mapped instead."""
    header = bytearray()
    raw: tuple[int, int] | None = None
    for number, wire, field_start, payload, field_end in _fields(data, start, end):
        if number == _TENSOR_RAW_DATA and wire == _LENGTH_DELIMITED and field_end - payload >= MAPPED_MIN_BYTES:
            raw = (payload, field_end - payload)
        else:
            header += data[field_start:field_end]
    tensor = onnx.TensorProto.FromString(bytes(header))
    if raw is not None:
        array = _mapped(data.obj, raw[0], raw[1], tensor)
        if array is None:  # a type numpy cannot view directly (bfloat16, 4-bit ...): parse it as protobuf does
            return onnx.TensorProto.FromString(bytes(data[start:end]))
        arrays[tensor.name] = array
        _make_placeholder(tensor, path.name, raw[0], raw[1])
    elif tensor.data_location == onnx.TensorProto.EXTERNAL:
        array = _external(tensor, path)
        arrays[tensor.name] = array
    return tensor


def _mapped(buffer: mmap.mmap | bytes, offset: int, length: int, tensor: onnx.TensorProto) -> np.ndarray | None:
    """A read-only little-endian view of ``length`` bytes at ``offset`` as ``tensor``'s type and shape."""
    if sys.byteorder != "little":
        return None
    if tensor.data_type in _UNVIEWABLE:
        return None
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except (KeyError, ValueError, TypeError):
        return None
    count = int(np.prod(tensor.dims, dtype=np.int64)) if tensor.dims else 1
    if dtype.kind not in "fiub" or dtype.itemsize * count != length:
        return None
    return np.frombuffer(buffer, dtype=dtype, count=count, offset=offset).reshape(tuple(tensor.dims))


# Types whose numpy stand-in in onnx.helper is not their stored layout (or that numpy lacks).
_UNVIEWABLE = frozenset(getattr(onnx.TensorProto, name) for name in (
    "BFLOAT16", "INT4", "UINT4", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT4E2M1",
    "STRING", "COMPLEX64", "COMPLEX128") if hasattr(onnx.TensorProto, name))


def _external(tensor: onnx.TensorProto, path: Path) -> np.ndarray:
    """The value of a tensor the file keeps as external data, mapped from its own file."""
    info = {entry.key: entry.value for entry in tensor.external_data}
    location = info.get("location", "")
    target = (path.parent / location).resolve()
    if not location or path.parent.resolve() not in target.parents or not target.is_file():
        raise InputError(f"initializer '{tensor.name}': its external data '{location}' is not a file beside the "
                         f"model", file=str(path))
    with open(target, "rb") as stream:
        buffer = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    offset = int(info.get("offset", 0))
    length = int(info.get("length", len(buffer) - offset))
    array = _mapped(buffer, offset, length, tensor) if offset + length <= len(buffer) else None
    if array is None:
        raise InputError(f"initializer '{tensor.name}': its external data in '{location}' does not hold a "
                         f"{list(tensor.dims)} tensor of type {onnx.TensorProto.DataType.Name(tensor.data_type)}",
                         file=str(path))
    _make_placeholder(tensor, location, offset, length)
    return array


def _make_placeholder(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    """Mark ``tensor`` as external data (its value is in ``OnnxFile.arrays``), keeping name, type, shape."""
    tensor.ClearField("raw_data")
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def is_placeholder(tensor: onnx.TensorProto) -> bool:
    return tensor.data_location == onnx.TensorProto.EXTERNAL


def _fields(data: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """The fields of the protobuf message in ``data[start:end]``: (number, wire type, field start, payload
    start, field end)."""
    position = start
    while position < end:
        field_start = position
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        payload = position
        if wire == 0:
            _, position = _varint(data, position)
        elif wire == 1:
            position += 8
        elif wire == _LENGTH_DELIMITED:
            length, payload = _varint(data, position)
            position = payload + length
        elif wire == 5:
            position += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} at byte {field_start}")
        if position > end or number == 0:
            raise ValueError(f"truncated or malformed protobuf at byte {field_start}")
        yield number, wire, field_start, payload, position


def _varint(data: memoryview, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if shift > 63:
            raise ValueError(f"malformed varint at byte {position}")
