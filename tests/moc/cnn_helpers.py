"""Small CNNs for the MoC tests, built with ``onnx.helper`` and imported as ``CnnModel``.

A model is a *program*: a list of blocks applied one after another to a (1, C, H, W) float tensor, followed by
a head (global pooling, flatten, fully connected). Every parameter's values depend only on its *key* (and the
shape), like the zoo's name-keyed weights, so programs that share a block key share that block's weights
bit for bit: that is how scenarios derived from one backbone look.

Blocks (all keep the channel count C, so any subsequence of blocks is a valid program):

- ``("conv", key, k)``: k x k convolution C → C, "same" padding;
- ``("relu",)``, ``("sigmoid",)``;
- ``("res", key)``: conv 3x3 → relu → conv 3x3 → add with the block's input (residual block);
- ``("branch", key)``: two 1x1 convolutions of the input, concatenated, then a 1x1 convolution back to C;
- ``("double",)``: ``Add(x, x)``, reading one tensor twice;
- ``("pool",)``: 2x2 max pooling, stride 2 (skipped when the map is already 1 pixel high).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from sbrs.model import CnnModel, import_model

Block = tuple
OPSET = 17


def keyed_array(key: str, shape: Sequence[int]) -> np.ndarray:
    """Deterministic float32 values for parameter ``key`` (the same key and shape give the same values)."""
    seed = zlib.crc32(f"{key}:{tuple(shape)}".encode())
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.3


@dataclass
class GraphBuilder:
    """Accumulates ONNX nodes and initializers; ``tensor()`` hands out fresh tensor names."""

    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: dict[str, onnx.TensorProto] = field(default_factory=dict)
    counter: int = 0

    def tensor(self, hint: str) -> str:
        self.counter += 1
        return f"{hint}_{self.counter}"

    def param(self, key: str, shape: Sequence[int]) -> str:
        name = f"w:{key}:{'x'.join(map(str, shape))}"
        if name not in self.initializers:
            self.initializers[name] = numpy_helper.from_array(keyed_array(key, shape), name)
        return name

    def node(self, op: str, inputs: Sequence[str], name: str, **attributes: object) -> str:
        output = self.tensor(name)
        self.nodes.append(helper.make_node(op, list(inputs), [output], name=name, **attributes))
        return output

    def conv(self, x: str, key: str, cin: int, cout: int, k: int, name: str, bias: bool = True) -> str:
        operands = [x, self.param(f"{key}.w", (cout, cin, k, k))]
        if bias:
            operands.append(self.param(f"{key}.b", (cout,)))
        return self.node("Conv", operands, name, kernel_shape=[k, k], pads=[k // 2] * 4)

    def model(self, inputs: Sequence[tuple[str, Sequence[int]]], outputs: Sequence[str],
              name: str = "cnn") -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
            initializer=list(self.initializers.values()),
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)


def program_onnx(program: Sequence[Block], channels: int = 3, size: int = 8, classes: int = 5,
                 head: str = "head", extra_output: bool = False) -> onnx.ModelProto:
    """The ONNX model of a program (see the module docstring)."""
    g = GraphBuilder()
    x = "input"
    height = size
    for index, block in enumerate(program):
        kind, tag = block[0], f"b{index}.{block[0]}"
        if kind == "conv":
            x = g.conv(x, block[1], channels, channels, block[2], tag)
        elif kind in ("relu", "sigmoid"):
            x = g.node(kind.capitalize(), [x], tag)
        elif kind == "res":
            y = g.conv(x, f"{block[1]}.c1", channels, channels, 3, f"{tag}.c1")
            y = g.node("Relu", [y], f"{tag}.relu")
            y = g.conv(y, f"{block[1]}.c2", channels, channels, 3, f"{tag}.c2")
            x = g.node("Add", [x, y], f"{tag}.add")
        elif kind == "branch":
            left = g.conv(x, f"{block[1]}.l", channels, channels, 1, f"{tag}.l")
            right = g.conv(x, f"{block[1]}.r", channels, channels, 1, f"{tag}.r")
            joined = g.node("Concat", [left, right], f"{tag}.cat", axis=1)
            x = g.conv(joined, f"{block[1]}.m", 2 * channels, channels, 1, f"{tag}.m")
        elif kind == "double":
            x = g.node("Add", [x, x], tag)
        elif kind == "pool":
            if height >= 2:
                x = g.node("MaxPool", [x], tag, kernel_shape=[2, 2], strides=[2, 2])
                height //= 2
        else:
            raise ValueError(f"unknown block {block}")
    features = x
    pooled = g.node("GlobalAveragePool", [x], "gap")
    flat = g.node("Flatten", [pooled], "flatten")
    logits = g.node("Gemm", [flat, g.param(f"{head}.w", (classes, channels)), g.param(f"{head}.b", (classes,))],
                    "fc", transB=1)
    outputs = [logits, features] if extra_output else [logits]
    return g.model([("input", (1, channels, size, size))], outputs)


def program_model(program: Sequence[Block], name: str = "cnn", extra_output: bool = False) -> CnnModel:
    """``program_onnx`` imported as a ``CnnModel``."""
    return import_model(program_onnx(program, extra_output=extra_output), name=name)


# -- hypothesis strategies: random programs and scenario sets derived from one base --------------------------

KEYS = st.sampled_from(["k1", "k2", "k3", "k4", "k5", "k6"])


@st.composite
def blocks(draw: st.DrawFn) -> Block:
    kind = draw(st.sampled_from(["conv", "conv", "relu", "sigmoid", "res", "branch", "double", "pool"]))
    if kind == "conv":
        return ("conv", draw(KEYS), draw(st.sampled_from([1, 3])))
    if kind in ("res", "branch"):
        return (kind, draw(KEYS))
    return (kind,)


@st.composite
def scenario_programs(draw: st.DrawFn) -> list[list[Block]]:
    """1 to 3 programs: a random base and variants with blocks dropped, reweighted, inserted or repeated."""
    base = draw(st.lists(blocks(), min_size=1, max_size=6))
    programs = [base]
    for _ in range(draw(st.integers(0, 2))):
        program = list(base)
        for _ in range(draw(st.integers(0, 3))):
            action = draw(st.sampled_from(["drop", "reweight", "insert", "repeat"]))
            position = draw(st.integers(0, max(len(program) - 1, 0)))
            if action == "drop" and len(program) > 1:
                del program[position]
            elif action == "reweight" and program and len(program[position]) > 1:
                block = program[position]
                program[position] = (block[0], f"{block[1]}'", *block[2:])
            elif action == "insert":
                program.insert(position, draw(blocks()))
            elif action == "repeat" and program:
                program.insert(position, program[position])
        programs.append(program)
    return programs
