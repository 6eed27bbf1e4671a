"""The CNN model of thesis Section 2.1: layers (Table 2.1), edges (Section 2.1.2) and memory figures (Eq. 2.5-2.8).

A ``CnnModel`` is a plain value. Its layers keep every ONNX attribute and every operand position, so the
original graph can be rebuilt exactly (``sbrs.model.onnx_export.to_onnx``): this is what makes each
scenario's own ONNX model the ground truth for every later stage. Weight arrays live in a ``WeightStore``
keyed by content digest, so equal tensors are recognised by value, never by shape.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

INPUT_OP = "Input"
OUTPUT_OP = "Output"

#: Thesis Table 2.2: layer type of each supported operator (ONNX op_type).
LAYER_TYPES: Mapping[str, str] = {
    INPUT_OP: "data",
    OUTPUT_OP: "data",
    "Conv": "convolutional",
    "ConvTranspose": "convolutional",
    "MaxPool": "pooling",
    "AveragePool": "pooling",
    "GlobalAveragePool": "pooling",
    "GlobalMaxPool": "pooling",
    "Relu": "activation",
    "Clip": "activation",
    "LeakyRelu": "activation",
    "Sigmoid": "activation",
    "HardSigmoid": "activation",
    "HardSwish": "activation",
    "Tanh": "activation",
    "Gemm": "fc",
    "MatMul": "fc",
    "Softmax": "loss",
    "BatchNormalization": "normalization",
    "Add": "arithmetic",
    "Sub": "arithmetic",
    "Mul": "arithmetic",
    "Div": "arithmetic",
    "Concat": "transformation",
    "Flatten": "transformation",
    "Reshape": "transformation",
    "Resize": "transformation",
    "Upsample": "transformation",
    "Transpose": "transformation",
    "Pad": "transformation",
    "Slice": "transformation",
    "Identity": "transformation",
    "Dropout": "transformation",
    # Beyond the thesis' Table 2.2, for the CNNs PyTorch, TensorFlow and Paddle exports carry. A reduction over
    # axes is a pooling; element-wise maths an activation (one input) or arithmetic (several); ops that only
    # move, select or convert data are transformations; comparisons and selections form a new type, logical.
    "ReduceMean": "pooling",
    "ReduceMax": "pooling",
    "ReduceSum": "pooling",
    "ReduceMin": "pooling",
    "Sum": "arithmetic",
    "Mean": "arithmetic",
    "Max": "arithmetic",
    "Min": "arithmetic",
    "Pow": "arithmetic",
    "PRelu": "activation",
    "Elu": "activation",
    "Selu": "activation",
    "Celu": "activation",
    "Erf": "activation",
    "Gelu": "activation",
    "Softplus": "activation",
    "Softsign": "activation",
    "Mish": "activation",
    "Sqrt": "activation",
    "Reciprocal": "activation",
    "Neg": "activation",
    "Abs": "activation",
    "Exp": "activation",
    "Log": "activation",
    "LRN": "normalization",
    "InstanceNormalization": "normalization",
    "LayerNormalization": "normalization",
    "Split": "transformation",
    "Squeeze": "transformation",
    "Unsqueeze": "transformation",
    "Expand": "transformation",
    "Gather": "transformation",
    "DepthToSpace": "transformation",
    "SpaceToDepth": "transformation",
    "Cast": "transformation",
    "Where": "logical",
    "Equal": "logical",
    # Quantized models (docs/QUANTIZED.md). Conversions between precisions form a new type, quantization;
    # the integer forms of convolution and matrix product keep the type of their float op.
    "QuantizeLinear": "quantization",
    "DequantizeLinear": "quantization",
    "DynamicQuantizeLinear": "quantization",
    "QLinearConv": "convolutional",
    "ConvInteger": "convolutional",
    "QLinearMatMul": "fc",
    "MatMulInteger": "fc",
}

SUPPORTED_OPS: frozenset[str] = frozenset(op for op in LAYER_TYPES if op not in (INPUT_OP, OUTPUT_OP))

CONTRIB_DOMAIN = "com.microsoft"
#: Ops of ONNX Runtime's own domain that its quantizer writes in the QOperator form, by layer type (Table 2.2).
CONTRIB_LAYER_TYPES: Mapping[str, str] = {
    "QLinearAdd": "arithmetic",
    "QLinearMul": "arithmetic",
    "QLinearGlobalAveragePool": "pooling",
    "QLinearAveragePool": "pooling",
    "QLinearConcat": "transformation",
    "QLinearSigmoid": "activation",
    "QLinearLeakyRelu": "activation",
    "QLinearSoftmax": "loss",
    "QGemm": "fc",
    # QDQ nodes in ONNX Runtime's domain, as its quantizer writes them with ``UseQDQContribOps`` (and for 16-bit
    # types before opset 21): the standard ops' semantics
    "QuantizeLinear": "quantization",
    "DequantizeLinear": "quantization",
}


def layer_type(domain: str, op: str) -> str | None:
    """Table 2.2 type of ``op`` in ``domain`` ("" and "ai.onnx" are standard ONNX); None when unsupported."""
    if domain in ("", "ai.onnx"):
        return LAYER_TYPES.get(op) if op in SUPPORTED_OPS else None
    if domain == CONTRIB_DOMAIN:
        return CONTRIB_LAYER_TYPES.get(op)
    return None


@dataclass(frozen=True)
class TensorSpec:
    """Shape and element type of one data tensor (``e.data``)."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.elements * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class ParamRef:
    """One parameter tensor of a layer (part of ``par_i``): a reference into the model's ``WeightStore``."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    digest: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def tensor_digest(array: np.ndarray) -> str:
    """Content identity of a tensor: dtype, shape and bytes (so equal values hash equal, whatever the name)."""
    contiguous = np.ascontiguousarray(array)
    digest = hashlib.sha256()
    # the array's own shape: np.ascontiguousarray makes a scalar one-dimensional, and a scalar is not a [1]
    digest.update(f"{contiguous.dtype.str}{np.shape(array)}".encode())
    digest.update(contiguous.reshape(-1).view(np.uint8).data)  # the bytes in place: no copy of a large weight
    return digest.hexdigest()[:32]


@dataclass(frozen=True)
class QdqNode:
    """A QuantizeLinear or DequantizeLinear node of a QDQ node unit (:class:`Qdq`): it reads ``count``
    consecutive operands of the layer (value, scale and, if present, zero point) and has these attributes."""

    count: int
    attributes: dict[str, Any] = field(default_factory=dict)
    domain: str = ""


@dataclass(frozen=True)
class Qdq:
    """The QDQ node unit of a quantized layer (docs/QUANTIZED.md): DequantizeLinear nodes on some operands of
    the layer's op and a QuantizeLinear on its output, as ``onnxruntime.quantization`` writes them and as ONNX
    Runtime fuses them into one integer kernel (QLinearConv ...).

    ``dequantize`` has one entry per ONNX input of the op: None for an operand the op reads as it is (one
    operand of the layer), else the DequantizeLinear that makes it from the next ``count`` operands of the
    layer. ``quantize``, when set, quantizes the op's output with the layer's last ``count`` operands. The
    layer's ``operands`` are thus the unit's inputs from outside (the quantized tensors, integer weights,
    scales and zero points), its ``outputs`` the quantized result: the float tensors between the nodes exist
    only inside the unit, as they do inside ONNX Runtime's fused kernel.
    """

    dequantize: tuple[QdqNode | None, ...]
    quantize: QdqNode | None = None


@dataclass(frozen=True)
class Layer:
    """A layer l_i with the attributes of thesis Table 2.1.

    ``operands`` keeps the ONNX node's inputs in position ("" for an absent optional input); the data inputs
    are the operands that are not parameters, and they name the input edges I_i. ``attributes`` are the ONNX
    attributes as JSON values. ``kernel``, ``stride``, ``pads``, ``dilation`` and ``groups`` are derived for
    every op as Table 2.1 defines them (defaults 1, 1, zeros, 1, 1); ``pads`` is (top, left, bottom, right),
    the ONNX order, whereas the thesis writes [left, top, right, bottom] (Eq. 2.3-2.4).

    ``fused``: activation layers folded into this one (``sbrs.model.fold``): the layer computes its own op,
    then each of them in order, and produces the last one's ``outputs``; its ``params`` include theirs. The
    first one reads the internal tensor named by its first operand. Empty for every imported layer.

    ``qdq``: the QuantizeLinear/DequantizeLinear nodes around the op when the layer is a QDQ node unit
    (:class:`Qdq`); ``operands`` then lists the unit's inputs, not the op's.
    """

    name: str
    op: str
    type: str
    operands: tuple[str, ...]
    outputs: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    output_shapes: tuple[tuple[int, ...], ...]
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    attributes: dict[str, Any] = field(default_factory=dict)
    params: tuple[ParamRef, ...] = ()
    domain: str = ""
    fused: tuple[Layer, ...] = ()
    qdq: Qdq | None = None

    @property
    def inputs(self) -> tuple[str, ...]:
        """Names of the data tensors this layer reads (I_i), in operand order, without parameters."""
        param_names = {p.name for p in self.params}
        return tuple(name for name in self.operands if name and name not in param_names)

    @property
    def param_digests(self) -> tuple[str, ...]:
        return tuple(p.digest for p in self.params)

    @property
    def params_bytes(self) -> int:
        return sum(p.nbytes for p in self.params)


@dataclass(frozen=True)
class Edge:
    """Edge e_ij = (l_i, l_j, data) of thesis Section 2.1.2: one producer, one consumer, one tensor."""

    src: str
    dst: str
    tensor: str
    spec: TensorSpec

    @property
    def name(self) -> str:
        return f"{self.src}->{self.dst}:{self.tensor}"


def layer_edges(layers: Iterable[Layer], tensors: Mapping[str, TensorSpec]) -> list[Edge]:
    """The edges of ``layers`` (topological order): one per producer, consumer and tensor, in reading order."""
    producer: dict[str, str] = {}
    edges: list[Edge] = []
    seen: set[tuple[str, str, str]] = set()
    for layer in layers:
        for tensor in layer.inputs:
            key = (producer[tensor], layer.name, tensor)
            if key not in seen:
                seen.add(key)
                edges.append(Edge(key[0], key[1], tensor, tensors[tensor]))
        producer.update((t, layer.name) for t in layer.outputs if t)
    return edges


class WeightStore(Mapping[str, np.ndarray]):
    """Parameter arrays by content digest; read-only once built. Equal tensors are stored once."""

    def __init__(self, arrays: Iterable[tuple[str, np.ndarray]] = ()) -> None:
        self._arrays: dict[str, np.ndarray] = {}
        for digest, array in arrays:
            self.add(array, digest)

    def add(self, array: np.ndarray, digest: str | None = None) -> str:
        digest = digest or tensor_digest(array)
        if digest not in self._arrays:
            # a scalar stays a scalar (np.ascontiguousarray would make it a [1]: ONNX Runtime's quantized ops
            # refuse a [1] scale or zero point)
            frozen = np.ascontiguousarray(array).reshape(np.shape(array))
            frozen.flags.writeable = False
            self._arrays[digest] = frozen
        return digest

    def __getitem__(self, digest: str) -> np.ndarray:
        return self._arrays[digest]

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def merged(self, other: WeightStore) -> WeightStore:
        return WeightStore([*self._arrays.items(), *other.items()])


@dataclass(frozen=True)
class CnnModel:
    """CNN(L, E): layers in topological order (data layers ``Input``/``Output`` included) and edges."""

    name: str
    source: str
    opset: int
    layers: tuple[Layer, ...]
    edges: tuple[Edge, ...]
    tensors: dict[str, TensorSpec]
    graph_inputs: tuple[str, ...]
    graph_outputs: tuple[str, ...]
    opset_imports: dict[str, int] = field(default_factory=dict)
    weights: WeightStore = field(default_factory=WeightStore, repr=False, compare=False)

    def layer(self, name: str) -> Layer:
        return self._layers_by_name[name]

    @functools.cached_property
    def _layers_by_name(self) -> dict[str, Layer]:
        """The layers by name, made on first use (a frozen model's layers never change; a search by name over
        the layers cost a compile of cifar10's units 0.7 s of 7)."""
        return {layer.name: layer for layer in self.layers}

    @property
    def compute_layers(self) -> tuple[Layer, ...]:
        return tuple(layer for layer in self.layers if layer.type != "data")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (weights are referenced by digest, not included)."""
        return {
            "name": self.name,
            "source": self.source,
            "opset": self.opset,
            "graph_inputs": list(self.graph_inputs),
            "graph_outputs": list(self.graph_outputs),
            "layers": [asdict(layer) for layer in self.layers],
            "edges": [asdict(edge) | {"name": edge.name} for edge in self.edges],
            "tensors": {name: asdict(spec) for name, spec in self.tensors.items()},
            "memory": asdict(memory_figures(self)),
        }


@dataclass(frozen=True)
class MemoryFigures:
    """Thesis Eq. 2.5-2.7 for one CNN with naive buffers: m = m_par + m_buf."""

    params_bytes: int
    naive_buffer_bytes: int
    tensor_bytes: int
    parameters: int

    @property
    def total_bytes(self) -> int:
        return self.params_bytes + self.naive_buffer_bytes


def layer_work(layer: Layer) -> int:
    """Multiply-accumulates of one frame of ``layer`` (element count for element-wise and data-moving layers)."""
    if layer.type == "data" or not layer.output_shapes:
        return 0
    out = int(np.prod(layer.output_shapes[0], dtype=np.int64))
    if layer.op in ("Conv", "ConvTranspose", "QLinearConv", "ConvInteger") and layer.input_shapes:
        cin = int(layer.input_shapes[0][1]) if len(layer.input_shapes[0]) > 1 else 1
        return out * max(cin // max(layer.groups, 1), 1) * layer.kernel[0] * layer.kernel[1]
    if layer.op in ("MaxPool", "AveragePool"):
        return out * layer.kernel[0] * layer.kernel[1]
    if layer.op in ("Gemm", "MatMul", "QLinearMatMul", "MatMulInteger", "QGemm") and layer.input_shapes:
        return out * int(layer.input_shapes[0][-1])
    if layer.op in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceMax", "ReduceSum", "ReduceMin",
                    "QLinearGlobalAveragePool") \
            and layer.input_shapes:
        return int(np.prod(layer.input_shapes[0], dtype=np.int64))
    return out


def unique_params(models: Iterable[CnnModel]) -> dict[str, ParamRef]:
    """Parameter tensors of all models by content digest (a tensor shared by models or layers counts once)."""
    seen: dict[str, ParamRef] = {}
    for model in models:
        for layer in model.layers:
            for param in layer.params:
                seen.setdefault(param.digest, param)
    return seen


def params_bytes(models: Iterable[CnnModel]) -> int:
    """m_par of Eq. 2.6 over unique parameter tensors (identity by content)."""
    return sum(p.nbytes for p in unique_params(models).values())


def naive_buffer_bytes(model: CnnModel) -> int:
    """M_naive of the thesis (Eq. 2.7 with one buffer per edge): the sum of every edge's tensor bytes."""
    return sum(edge.spec.nbytes for edge in model.edges)


#: Integer element types of quantized weights, biases and zero points (int64 parameters are shapes, axes and
#: indices, which nobody learned).
QUANTIZED_DTYPES = frozenset({"int8", "uint8", "int16", "uint16", "int32"})


def is_learned_dtype(dtype: str) -> bool:
    """Whether a parameter of this element type counts as a learned parameter (Table 2.1's Θ): floats, and the
    integers of quantized weights, biases, scales' zero points."""
    return np.issubdtype(np.dtype(dtype), np.floating) or dtype in QUANTIZED_DTYPES


def memory_figures(model: CnnModel) -> MemoryFigures:
    unique = unique_params([model])
    learned = [p for p in unique.values() if is_learned_dtype(p.dtype)]
    return MemoryFigures(
        params_bytes=sum(p.nbytes for p in unique.values()),
        naive_buffer_bytes=naive_buffer_bytes(model),
        tensor_bytes=sum(spec.nbytes for spec in model.tensors.values()),
        parameters=sum(int(np.prod(p.shape, dtype=np.int64)) for p in learned),
    )
