"""Fold BatchNormalization and a following activation into the preceding convolution (thesis Table 2.1).

ONNX Runtime does this itself when it creates a session (``ConvBNFusion``, then ``ConvActivationFusion``
into ``FusedConv``), so the CNN it runs has one layer and one tensor per conv→BN→activation. The thesis'
CNN model (Table 2.1) counts such a group as one layer too. :func:`fold_model` gives the ``CnnModel`` the
same shape, so that processing by parts plans (and runs) the tensors ONNX Runtime really has:

- ``Conv → BatchNormalization`` (inference mode, every BN operand a parameter, the conv's output read by the
  BN alone and not a graph output) becomes one ``Conv`` with ``W' = W · s`` and ``b' = (b - mean) · s + β``
  where ``s = γ / sqrt(var + ε)``, computed in float64 and rounded once to the weights' dtype;
- a following activation that ONNX Runtime's ``FusedConv`` supports (:data:`FUSABLE_ACTIVATIONS`; ``Clip``
  only with constant bounds), read alone and not a graph output, joins that layer as ``Layer.fused``: the
  layer keeps the convolution's op and attributes, produces the activation's output tensor, and exports as
  the two ONNX nodes ``Conv → activation`` with an internal tensor between them (ONNX Runtime fuses them
  again). A convolution without a BN before its activation is fused the same way.

Determinism and sharing: a folded tensor depends only on the values of the conv and BN parameters and is
named by its content digest (``fold.<digest>``), so two scenarios whose conv+BN weights are equal get equal
folded weights, one parameter to Algorithm 5 and to ``params_bytes`` (weights stay equal by value).
Folding is idempotent; a model with nothing to fold is returned unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

import numpy as np

from sbrs.model.cnn import CnnModel, Layer, ParamRef, WeightStore, layer_edges, tensor_digest

__all__ = ["FUSABLE_ACTIVATIONS", "FoldMemo", "fold_bands", "fold_cuts", "fold_model", "fold_tiles"]

#: Activations ONNX Runtime's ``FusedConv`` applies inside the convolution (``ConvActivationFusion``).
FUSABLE_ACTIVATIONS: frozenset[str] = frozenset({"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid"})


def _params_of(layer: Layer) -> dict[str, ParamRef]:
    return {p.name: p for p in layer.params}


def _readers(layers: tuple[Layer, ...] | list[Layer]) -> dict[str, list[Layer]]:
    readers: dict[str, list[Layer]] = {}
    for layer in layers:
        for t in dict.fromkeys(layer.inputs):
            readers.setdefault(t, []).append(layer)
    return readers


def _foldable_bn(layer: Layer, reader: Layer) -> bool:
    if reader.op != "BatchNormalization" or reader.domain or reader.fused or reader.qdq is not None:
        return False
    if int(reader.attributes.get("training_mode", 0)) or len(reader.outputs) != 1:
        return False
    params = _params_of(reader)
    operands = reader.operands
    return (len(operands) == 5 and operands[0] == layer.outputs[0]
            and all(o in params for o in operands[1:]))


def _fusable_activation(model: CnnModel, reader: Layer) -> bool:
    if reader.op not in FUSABLE_ACTIVATIONS or reader.domain or reader.fused or reader.qdq is not None \
            or len(reader.outputs) != 1:
        return False
    if reader.op == "Clip":  # bounds must be constants (parameters) or absent
        params = _params_of(reader)
        return all(not o or o in params for o in reader.operands[1:])
    return len(reader.inputs) == 1


def _conv_ok(layer: Layer) -> bool:
    # a quantized convolution (a QDQ node unit) is ONNX Runtime's integer kernel already: nothing to fold
    if layer.op != "Conv" or layer.domain or layer.fused or layer.qdq is not None or len(layer.outputs) != 1:
        return False
    params = _params_of(layer)
    return len(layer.operands) >= 2 and layer.operands[1] in params and (
        len(layer.operands) < 3 or not layer.operands[2] or layer.operands[2] in params) and (
        # float16 weights are left to ONNX Runtime's own fusion, whose rounding a float64 fold does not repeat
        # (MobileNetV2 fp16 by parts: 2e-3 off plain ONNX Runtime with them folded here)
        params[layer.operands[1]].dtype == "float32")


#: A fold already computed: its inputs' digests and epsilon → the folded weight and bias with their references.
FoldMemo = dict[tuple[object, ...], tuple[tuple[ParamRef, np.ndarray], tuple[ParamRef, np.ndarray]]]


def _fold_weights(model: CnnModel, conv: Layer, bn: Layer, store: WeightStore,
                  memo: FoldMemo | None = None) -> tuple[ParamRef, ParamRef]:
    params = _params_of(conv)
    bn_params = _params_of(bn)
    w_ref = params[conv.operands[1]]
    eps = float(bn.attributes.get("epsilon", 1e-5))
    has_bias = len(conv.operands) >= 3 and bool(conv.operands[2])
    key = (w_ref.digest, params[conv.operands[2]].digest if has_bias else None,
           *(bn_params[o].digest for o in bn.operands[1:]), eps)
    if memo is not None and key in memo:  # the same weights folded for another scenario: equal by value
        for ref, array in memo[key]:
            store.add(array, ref.digest)
        return memo[key][0][0], memo[key][1][0]
    w = np.asarray(model.weights[w_ref.digest])
    dtype = w.dtype
    gamma, beta, mean, var = (np.asarray(model.weights[bn_params[o].digest], dtype=np.float64)
                              for o in bn.operands[1:])
    scale = gamma / np.sqrt(var + eps)
    bias = np.zeros_like(scale)
    if has_bias:
        bias = np.asarray(model.weights[params[conv.operands[2]].digest], dtype=np.float64)
    w_new = (w.astype(np.float64) * scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(dtype)
    b_new = ((bias - mean) * scale + beta).astype(dtype)
    folded = []
    for array in (w_new, b_new):
        digest = tensor_digest(array)
        store.add(array, digest)
        folded.append((ParamRef(f"fold.{digest}", tuple(int(d) for d in array.shape), str(array.dtype), digest),
                       store[digest]))
    if memo is not None:
        memo[key] = (folded[0], folded[1])
    return folded[0][0], folded[1][0]


def fold_model(model: CnnModel, *, memo: FoldMemo | None = None) -> CnnModel:
    """``model`` with conv→BN(→activation) folded into one layer each (module docstring); idempotent.

    ``memo`` (a dictionary the caller keeps while it folds several models) holds the folds already computed,
    by the digests of their inputs: scenarios that share weights fold them once (a family of 60 ResNet-18
    variants: the cost of one model's weights instead of 60)."""
    layers = list(model.layers)
    readers = _readers(layers)
    outputs = set(model.graph_outputs)
    store = WeightStore(model.weights.items())
    removed: set[str] = set()
    dropped_tensors: set[str] = set()
    result: dict[str, Layer] = {}
    for layer in layers:
        if layer.name in removed or not _conv_ok(layer):
            continue
        current = layer
        out = layer.outputs[0]
        after = readers.get(out, [])
        if out not in outputs and len(after) == 1 and _foldable_bn(layer, after[0]):
            bn = after[0]
            w_ref, b_ref = _fold_weights(model, layer, bn, store, memo)
            operands = (layer.operands[0], w_ref.name, b_ref.name)
            current = replace(layer, operands=operands, outputs=bn.outputs, output_shapes=bn.output_shapes,
                              params=(w_ref, b_ref))
            removed.add(bn.name)
            dropped_tensors.add(out)
            out = bn.outputs[0]
            after = readers.get(out, [])
        if out not in outputs and len(after) == 1 and _fusable_activation(model, after[0]):
            act = after[0]
            params = dict.fromkeys((*current.params, *act.params))
            current = replace(current, outputs=act.outputs, output_shapes=act.output_shapes,
                              params=tuple(params), fused=(act,))
            removed.add(act.name)
            dropped_tensors.add(out)
        if current is not layer:
            result[layer.name] = current
    if not result:
        return model
    new_layers = tuple(result.get(layer.name, layer) for layer in layers if layer.name not in removed)
    edges = layer_edges(new_layers, model.tensors)
    used = {p.digest for layer in new_layers for p in layer.params}
    for layer in new_layers:
        for follower in layer.fused:
            used.update(p.digest for p in follower.params)
    weights = WeightStore((d, store[d]) for d in store if d in used)
    tensors = {t: spec for t, spec in model.tensors.items() if t not in dropped_tensors}
    return replace(model, layers=new_layers, edges=tuple(edges), tensors=tensors, weights=weights)


def fold_bands(model: CnnModel, folded: CnnModel, bands: Mapping[str, int]) -> dict[str, int]:
    """``bands`` (band heights by layer name of ``model``) for ``folded = fold_model(model)``.

    Layers folded into a convolution take its band, so their entries are dropped; every other name is kept
    as given (an unknown one stays unknown, for the caller to reject).
    """
    kept = {layer.name for layer in folded.layers}
    original = {layer.name for layer in model.layers}
    return {name: band for name, band in bands.items() if name in kept or name not in original}


def fold_cuts(model: CnnModel, folded: CnnModel, cuts: Iterable[str]) -> tuple[str, ...]:
    """Cut tensors of ``model`` for ``folded``: tensors folded away (a conv or BN output inside a folded layer)
    are dropped; every other name is kept as given (an unknown one stays unknown, for the caller to reject)."""
    return tuple(t for t in dict.fromkeys(cuts) if t in folded.tensors or t not in model.tensors)


def fold_tiles(model: CnnModel, folded: CnnModel,
               tiles: Iterable[tuple[Iterable[str], int]]) -> tuple[tuple[tuple[str, ...], int], ...]:
    """Tile groups of ``model`` for ``folded``: layers folded into a convolution leave their group."""
    kept = {layer.name for layer in folded.layers}
    original = {layer.name for layer in model.layers}
    return tuple((tuple(n for n in layers if n in kept or n not in original), int(band)) for layers, band in tiles)
