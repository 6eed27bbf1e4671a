"""Canonical form of an ONNX model before it becomes a ``CnnModel``: constants folded, no-op nodes removed.

Exporters write more than the network: PyTorch's legacy exporter puts an ``Identity`` on parameters and builds
``Flatten`` or channel shuffles from ``Shape``/``Gather``/``Unsqueeze``/``Concat`` chains; onnx's own test
models fill tensors with ``ConstantOfShape``; exports carry ``Constant`` nodes and ``Cast``s of constants. With
the app's input shape fixed, all of that is constant. Left in, those nodes either have no place in the thesis'
layer model or become layers whose outputs cross execution units (a legacy-exported ResNet-18 ran at 0.67-0.71
of ONNX Runtime with its 16 parameter ``Identity`` nodes as unit inputs).

The folding is ONNX Runtime's own offline optimizer at its basic level, which keeps to standard ONNX ops,
with every fusion that would rewrite weights (Conv+BN, Conv+Add/Mul, MatMul+Add into Gemm, ...) and the
rewrites that merely restructure (common subexpressions, constant sharing) turned off: what is left is
constant folding and the removal of Identity, Dropout, no-op Slice/Unsqueeze/Cast/Expand nodes. Measured on
torchvision exports (tools/export_torchvision.py): outputs identical to the source model's (max abs diff 0),
every weight above 4 kB bit-identical, so Algorithm 5 still finds equal weights equal; 0.06-0.2 s a model.

A model that needs none of it (only supported ops, no Constant nodes, no Identity on a parameter) is left
exactly as it is, so the zoo's models and their parameter counts are untouched.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import onnx

from sbrs.errors import InputError
from sbrs.model.cnn import SUPPORTED_OPS

#: ONNX Runtime optimizers of the basic level that are switched off (names as ONNX Runtime registers them).
DISABLED_OPTIMIZERS: tuple[str, ...] = (
    "ConvBNFusion", "ConvAddFusion", "ConvMulFusion", "ConvActivationFusion", "MatMulAddFusion",
    "MatMulScaleFusion", "GemmTransposeFusion", "GemmSumFusion", "GemmActivationFusion", "DivMulFusion",
    "FuseReluClip", "ReshapeFusion", "NotWhereFusion", "ConstantSharing", "CommonSubexpressionElimination",
)


def needs_canonical(model: onnx.ModelProto) -> bool:
    """Whether ``model`` holds anything the canonical form removes (module docstring)."""
    parameters = {tensor.name for tensor in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type not in SUPPORTED_OPS or node.op_type == "Constant":
            return True
        if node.op_type == "Identity" and node.input and node.input[0] in parameters:
            return True
    return False


def canonicalize(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    """``model`` in canonical form (module docstring); its input shapes must already be fixed."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    with tempfile.TemporaryDirectory(prefix="sbrs-canonical-") as folder:
        given, folded = os.path.join(folder, "given.onnx"), os.path.join(folder, "canonical.onnx")
        onnx.save_model(model, given)
        options.optimized_model_filepath = folded
        try:
            _optimize(ort, given, options)
        except Exception as exc:  # ONNX Runtime's own error types
            message = " ".join(str(exc).split())[:300]
            raise InputError(f"ONNX Runtime could not load the model to fold its constants: {message}",
                             file=source) from None
        return onnx.load(folded)


def _optimize(ort: Any, path: str, options: Any) -> None:
    """Create (and drop) a session on ``path`` so that ONNX Runtime writes the optimized model. Once a runtime
    made ONNX Runtime's process-wide thread pool, a session with threads of its own is refused: use the pool."""
    try:
        ort.InferenceSession(path, options, providers=["CPUExecutionProvider"],
                             disabled_optimizers=list(DISABLED_OPTIMIZERS))
    except Exception as exc:
        if "global thread pool" not in str(exc):
            raise
        options.use_per_session_threads = False
        ort.InferenceSession(path, options, providers=["CPUExecutionProvider"],
                             disabled_optimizers=list(DISABLED_OPTIMIZERS))
