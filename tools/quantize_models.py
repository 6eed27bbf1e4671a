"""Quantized and fp16 versions of a float32 ONNX CNN, made as a user of onnxruntime.quantization would.

    python tools/quantize_models.py MODEL.onnx OUT_DIR [--forms qdq-per-channel-u8,qoperator,...] [--frames 4]

Writes OUT_DIR/<model stem>-<form>.onnx for each form (:data:`FORMS`). Static quantization runs ONNX Runtime's
pre-processing (without symbolic shape inference, which needs sympy) and calibrates on ``--frames`` seeded
random frames (MinMax): fine for testing what sbrs does with the result, not for accuracy. fp16 forms need
onnxconverter-common (``fp16-onnxconverter*``); ``fp16-ort*`` use ``onnxruntime.transformers.float16``.

The files under tests/data/torchvision/quantized were made with

    python tools/quantize_models.py tests/data/torchvision/mobilenet_v3_small-legacy-64.onnx \
        tests/data/torchvision/quantized --forms qdq-per-channel-s8,qoperator,dynamic,fp16-ort
    python tools/quantize_models.py tests/data/torchvision/shufflenet_v2_x0_5-legacy-64.onnx \
        tests/data/torchvision/quantized --forms qdq-per-tensor-u8,qoperator,dynamic,fp16-onnxconverter-half-io

(onnxruntime 1.32, onnxconverter-common 1.16); tests/model/test_quantized.py makes the zoo's at test time.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx

#: Every form this script writes.
FORMS = ("qdq-per-tensor-u8", "qdq-per-channel-u8", "qdq-per-channel-s8", "qdq-contrib-u8", "qdq-contrib-u16",
         "qoperator", "dynamic", "fp16-onnxconverter", "fp16-onnxconverter-half-io", "fp16-ort", "fp16-ort-half-io")


def _frames(model: onnx.ModelProto, count: int) -> Iterator[dict[str, np.ndarray]]:
    value = model.graph.input[0]
    shape = [d.dim_value or 1 for d in value.type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)
    for _ in range(count):
        yield {value.name: rng.standard_normal(shape).astype(np.float32)}


def quantize(source: str | Path, target: str | Path, form: str, frames: int = 4) -> Path:
    """Write ``form`` (:data:`FORMS`) of the float32 model ``source`` to ``target``."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    source, target = Path(source), Path(target)
    if form.startswith("fp16"):
        import warnings

        model = onnx.load(source)
        keep_io_types = not form.endswith("half-io")
        if form.startswith("fp16-onnxconverter"):
            from onnxconverter_common import float16
            with warnings.catch_warnings():  # one warning per weight too small for float16
                warnings.simplefilter("ignore", UserWarning)
                converted = float16.convert_float_to_float16(model, keep_io_types=keep_io_types)
        else:
            from onnxruntime.transformers.float16 import convert_float_to_float16
            converted = convert_float_to_float16(model, keep_io_types=keep_io_types)
        onnx.save(converted, target)
        return target
    if form == "dynamic":
        quantize_dynamic(str(source), str(target))
        return target

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.frames = _frames(onnx.load(source, load_external_data=False), frames)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.frames, None)

    # activations uint8 or int8 as the form says (onnxruntime.quantization's default changed between releases),
    # weights int8; QOperator as onnxruntime.quantization makes it by default
    settings = {
        "qdq-per-tensor-u8": {"quant_format": QuantFormat.QDQ, "per_channel": False,
                              "activation_type": QuantType.QUInt8},
        "qdq-per-channel-u8": {"quant_format": QuantFormat.QDQ, "per_channel": True,
                               "activation_type": QuantType.QUInt8},
        "qdq-per-channel-s8": {"quant_format": QuantFormat.QDQ, "per_channel": True,
                               "activation_type": QuantType.QInt8},
        # the QDQ nodes in ONNX Runtime's own domain (com.microsoft), 8-bit and 16-bit activations
        "qdq-contrib-u8": {"quant_format": QuantFormat.QDQ, "per_channel": True, "activation_type": QuantType.QUInt8,
                           "extra_options": {"UseQDQContribOps": True}},
        "qdq-contrib-u16": {"quant_format": QuantFormat.QDQ, "per_channel": True,
                            "activation_type": QuantType.QUInt16, "weight_type": QuantType.QInt8,
                            "extra_options": {"UseQDQContribOps": True}},
        "qoperator": {"quant_format": QuantFormat.QOperator, "per_channel": True},
    }[form]
    with tempfile.TemporaryDirectory(prefix="sbrs-quantize-") as folder:
        prepared = Path(folder) / "prepared.onnx"
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        quantize_static(str(prepared), str(target), Reader(), **settings)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--frames", type=int, default=4)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for form in args.forms.split(","):
        print(quantize(args.model, args.out / f"{args.model.stem}-{form}.onnx", form, args.frames))


if __name__ == "__main__":
    main()
