"""A float32 ONNX model at another precision, made by ONNX Runtime's own tools (no quantizer of sbrs' own).

``int8-static``: ``onnxruntime.quantization``'s pre-processing (``quant_pre_process``: ONNX Runtime's graph
optimisations, BatchNormalization folded into convolutions, shapes inferred; without symbolic shape inference,
which needs sympy and a CNN with a fixed input does not) then static quantization in the QDQ format
(``quantize_static``, MinMax calibration on the frames given), int8 weights per channel and uint8 activations:
the u8s8 form ONNX Runtime's CPU kernels run fastest, and the form ``sbrs.model.quantized`` imports as QDQ units.

``fp16``: ``onnxruntime.transformers.float16`` with float32 inputs and outputs kept (so the app's input does
not change). It ships with onnxruntime, a dependency of sbrs, so a build never depends on an optional package;
onnxconverter-common's converter, when installed, would make another (equally valid) graph, and the cached
model must not depend on what else is installed.

Both return the serialized model; the caller caches it (``sbrs.app.derive``). Failures are ``InputError``s
whose one line says which tool refused and why.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sbrs.errors import InputError

if TYPE_CHECKING:
    import onnx


#: The precisions a scenario can be derived at (``quantize.mode`` of the app file).
MODES = ("int8-static", "fp16")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _load(model_path: Path, weights: bool = True) -> onnx.ModelProto:
    import onnx

    try:
        return onnx.load(str(model_path), load_external_data=weights)
    except Exception as exc:  # protobuf's DecodeError, an OSError, onnx's own: one line for the user
        raise InputError(f"cannot read the source model: {_first_line(exc)}", file=str(model_path)) from None


def _data_input(model_path: Path) -> str:
    model = _load(model_path, weights=False)
    initializers = {init.name for init in model.graph.initializer}
    names = [value.name for value in model.graph.input if value.name not in initializers]
    if len(names) != 1:
        raise InputError(f"the model has {len(names)} data inputs; a derived scenario needs exactly one",
                         file=str(model_path))
    return names[0]


def quantize_int8_static(source: Path, frames: Iterable[np.ndarray]) -> bytes:
    """``source`` (a float32 ONNX file) quantized to int8 QDQ, calibrated on ``frames`` (module docstring), which
    are taken one at a time as the calibration asks for them (a generator reads each file only then)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    input_name = _data_input(source)

    class Frames(CalibrationDataReader):
        def __init__(self) -> None:
            self.frames: Iterator[np.ndarray] = iter(frames)

        def get_next(self) -> dict[str, np.ndarray] | None:
            frame = next(self.frames, None)
            return None if frame is None else {input_name: frame}

    with tempfile.TemporaryDirectory(prefix="sbrs-quantize-") as folder:
        prepared, target = Path(folder) / "prepared.onnx", Path(folder) / "int8.onnx"
        try:
            quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
            quantize_static(str(prepared), str(target), Frames(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        except Exception as exc:  # ONNX Runtime's tools raise anything; the user needs one line, not a trace
            raise InputError(f"onnxruntime.quantization could not quantize the model: {_first_line(exc)}",
                             file=str(source)) from None
        return target.read_bytes()


def convert_fp16(source: Path) -> bytes:
    """``source`` (a float32 ONNX file) with float16 weights and computation, float32 inputs and outputs."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = _load(source)
    try:
        with warnings.catch_warnings():  # one warning per weight outside float16's range: clamped, as intended
            warnings.simplefilter("ignore", UserWarning)
            converted = convert_float_to_float16(model, keep_io_types=True)
    except Exception as exc:
        raise InputError(f"onnxruntime.transformers.float16 could not convert the model: {_first_line(exc)}",
                         file=str(source)) from None
    return converted.SerializeToString()
