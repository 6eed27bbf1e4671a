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


def canonicalize(model: onnx.ModelProto, source: str, threads: int | None = None) -> onnx.ModelProto:
    """``model`` in canonical form (module docstring); its input shapes must already be fixed, and its weights
    are dropped from it (the result holds them). The optimizer
    runs in a session on the process's global ONNX Runtime pool (``sbrs.ort_env``; ``threads`` sizes it if
    this is the process's first session, as the app's ``runtime.threads`` would)."""
    import onnxruntime as ort

    from sbrs.ort_env import session_options, use_global_thread_pool

    use_global_thread_pool(threads)
    options = session_options()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.add_session_config_entry("session.disable_prepacking", "1")  # the session only writes the file
    with tempfile.TemporaryDirectory(prefix="sbrs-canonical-") as folder:
        given, folded = os.path.join(folder, "given.onnx"), os.path.join(folder, "canonical.onnx")
        onnx.save_model(model, given)
        # The caller hands the model over (``import_model(copy=False)`` or a copy of its own): drop its weights
        # now, so that ONNX Runtime's copy and the folded model are not held beside them.
        del model.graph.initializer[:]
        options.optimized_model_filepath = folded
        try:
            ort.InferenceSession(given, options, providers=["CPUExecutionProvider"],
                                 disabled_optimizers=list(DISABLED_OPTIMIZERS))
        except Exception as exc:  # ONNX Runtime's own error types
            message = " ".join(str(exc).split())[:300]
            raise InputError(f"ONNX Runtime could not load the model to fold its constants: {message}",
                             file=source) from None
        canonical = onnx.load(folded)
    # Folded constants become initializers that are not graph inputs, which IR versions before 4 do not allow
    # (ONNX shape inference then ignores them): the IR version only says how the file is laid out.
    canonical.ir_version = max(canonical.ir_version, 4)
    return canonical
