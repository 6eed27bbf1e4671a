"""Test helpers: small row-wise CNNs built directly as ``CnnModel``, and a ring-buffer replay of a schedule.

A *chain* is a list of steps applied to a (1, 1, H, 1) tensor (one channel, one column, so a row is one
number and the height is all that matters):

- ``("conv", kh, s, d, pad_top, pad_bottom)``: a 1-D convolution along H with weights ``1, 2, ..., kh``
  (negative pads crop);
- ``("pool", kh, s, pad_top, pad_bottom)``: max pooling along H (padding is -inf);
- ``("res", kh, d)``: ``Add(x, conv(x))`` with a "same" convolution (stride 1), a residual skip edge.

:func:`replay` runs a schedule the way an executor would: every tensor lives in a ring of the reported
number of rows (row ``r`` in slot ``r mod rows``), each firing reads the rows its phase plan names, pads
them as the plan says, computes its band and writes it into the ring. Reading a slot that holds another row
fails the replay, so a buffer that is too small, or a wrong row range, is caught numerically.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import strategies as st

from sbrs.model.cnn import INPUT_OP, OUTPUT_OP, CnnModel, Edge, Layer, TensorSpec
from sbrs.reduction import CsdfGraph, Schedule

Step = tuple


def conv_out(h: int, k: int, s: int, d: int, pt: int, pb: int) -> int:
    return (h + pt + pb - ((k - 1) * d + 1)) // s + 1


def chain_model(height: int, steps: Sequence[Step]) -> CnnModel:
    """The ``CnnModel`` of a chain (layers named ``L0, L1, ...``; residual blocks add ``Lk_conv``, ``Lk_add``)."""
    def spec(h: int) -> TensorSpec:
        return TensorSpec((1, 1, h, 1), "float64")

    tensors = {"x": spec(height)}
    layers = [Layer("in", INPUT_OP, "data", (), ("x",), (), (tensors["x"].shape,))]
    edges: list[Edge] = []
    producer = {"x": "in"}
    current, h = "x", height

    def add(layer: Layer) -> None:
        layers.append(layer)
        for t in layer.inputs:
            edges.append(Edge(producer[t], layer.name, t, tensors[t]))
        for t in layer.outputs:
            producer[t] = layer.name

    for i, step in enumerate(steps):
        name = f"L{i}"
        if step[0] in ("conv", "pool"):
            if step[0] == "conv":
                _, k, s, d, pt, pb = step
            else:
                _, k, s, pt, pb = step
                d = 1
            h2 = conv_out(h, k, s, d, pt, pb)
            tensors[name] = spec(h2)
            add(Layer(name, "Conv" if step[0] == "conv" else "MaxPool", "convolutional", (current,), (name,),
                      (tensors[current].shape,), (tensors[name].shape,), kernel=(k, 1), stride=(s, 1),
                      pads=(pt, 0, pb, 0), dilation=(d, 1)))
            current, h = name, h2
        else:
            _, k, d = step
            p = (k - 1) * d // 2
            conv = f"{name}_conv"
            tensors[conv] = spec(h)
            add(Layer(conv, "Conv", "convolutional", (current,), (conv,), (tensors[current].shape,),
                      (tensors[conv].shape,), kernel=(k, 1), pads=(p, 0, p, 0), dilation=(d, 1)))
            out = f"{name}_add"
            tensors[out] = spec(h)
            add(Layer(out, "Add", "arithmetic", (current, conv), (out,), (spec(h).shape, spec(h).shape),
                      (tensors[out].shape,)))
            current = out
    layers.append(Layer("out", OUTPUT_OP, "data", (current,), (), (tensors[current].shape,), ()))
    edges.append(Edge(producer[current], "out", current, tensors[current]))
    return CnnModel("chain", "test", 17, tuple(layers), tuple(edges), tensors, ("x",), (current,))


@st.composite
def chains(draw: st.DrawFn, max_steps: int = 4) -> tuple[int, list[Step]]:
    """A random valid chain and its input height."""
    height = draw(st.integers(6, 40))
    h = height
    steps: list[Step] = []
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(["conv", "conv", "pool", "res"]))
        if kind == "res":
            k = draw(st.sampled_from([1, 3, 5]))
            d = draw(st.integers(1, 2))
            steps.append(("res", k, d))
            continue
        k = draw(st.integers(1, 5))
        s = draw(st.integers(1, 3))
        d = draw(st.integers(1, 2)) if kind == "conv" else 1
        ext = (k - 1) * d + 1
        low = -2 if kind == "conv" else 0
        pt = draw(st.integers(low, max(low, min(2, ext - 1))))
        pb = draw(st.integers(low, max(low, min(2, ext - 1))))
        if conv_out(h, k, s, d, pt, pb) < 1 or h + pt + pb < ext:
            continue
        steps.append((kind, k, s, pt, pb) if kind == "pool" else (kind, k, s, d, pt, pb))
        h = conv_out(h, k, s, d, pt, pb)
    if not steps:
        steps.append(("conv", 1, 1, 1, 0, 0))
    return height, steps


def reference(height: int, steps: Sequence[Step], x: np.ndarray) -> np.ndarray:
    """The chain computed whole, layer by layer."""
    for step in steps:
        if step[0] == "res":
            _, k, d = step
            p = (k - 1) * d // 2
            x = x + window_op("conv", x, k, 1, d, p, p)
        elif step[0] == "conv":
            x = window_op("conv", x, *step[1:])
        else:
            _, k, s, pt, pb = step
            x = window_op("pool", x, k, s, 1, pt, pb)
    return x


def window_op(kind: str, rows: np.ndarray, k: int, s: int, d: int, pt: int, pb: int) -> np.ndarray:
    """Convolution (weights 1..k) or max pooling along a 1-D array; negative pads crop."""
    fill = 0.0 if kind == "conv" else -np.inf
    x = rows
    x = x[-pt:] if pt < 0 else np.concatenate([np.full(pt, fill), x])
    x = x[: len(x) + pb] if pb < 0 else np.concatenate([x, np.full(pb, fill)])
    ext = (k - 1) * d + 1
    count = (len(x) - ext) // s + 1
    weights = np.arange(1, k + 1, dtype=np.float64)
    out = np.empty(max(count, 0))
    for r in range(count):
        window = x[r * s: r * s + ext: d]
        out[r] = window @ weights if kind == "conv" else window.max()
    return out


class Ring:
    """Rows of one tensor in ``capacity`` slots; reading a row that was overwritten (or never written) fails."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.values = np.zeros(capacity)
        self.rows = np.full(capacity, -1)

    def write(self, start: int, values: np.ndarray) -> None:
        for offset, value in enumerate(values):
            slot = (start + offset) % self.capacity
            self.values[slot] = value
            self.rows[slot] = start + offset

    def read(self, lo: int, hi: int) -> np.ndarray:
        out = np.empty(hi - lo)
        for r in range(lo, hi):
            slot = r % self.capacity
            assert self.rows[slot] == r, f"row {r} not in ring (slot holds row {self.rows[slot]})"
            out[r - lo] = self.values[slot]
        return out


def replay(model: CnnModel, graph: CsdfGraph, schedule: Schedule, x: np.ndarray) -> np.ndarray:
    """Execute ``schedule`` band by band on rings of the scheduled sizes; return the output tensor."""
    rings = {b.tensor: Ring(max(b.rows, 1)) for b in schedule.buffers}
    plans = {p.layer: p for p in graph.layers}
    result: np.ndarray | None = None
    for actor, phase in schedule.firings:
        layer = model.layer(actor)
        plan = plans[actor]
        k = phase - 1
        o0, o1 = plan.out_rows[k]
        if layer.op == INPUT_OP:
            rings["x"].write(o0, x[o0:o1])
            continue
        inputs = {}
        for item in plan.inputs:
            lo, hi = item.rows[k]
            inputs[item.tensor] = (rings[item.tensor].read(lo, hi), item.pads[k])
        if layer.op == OUTPUT_OP:
            result = inputs[layer.inputs[0]][0]
            continue
        if layer.op == "Add":
            a, b = (inputs[t][0] for t in layer.inputs)
            band = a + b
        else:
            rows, (top, bottom) = inputs[layer.inputs[0]]
            kind = "conv" if layer.op == "Conv" else "pool"
            band = window_op(kind, rows, layer.kernel[0], layer.stride[0], layer.dilation[0], top, bottom)
        assert len(band) == o1 - o0, f"{actor} phase {phase}: band of {len(band)} rows, expected {o1 - o0}"
        rings[layer.outputs[0]].write(o0, band)
    assert result is not None
    return result
