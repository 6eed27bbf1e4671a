"""Stage 1 of the data flow: the CNN model of thesis Section 2.1 and its ONNX import."""

from typing import Any

from sbrs.model.cnn import (
    LAYER_TYPES,
    SUPPORTED_OPS,
    CnnModel,
    Edge,
    Layer,
    MemoryFigures,
    ParamRef,
    TensorSpec,
    WeightStore,
    layer_work,
    memory_figures,
    naive_buffer_bytes,
    params_bytes,
    unique_params,
)

# ONNX import and export load the onnx package; they are imported on first use, so code that only needs the
# model types (the runtime running a compiled build) does not pay for it.
_LAZY = {"build_graph_model": "onnx_export", "to_onnx": "onnx_export", "fold_model": "fold", "fold_bands": "fold",
         "import_model": "onnx_import", "import_onnx": "onnx_import", "load_onnx": "onnx_import"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"sbrs.model.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'sbrs.model' has no attribute {name!r}")


__all__ = [
    "LAYER_TYPES",
    "SUPPORTED_OPS",
    "CnnModel",
    "Edge",
    "Layer",
    "MemoryFigures",
    "ParamRef",
    "TensorSpec",
    "WeightStore",
    "build_graph_model",
    "fold_bands",
    "fold_model",
    "import_model",
    "import_onnx",
    "layer_work",
    "load_onnx",
    "memory_figures",
    "naive_buffer_bytes",
    "params_bytes",
    "to_onnx",
    "unique_params",
]
