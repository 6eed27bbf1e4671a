"""A small graph builder on top of ``onnx.helper`` with deterministic, name-keyed weights.

Every graph is NCHW float32 at opset 17 (IR version 8). The builder tracks the static shape of every tensor it
creates, so architectures can ask for channel counts and the DSL can reject shapes that do not work before
any ONNX is emitted.

Weights: each parameter tensor is drawn from a numpy ``Generator`` seeded by ``sha256(f"{seed}:{name}")``,
where ``name`` is the initializer's name (for example ``layer1.0.conv1.weight``). Two models built with the
same seed that both contain a parameter of the same name (and shape) therefore hold bit-identical values for
it, which is how scenario families share layers.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from sbrs.errors import InputError

OPSET = 17
IR_VERSION = 8
PRODUCER = "sbrs.zoo"
#: The most float32 parameter values one built model holds (1 GiB; ResNet-50 has 25.6 M, VGG-19 143 M): an
#: option such as ``classes: 100000000`` is refused before its weights are drawn, not a MemoryError after.
MAX_PARAMETER_VALUES = 1 << 28

Shape = tuple[int, ...]
IntPair = int | Sequence[int]


def rng_for(seed: int, name: str) -> np.random.Generator:
    """The random generator of the parameter ``name`` under the global ``seed``."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def pair(value: IntPair, what: str) -> tuple[int, int]:
    """``value`` as an (h, w) pair: an int stands for both."""
    if isinstance(value, int):
        return value, value
    items = tuple(value)
    if len(items) != 2:
        raise InputError(f"{what} must be an int or a pair [h, w], got {list(items)}")
    return int(items[0]), int(items[1])


def pads4(value: IntPair, what: str = "pad") -> tuple[int, int, int, int]:
    """Padding as ONNX order (top, left, bottom, right) from an int, an (h, w) pair or a 4-tuple."""
    if isinstance(value, int):
        return value, value, value, value
    items = tuple(int(v) for v in value)
    if len(items) == 2:
        return items[0], items[1], items[0], items[1]
    if len(items) == 4:
        return items[0], items[1], items[2], items[3]
    raise InputError(f"{what} must be an int, [h, w] or [top, left, bottom, right], got {list(items)}")


def window_out(
    size: int,
    kernel: int,
    stride: int,
    pad_begin: int,
    pad_end: int,
    *,
    dilation: int = 1,
    ceil_mode: bool = False,
) -> int:
    """Output length of a sliding window (conv or pool) along one axis, as ONNX and PyTorch compute it."""
    span = size + pad_begin + pad_end - dilation * (kernel - 1) - 1
    if span < 0:
        return 0
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + pad_begin:  # the last window must start inside the input or left padding
        out -= 1
    return out


class GraphBuilder:
    """Builds one ONNX graph node by node; every method returns the name of the tensor it produced."""

    def __init__(
        self,
        input_shape: Sequence[int],
        *,
        seed: int = 0,
        input_name: str = "input",
        graph_name: str = "model",
    ) -> None:
        """Start a graph with one float32 input of the given static shape (NCHW or [N, F])."""
        shape = tuple(int(d) for d in input_shape)
        if not shape or any(d <= 0 for d in shape):
            raise InputError(f"input shape must be a list of positive ints, got {list(shape)}")
        self.seed = seed
        self.graph_name = graph_name
        self.input = input_name
        self._shapes: dict[str, Shape] = {input_name: shape}
        self._nodes: list[onnx.NodeProto] = []
        self._inits: dict[str, onnx.TensorProto] = {}
        self._node_names: set[str] = set()
        self._counter: dict[str, int] = {}
        self._parameter_values = 0

    # ----------------------------------------------------------------- bookkeeping

    def shape(self, tensor: str) -> Shape:
        """Static shape of a tensor of this graph."""
        return self._shapes[tensor]

    def channels(self, tensor: str) -> int:
        """Channel count (dimension 1) of a tensor."""
        return self._shapes[tensor][1]

    def _unique(self, name: str | None, op: str) -> str:
        """A fresh node name: ``name`` itself (it must be new), or ``op_k`` for the next free k."""
        if name is not None:
            if not name:
                raise InputError("layer names must not be empty")
            if name in self._node_names or name in self._shapes or name in self._inits:
                raise InputError(f"layer name {name!r} is used twice")
            self._node_names.add(name)
            return name
        while True:
            k = self._counter.get(op, 0)
            self._counter[op] = k + 1
            candidate = f"{op.lower()}_{k}"
            if (
                candidate not in self._node_names
                and candidate not in self._shapes
                and candidate not in self._inits
            ):
                self._node_names.add(candidate)
                return candidate

    def _node(
        self, op: str, inputs: Sequence[str], shape: Shape, *, name: str | None = None, **attrs: object
    ) -> str:
        """Append a node with one output (named like the node) of the given shape."""
        node_name = self._unique(name, op)
        self._nodes.append(helper.make_node(op, list(inputs), [node_name], name=node_name, **attrs))
        self._shapes[node_name] = shape
        return node_name

    def _init(self, name: str, array: np.ndarray) -> str:
        """Register an initializer (names are unique within the graph)."""
        if name in self._inits or name in self._shapes or name in self._node_names:
            raise InputError(f"parameter name {name!r} is used twice")
        self._inits[name] = numpy_helper.from_array(array, name)
        return name

    def constant(self, name: str, array: np.ndarray) -> str:
        """A constant initializer (shapes, scales, clip bounds); reused when asked again with equal value."""
        existing = self._inits.get(name)
        if existing is not None:
            if not np.array_equal(numpy_helper.to_array(existing), array):
                raise InputError(f"constant {name!r} is defined twice with different values")
            return name
        return self._init(name, array)

    # ----------------------------------------------------------------- parameters

    def _count_parameter(self, name: str, shape: Shape) -> None:
        """Refuse ``name`` in one line when it would take the model past ``MAX_PARAMETER_VALUES``."""
        self._parameter_values += math.prod(shape)
        if self._parameter_values > MAX_PARAMETER_VALUES:
            raise InputError(f"parameter {name!r} of shape {list(shape)} takes the model's weights past "
                             f"{MAX_PARAMETER_VALUES:,} values ({MAX_PARAMETER_VALUES * 4 / 2**30:g} GiB of float32), "
                             "the most sbrs builds: an option or layer is too large")

    def param_normal(self, name: str, shape: Shape, std: float, mean: float = 0.0) -> str:
        """A float32 parameter drawn from N(mean, std²) with the name-keyed generator."""
        self._count_parameter(name, shape)
        values = rng_for(self.seed, name).standard_normal(size=shape, dtype=np.float32)
        return self._init(name, (values * np.float32(std) + np.float32(mean)).astype(np.float32))

    def param_uniform(self, name: str, shape: Shape, low: float, high: float) -> str:
        """A float32 parameter drawn from U(low, high) with the name-keyed generator."""
        self._count_parameter(name, shape)
        values = rng_for(self.seed, name).uniform(low, high, size=shape).astype(np.float32)
        return self._init(name, values)

    # ----------------------------------------------------------------- layers with parameters

    def conv(
        self,
        x: str,
        out: int,
        kernel: IntPair,
        *,
        name: str,
        stride: IntPair = 1,
        pad: IntPair | None = None,
        groups: int = 1,
        dilation: int = 1,
        bias: bool = True,
        gain: float = 2.0,
        bias_mean: float = 0.0,
    ) -> str:
        """2-D convolution; ``pad=None`` means (k-1)//2 on each side. Parameters ``{name}.weight/.bias`` (the
        bias drawn around ``bias_mean``)."""
        n, c, h, w = self._rank4(x, "conv")
        kh, kw = pair(kernel, "kernel")
        sh, sw = pair(stride, "stride")
        if pad is None:
            pad = (dilation * (kh - 1) // 2, dilation * (kw - 1) // 2)
        pt, pl, pb, pr = pads4(pad)
        if min(out, kh, kw, sh, sw, groups, dilation) <= 0 or min(pt, pl, pb, pr) < 0:
            raise InputError(f"conv {name}: sizes must be positive and pads non-negative")
        if c % groups or out % groups:
            raise InputError(f"conv {name}: groups={groups} must divide input channels {c} and output {out}")
        oh = window_out(h, kh, sh, pt, pb, dilation=dilation)
        ow = window_out(w, kw, sw, pl, pr, dilation=dilation)
        if oh <= 0 or ow <= 0:
            raise InputError(f"conv {name}: kernel {kh}x{kw} does not fit the padded input {h}x{w}")
        fan_in = c // groups * kh * kw
        inputs = [
            x,
            self.param_normal(f"{name}.weight", (out, c // groups, kh, kw), math.sqrt(gain / fan_in)),
        ]
        if bias:
            inputs.append(self.param_normal(f"{name}.bias", (out,), 0.02, mean=bias_mean))
        return self._node(
            "Conv",
            inputs,
            (n, out, oh, ow),
            name=name,
            kernel_shape=[kh, kw],
            strides=[sh, sw],
            pads=[pt, pl, pb, pr],
            group=groups,
            dilations=[dilation, dilation],
        )

    def batchnorm(self, x: str, *, name: str, eps: float = 1e-5, gamma: float = 1.0) -> str:
        """Inference BatchNormalization; parameters ``{name}.weight/.bias/.running_mean/.running_var``.

        ``gamma`` scales the drawn scale parameters (around ``gamma``, ±20 %); a smaller value on the last
        normalisation of a residual branch keeps very deep residual stacks in a moderate range.
        """
        c = self._shapes[x][1]
        scale = self.param_uniform(f"{name}.weight", (c,), 0.8 * gamma, 1.2 * gamma)
        bias = self.param_normal(f"{name}.bias", (c,), 0.05)
        mean = self.param_normal(f"{name}.running_mean", (c,), 0.05)
        var = self.param_uniform(f"{name}.running_var", (c,), 0.8, 1.2)
        return self._node(
            "BatchNormalization", [x, scale, bias, mean, var], self._shapes[x], name=name, epsilon=eps
        )

    def gemm(self, x: str, out: int, *, name: str, bias: bool = True, gain: float = 1.0) -> str:
        """Fully connected layer ``x @ W.T + b`` on an [N, F] tensor; W is [out, F] (torch layout)."""
        shape = self._shapes[x]
        if len(shape) != 2:
            raise InputError(f"fc {name}: needs a 2-D input [N, F], got {list(shape)}")
        if out <= 0:
            raise InputError(f"fc {name}: output size must be positive, got {out}")
        inputs = [x, self.param_normal(f"{name}.weight", (out, shape[1]), math.sqrt(gain / shape[1]))]
        if bias:
            inputs.append(self.param_normal(f"{name}.bias", (out,), 0.02))
        return self._node("Gemm", inputs, (shape[0], out), name=name, transB=1)

    # ----------------------------------------------------------------- activations and elementwise

    def relu(self, x: str, *, name: str | None = None) -> str:
        """ReLU."""
        return self._node("Relu", [x], self._shapes[x], name=name)

    def relu6(self, x: str, *, name: str | None = None) -> str:
        """ReLU6 as ``Clip(x, 0, 6)`` with scalar bound initializers (opset ≥ 11 form)."""
        lo = self.constant("const.clip_min_0", np.array(0.0, dtype=np.float32))
        hi = self.constant("const.clip_max_6", np.array(6.0, dtype=np.float32))
        return self._node("Clip", [x, lo, hi], self._shapes[x], name=name)

    def leaky_relu(self, x: str, *, alpha: float = 0.01, name: str | None = None) -> str:
        """LeakyRelu with slope ``alpha``."""
        return self._node("LeakyRelu", [x], self._shapes[x], name=name, alpha=alpha)

    def sigmoid(self, x: str, *, name: str | None = None) -> str:
        """Sigmoid."""
        return self._node("Sigmoid", [x], self._shapes[x], name=name)

    def tanh(self, x: str, *, name: str | None = None) -> str:
        """Tanh."""
        return self._node("Tanh", [x], self._shapes[x], name=name)

    def hardsigmoid(self, x: str, *, name: str | None = None) -> str:
        """HardSigmoid as PyTorch defines it: ``clip(x/6 + 1/2, 0, 1)``."""
        return self._node("HardSigmoid", [x], self._shapes[x], name=name, alpha=1.0 / 6.0, beta=0.5)

    def hardswish(self, x: str, *, name: str | None = None) -> str:
        """HardSwish (opset 14)."""
        return self._node("HardSwish", [x], self._shapes[x], name=name)

    def silu(self, x: str, *, name: str | None = None) -> str:
        """SiLU / swish as ``Mul(x, Sigmoid(x))``, the way exporters emit it."""
        s = self.sigmoid(x, name=None if name is None else f"{name}.sigmoid")
        return self.mul(x, s, name=name)

    def activation(self, x: str, kind: str | None, *, name: str | None = None) -> str:
        """Apply an activation by name (``none``/None returns ``x``)."""
        if kind is None or kind == "none":
            return x
        table = {
            "relu": self.relu,
            "relu6": self.relu6,
            "sigmoid": self.sigmoid,
            "tanh": self.tanh,
            "hardswish": self.hardswish,
            "hardsigmoid": self.hardsigmoid,
            "silu": self.silu,
            "leakyrelu": self.leaky_relu,
        }
        if kind not in table:
            raise InputError(f"unknown activation {kind!r}; valid: none, {', '.join(sorted(table))}")
        return table[kind](x, name=name)

    def add(self, a: str, b: str, *, name: str | None = None) -> str:
        """Elementwise sum of two tensors of equal shape."""
        self._same_shape(a, b, "add")
        return self._node("Add", [a, b], self._shapes[a], name=name)

    def mul(self, a: str, b: str, *, name: str | None = None) -> str:
        """Elementwise product; ``b`` may broadcast over H, W (shape [N, C, 1, 1])."""
        sa, sb = self._shapes[a], self._shapes[b]
        if len(sa) != len(sb) or any(db not in (1, da) for da, db in zip(sa, sb, strict=True)):
            raise InputError(f"mul: shapes {list(sa)} and {list(sb)} do not broadcast")
        return self._node("Mul", [a, b], sa, name=name)

    def elementwise(self, op: str, a: str, b: str, *, name: str | None = None) -> str:
        """``Add``, ``Sub``, ``Mul`` or ``Div`` of two tensors or constants, broadcast as numpy does."""
        if op not in ("Add", "Sub", "Mul", "Div"):
            raise InputError(f"elementwise: unknown op {op!r} (Add, Sub, Mul, Div)")
        try:
            shape = tuple(np.broadcast_shapes(self._any_shape(a), self._any_shape(b)))
        except ValueError:
            raise InputError(f"{op}: shapes {list(self._any_shape(a))} and {list(self._any_shape(b))} do not "
                             "broadcast") from None
        return self._node(op, [a, b], shape, name=name)

    def reduce_sum(self, x: str, axis: int, *, keepdims: bool = False, name: str | None = None) -> str:
        """ReduceSum over one axis (opset 13 form: the axes are an input)."""
        shape = list(self._shapes[x])
        axis = axis % len(shape)
        out = tuple(1 if i == axis else d for i, d in enumerate(shape)) if keepdims else tuple(
            d for i, d in enumerate(shape) if i != axis)
        node = self._unique(name, "ReduceSum")
        axes = self.constant(f"{node}.axes", np.array([axis], dtype=np.int64))
        self._nodes.append(helper.make_node("ReduceSum", [x, axes], [node], name=node, keepdims=int(keepdims)))
        self._shapes[node] = out
        return node

    def _any_shape(self, tensor: str) -> Shape:
        """The shape of a tensor of the graph or of a constant."""
        if tensor in self._shapes:
            return self._shapes[tensor]
        return tuple(int(d) for d in self._inits[tensor].dims)

    def concat(self, xs: Sequence[str], *, axis: int = 1, name: str | None = None) -> str:
        """Concatenate along ``axis`` (channels by default); other dimensions must agree."""
        shapes = [self._shapes[x] for x in xs]
        first = shapes[0]
        for s in shapes[1:]:
            if len(s) != len(first) or any(
                a != b for i, (a, b) in enumerate(zip(s, first, strict=True)) if i != axis
            ):
                raise InputError(f"concat: shapes {[list(t) for t in shapes]} differ outside axis {axis}")
        out = list(first)
        out[axis] = sum(s[axis] for s in shapes)
        return self._node("Concat", list(xs), tuple(out), name=name, axis=axis)

    # ----------------------------------------------------------------- pooling and shape ops

    def maxpool(
        self,
        x: str,
        kernel: IntPair,
        *,
        stride: IntPair | None = None,
        pad: IntPair = 0,
        ceil_mode: bool = False,
        name: str | None = None,
    ) -> str:
        """MaxPool (stride defaults to the kernel)."""
        return self._pool("MaxPool", x, kernel, stride, pad, ceil_mode, name)

    def avgpool(
        self,
        x: str,
        kernel: IntPair,
        *,
        stride: IntPair | None = None,
        pad: IntPair = 0,
        ceil_mode: bool = False,
        name: str | None = None,
    ) -> str:
        """AveragePool (stride defaults to the kernel; padding excluded from the average)."""
        return self._pool("AveragePool", x, kernel, stride, pad, ceil_mode, name)

    def _pool(
        self,
        op: str,
        x: str,
        kernel: IntPair,
        stride: IntPair | None,
        pad: IntPair,
        ceil_mode: bool,
        name: str | None,
    ) -> str:
        n, c, h, w = self._rank4(x, op)
        kh, kw = pair(kernel, "kernel")
        sh, sw = pair(kernel if stride is None else stride, "stride")
        pt, pl, pb, pr = pads4(pad)
        if min(kh, kw, sh, sw) <= 0 or min(pt, pl, pb, pr) < 0:
            raise InputError(f"{op}: kernel and stride must be positive and pads non-negative")
        if max(pt, pb) >= kh or max(pl, pr) >= kw:
            raise InputError(f"{op}: padding must be smaller than the kernel")
        oh = window_out(h, kh, sh, pt, pb, ceil_mode=ceil_mode)
        ow = window_out(w, kw, sw, pl, pr, ceil_mode=ceil_mode)
        if oh <= 0 or ow <= 0:
            raise InputError(f"{op}: kernel {kh}x{kw} does not fit the padded input {h}x{w}")
        return self._node(
            op,
            [x],
            (n, c, oh, ow),
            name=name,
            kernel_shape=[kh, kw],
            strides=[sh, sw],
            pads=[pt, pl, pb, pr],
            ceil_mode=int(ceil_mode),
        )

    def global_avgpool(self, x: str, *, name: str | None = None) -> str:
        """GlobalAveragePool: [N, C, H, W] → [N, C, 1, 1]."""
        n, c, _, _ = self._rank4(x, "global average pool")
        return self._node("GlobalAveragePool", [x], (n, c, 1, 1), name=name)

    def flatten(self, x: str, *, name: str | None = None) -> str:
        """Flatten to [N, rest]."""
        shape = self._shapes[x]
        return self._node("Flatten", [x], (shape[0], math.prod(shape[1:])), name=name, axis=1)

    def softmax(self, x: str, *, axis: int = -1, name: str | None = None) -> str:
        """Softmax along ``axis`` (last by default)."""
        return self._node("Softmax", [x], self._shapes[x], name=name, axis=axis)

    def reshape(self, x: str, shape: Sequence[int], *, name: str | None = None) -> str:
        """Reshape to a fully static shape (no -1 or 0 entries)."""
        target = tuple(int(d) for d in shape)
        if any(d <= 0 for d in target) or math.prod(target) != math.prod(self._shapes[x]):
            raise InputError(f"reshape: cannot reshape {list(self._shapes[x])} to {list(target)}")
        node = self._unique(name, "Reshape")
        const = self.constant(f"{node}.shape", np.array(target, dtype=np.int64))
        self._nodes.append(helper.make_node("Reshape", [x, const], [node], name=node))
        self._shapes[node] = target
        return node

    def resize(self, x: str, scale: int, *, name: str | None = None) -> str:
        """Nearest-neighbour upsampling of H and W by an integer factor (Resize with scales)."""
        n, c, h, w = self._rank4(x, "resize")
        if scale <= 0:
            raise InputError(f"resize: scale must be a positive int, got {scale}")
        node = self._unique(name, "Resize")
        scales = self.constant(f"{node}.scales", np.array([1, 1, scale, scale], dtype=np.float32))
        self._nodes.append(helper.make_node("Resize", [x, "", scales], [node], name=node, mode="nearest"))
        self._shapes[node] = (n, c, h * scale, w * scale)
        return node

    def pad(self, x: str, pads: Sequence[int], *, value: float = 0.0, name: str | None = None) -> str:
        """Constant Pad; ``pads`` in ONNX order (all begins, then all ends), one pair per dimension."""
        shape = self._shapes[x]
        if len(pads) != 2 * len(shape) or any(p < 0 for p in pads):
            raise InputError(f"pad: need {2 * len(shape)} non-negative pads, got {list(pads)}")
        rank = len(shape)
        out = tuple(d + pads[i] + pads[i + rank] for i, d in enumerate(shape))
        node = self._unique(name, "Pad")
        p = self.constant(f"{node}.pads", np.array(list(pads), dtype=np.int64))
        v = self.constant(f"{node}.value", np.array(value, dtype=np.float32))
        self._nodes.append(helper.make_node("Pad", [x, p, v], [node], name=node, mode="constant"))
        self._shapes[node] = out
        return node

    def slice(
        self,
        x: str,
        *,
        starts: Sequence[int],
        ends: Sequence[int],
        axes: Sequence[int],
        steps: Sequence[int],
        name: str | None = None,
    ) -> str:
        """Static Slice with non-negative starts, ends clipped to the dimension, positive steps."""
        shape = list(self._shapes[x])
        for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
            e = min(e, shape[a])
            shape[a] = max(0, -(-(e - s) // st))
        node = self._unique(name, "Slice")
        ins = [x]
        for part, values in (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps)):
            ins.append(self.constant(f"{node}.{part}", np.array(list(values), dtype=np.int64)))
        self._nodes.append(helper.make_node("Slice", ins, [node], name=node))
        self._shapes[node] = tuple(shape)
        return node

    # ----------------------------------------------------------------- composites

    def conv_bn(
        self,
        x: str,
        out: int,
        kernel: IntPair,
        *,
        name: str,
        bn_name: str,
        stride: IntPair = 1,
        pad: IntPair | None = None,
        groups: int = 1,
        act: str | None = None,
        act_name: str | None = None,
        gamma: float = 1.0,
    ) -> str:
        """Conv (no bias) → BatchNormalization → optional activation, as exported models look."""
        y = self.conv(x, out, kernel, name=name, stride=stride, pad=pad, groups=groups, bias=False)
        y = self.batchnorm(y, name=bn_name, gamma=gamma)
        return self.activation(y, act, name=act_name)

    # ----------------------------------------------------------------- finishing

    def build_model(
        self,
        output: str,
        *,
        output_name: str = "output",
        doc: str = "",
        metadata: dict[str, str] | None = None,
    ) -> onnx.ModelProto:
        """Finish the graph with ``output`` renamed to ``output_name`` and return a checked-ready model."""
        if output == self.input:
            raise InputError("the model has no layers")
        if output_name in self._shapes and output_name != output:
            raise InputError(f"output name {output_name!r} is already a tensor of the graph")
        nodes = []
        for node in self._nodes:
            if output in node.output or output in node.input:
                node = onnx.NodeProto.FromString(node.SerializeToString())
                node.output[:] = [output_name if t == output else t for t in node.output]
                node.input[:] = [output_name if t == output else t for t in node.input]
            nodes.append(node)
        graph = helper.make_graph(
            nodes,
            self.graph_name,
            [helper.make_tensor_value_info(self.input, TensorProto.FLOAT, list(self._shapes[self.input]))],
            [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, list(self._shapes[output]))],
            initializer=list(self._inits.values()),
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name=PRODUCER, doc_string=doc
        )
        model.ir_version = IR_VERSION
        for key, value in sorted((metadata or {}).items()):
            entry = model.metadata_props.add()
            entry.key, entry.value = key, value
        return model

    # ----------------------------------------------------------------- checks

    def _rank4(self, x: str, what: str) -> tuple[int, int, int, int]:
        shape = self._shapes[x]
        if len(shape) != 4:
            raise InputError(f"{what}: needs a 4-D input [N, C, H, W], got {list(shape)}")
        return shape[0], shape[1], shape[2], shape[3]

    def _same_shape(self, a: str, b: str, what: str) -> None:
        if self._shapes[a] != self._shapes[b]:
            raise InputError(f"{what}: shapes {list(self._shapes[a])} and {list(self._shapes[b])} differ")


_PARAM_INPUTS: Mapping[str, tuple[int, ...]] = MappingProxyType(
    {
        "Conv": (1, 2),
        "ConvTranspose": (1, 2),
        "Gemm": (0, 1, 2),
        "MatMul": (0, 1),
        "BatchNormalization": (1, 2),
        "InstanceNormalization": (1, 2),
        "LayerNormalization": (1, 2),
        "PRelu": (1,),
    }
)


def trainable_parameter_count(model: onnx.ModelProto) -> int:
    """Count parameters as torchvision's ``sum(p.numel() for p in model.parameters())`` does.

    Counted: float initializers feeding the weight/bias inputs of Conv, ConvTranspose, Gemm, MatMul, PRelu and
    the scale/bias of normalisations, plus non-scalar float initializers feeding Add/Mul (a bias or scale
    exported as its own node). Not counted: BatchNormalization running mean/variance (buffers), scalar
    constants such as Clip bounds, integer tensors (shapes, pads). Each initializer counts once.
    """
    inits = {t.name: t for t in model.graph.initializer}
    floats = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
    counted: set[str] = set()
    for node in model.graph.node:
        positions = _PARAM_INPUTS.get(node.op_type)
        candidates = [node.input[i] for i in positions or () if i < len(node.input)]
        if node.op_type in ("Add", "Mul"):
            candidates = [t for t in node.input if t in inits and math.prod(inits[t].dims) > 1]
        for name in candidates:
            if name in inits and inits[name].data_type in floats:
                counted.add(name)
    return sum(math.prod(inits[name].dims) for name in counted)
