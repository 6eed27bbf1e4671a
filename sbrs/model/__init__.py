"""Stage 1 of the data flow: the CNN model of thesis Section 2.1 and its ONNX import."""

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
from sbrs.model.onnx_export import build_graph_model, to_onnx
from sbrs.model.onnx_import import import_model, import_onnx, load_onnx

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
