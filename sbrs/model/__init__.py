"""Stage 1 of the data flow: the CNN model of thesis Section 2.1 and its ONNX import."""

from sbrs._lazy import lazy_exports
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

# ONNX import and export load the onnx package; they are imported on first use (``sbrs._lazy``), so code that
# only needs the model types (the runtime running a compiled build) does not pay for it.
__getattr__, __dir__ = lazy_exports(globals(), {
    "build_graph_model": "sbrs.model.onnx_export", "to_onnx": "sbrs.model.onnx_export",
    "fold_model": "sbrs.model.fold", "fold_bands": "sbrs.model.fold",
    "import_model": "sbrs.model.onnx_import", "import_onnx": "sbrs.model.onnx_import",
    "load_onnx": "sbrs.model.onnx_import",
})

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
