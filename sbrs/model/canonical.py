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
from collections.abc import Mapping

import numpy as np
import onnx

from sbrs.errors import InputError
from sbrs.model.cnn import layer_type

#: ONNX Runtime optimizers of the basic level that are switched off (names as ONNX Runtime registers them).
DISABLED_OPTIMIZERS: tuple[str, ...] = (
    "ConvBNFusion", "ConvAddFusion", "ConvMulFusion", "ConvActivationFusion", "MatMulAddFusion",
    "MatMulScaleFusion", "GemmTransposeFusion", "GemmSumFusion", "GemmActivationFusion", "DivMulFusion",
    "FuseReluClip", "ReshapeFusion", "NotWhereFusion", "ConstantSharing", "CommonSubexpressionElimination",
    # QDQ models: moving, doubling or removing QuantizeLinear/DequantizeLinear nodes is ONNX Runtime's to do in
    # the sessions that run the model (it keeps DequantizeLinear of weights unfolded by itself)
    "QDQPropagationTransformer", "EnsureUniqueDQForNodeUnit", "DoubleQDQPairsRemover", "QDQFinalCleanupTransformer",
)


def needs_canonical(model: onnx.ModelProto) -> bool:
    """Whether ``model`` holds anything the canonical form removes (module docstring)."""
    parameters = {tensor.name for tensor in model.graph.initializer}
    for node in model.graph.node:
        if layer_type(node.domain, node.op_type) is None or node.op_type == "Constant":
            return True
        if node.op_type == "Identity" and node.input and node.input[0] in parameters:
            return True
        # a node of constants (quantize_dynamic reshapes its biases so): folded, unless it dequantizes a
        # weight, which ONNX Runtime's integer kernels read quantized (ONNX Runtime never folds those either)
        inputs = [name for name in node.input if name]
        if inputs and node.op_type != "DequantizeLinear" and all(name in parameters for name in inputs):
            return True
    return False


def canonicalize(model: onnx.ModelProto, arrays: Mapping[str, np.ndarray], source: str,
                 threads: int | None = None) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """``model`` in canonical form (module docstring), and the values of its placeholder initializers.

    ``arrays`` are the values of ``model``'s placeholders (``sbrs.model.onnx_file``); its input shapes must
    already be fixed. The model is handed over: it may be changed, and its inline weights dropped.

    Weights stay out of ONNX Runtime where they can: a first pass folds the *skeleton*, the model with every
    placeholder as a graph input of its type and shape, so that Identity removal and the folding of shape
    chains happen without ONNX Runtime reading (and copying) a byte of the weights. Only when that leaves a
    node computed from constants alone (a Cast or Transpose of a weight, say: folding it needs the values)
    does a second pass run on the whole model (``_fold``).
    """
    placeholders = {tensor.name: tensor for tensor in model.graph.initializer if tensor.name in arrays}
    if placeholders:
        folded, folded_arrays = _fold(_skeleton(model, placeholders), {}, source, threads)
        kept = {value.name for value in folded.graph.input} & placeholders.keys()
        if not _nodes_of_constants(folded, kept):
            remaining = [value for value in folded.graph.input if value.name not in placeholders]
            del folded.graph.input[:]
            folded.graph.input.extend(remaining)
            folded.graph.initializer.extend(placeholders[name] for name in sorted(kept))
            folded_arrays.update((name, arrays[name]) for name in kept)
            return folded, folded_arrays
    return _fold(model, arrays, source, threads)


def _skeleton(model: onnx.ModelProto, placeholders: Mapping[str, onnx.TensorProto]) -> onnx.ModelProto:
    """``model`` with its placeholder initializers as graph inputs (the nodes and the rest are copied)."""
    skeleton = onnx.ModelProto()
    skeleton.CopyFrom(model)
    kept = [tensor for tensor in skeleton.graph.initializer if tensor.name not in placeholders]
    del skeleton.graph.initializer[:]
    skeleton.graph.initializer.extend(kept)
    inputs = {value.name for value in skeleton.graph.input}
    skeleton.graph.input.extend(onnx.helper.make_tensor_value_info(name, tensor.data_type, list(tensor.dims))
                                for name, tensor in placeholders.items() if name not in inputs)
    return skeleton


def _nodes_of_constants(model: onnx.ModelProto, placeholders: set[str]) -> bool:
    """Whether a node other than ``Constant`` computes from constants only (initializers, ``placeholders``)."""
    constant = {tensor.name for tensor in model.graph.initializer} | placeholders
    for node in model.graph.node:  # ONNX keeps nodes in topological order
        inputs = [name for name in node.input if name]
        if node.op_type == "Constant":
            constant.update(node.output)
        elif inputs and all(name in constant for name in inputs):
            return True
    return False


def _fold(model: onnx.ModelProto, arrays: Mapping[str, np.ndarray], source: str,
          threads: int | None) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One pass of ONNX Runtime's basic optimizer (module docstring) over ``model``, weights and all.

    The placeholders' values go to ONNX Runtime as external initializers (views of ``arrays``, copied only
    where misaligned), the folded model's weights to a file of ONNX Runtime's own that is read back mapped.
    The optimizer runs in a session of ``threads`` intra-op threads of its own (``sbrs.ort_env``; default one).
    """
    import onnxruntime as ort

    from sbrs.model.onnx_file import MAPPED_MIN_BYTES, read_onnx
    from sbrs.ort_env import new_session, session_options

    options = session_options(threads or 1)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.add_session_config_entry("session.disable_prepacking", "1")  # the session only writes the file
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name", "canonical.bin")
    options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                     str(MAPPED_MIN_BYTES))
    placeholders = [tensor.name for tensor in model.graph.initializer if tensor.name in arrays]
    # ONNX Runtime keeps pointers into these values: they must live until the session is gone
    values = [ort.OrtValue.ortvalue_from_numpy(_aligned(arrays[name])) for name in placeholders]
    if placeholders:
        options.add_external_initializers(placeholders, values)
    with tempfile.TemporaryDirectory(prefix="sbrs-canonical-") as folder:
        given, folded = os.path.join(folder, "given.onnx"), os.path.join(folder, "canonical.onnx")
        onnx.save_model(model, given)
        del model.graph.initializer[:]  # the file holds them now: not in memory beside ONNX Runtime's copy
        options.optimized_model_filepath = folded
        try:
            session = new_session(given, options, ["CPUExecutionProvider"],
                                  disabled_optimizers=list(DISABLED_OPTIMIZERS))
        except Exception as exc:  # ONNX Runtime's own error types
            message = " ".join(str(exc).split())[:300]
            raise InputError(f"ONNX Runtime could not load the model to fold its constants: {message}",
                             file=source) from None
        del session, options, values
        canonical = read_onnx(folded)  # mapped while the file exists; the mapping outlives the folder
    # Folded constants become initializers that are not graph inputs, which IR versions before 4 do not allow
    # (ONNX shape inference then ignores them): the IR version only says how the file is laid out.
    canonical.model.ir_version = max(canonical.model.ir_version, 4)
    return canonical.model, canonical.arrays


def _aligned(array: np.ndarray) -> np.ndarray:
    """``array`` itself when ONNX Runtime can use its memory in place (aligned, contiguous), else a copy."""
    return array if array.flags.aligned and array.flags.c_contiguous else np.ascontiguousarray(array).copy()
