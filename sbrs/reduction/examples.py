"""The example CNN of thesis Figure 4.1 (Section 4.4, Table 4.1), built directly as a ``CnnModel``.

``l_1``: the input, 32x32x1, produced row by row; ``l_2``: a 17x17 convolution to 16x16x4; ``l_3``: a 5x5
convolution with stride 3 whose padding ``pad_3 = -1`` crops one pixel on every side, to 4x4x3; ``l_4``: a
4x4 convolution to 1x1x2; ``l_5``: the output. Tokens are one byte (``uint8``), as Table 4.1 assumes.
ONNX ``Conv`` does not take negative pads, hence a ``CnnModel`` (Table 2.1 allows them) rather than ONNX.

The phases and buffers of Table 4.1 (bytes; ``B_1..B_5`` are the edges ``l_1→l_2``, ``l_2→l_3``, ``l_3→l_4``,
``l_4→l_5``; the table's columns are labelled B_1, B_2, B_4, B_5):

==== ======================= ==================== =====
Ex   Φ                        buffers              total
==== ======================= ==================== =====
Ex1  {1, 1, 1, 1, 1}          1024, 1024, 48, 2    2098
Ex2  l_1: 24-row, l_2: 8-row  768, 1024, 48, 2     1842
Ex3  {32, 16, 1, 1, 1}        544, 1024, 48, 2     1618
Ex4  {32, 16, 4, 1, 1}        544, 384, 48, 2      978
==== ======================= ==================== =====
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from types import MappingProxyType

from sbrs.model.cnn import INPUT_OP, OUTPUT_OP, CnnModel, Edge, Layer, ParamRef, TensorSpec

__all__ = ["TABLE_4_1", "TABLE_4_1_BANDS", "figure_4_1_model"]

#: Table 4.1, Columns 8-12: buffers in bytes of Ex1..Ex4 (edges l1→l2, l2→l3, l3→l4, l4→l5) and the total.
TABLE_4_1: Mapping[str, tuple[int, int, int, int, int]] = MappingProxyType({
    "Ex1": (1024, 1024, 48, 2, 2098),
    "Ex2": (768, 1024, 48, 2, 1842),
    "Ex3": (544, 1024, 48, 2, 1618),
    "Ex4": (544, 384, 48, 2, 978),
})

#: Band heights (output rows per phase) that give the phases of Table 4.1, Columns 2-6. In Ex2 ``l_1``
#: produces 24 rows (``Y_11 = [1, 24, 32, 1]``), ``l_2`` 8 rows per phase.
TABLE_4_1_BANDS: Mapping[str, Mapping[str, int]] = MappingProxyType({
    "Ex1": MappingProxyType({}),
    "Ex2": MappingProxyType({"l1": 24, "l2": 8}),
    "Ex3": MappingProxyType({"l1": 1, "l2": 1}),
    "Ex4": MappingProxyType({"l1": 1, "l2": 1, "l3": 1}),
})


def _param(name: str, shape: tuple[int, ...]) -> ParamRef:
    return ParamRef(name, shape, "uint8", hashlib.sha256(f"{name}{shape}".encode()).hexdigest()[:32])


def figure_4_1_model() -> CnnModel:
    """The CNN of thesis Figure 4.1 with one-byte tokens."""
    spec = {
        "x": TensorSpec((1, 1, 32, 32), "uint8"),
        "y2": TensorSpec((1, 4, 16, 16), "uint8"),
        "y3": TensorSpec((1, 3, 4, 4), "uint8"),
        "y4": TensorSpec((1, 2, 1, 1), "uint8"),
    }
    w2, w3, w4 = _param("w2", (4, 1, 17, 17)), _param("w3", (3, 4, 5, 5)), _param("w4", (2, 3, 4, 4))
    layers = (
        Layer("l1", INPUT_OP, "data", (), ("x",), (), (spec["x"].shape,)),
        Layer("l2", "Conv", "convolutional", ("x", "w2"), ("y2",), (spec["x"].shape,), (spec["y2"].shape,),
              kernel=(17, 17), params=(w2,)),
        Layer("l3", "Conv", "convolutional", ("y2", "w3"), ("y3",), (spec["y2"].shape,), (spec["y3"].shape,),
              kernel=(5, 5), stride=(3, 3), pads=(-1, -1, -1, -1), params=(w3,)),
        Layer("l4", "Conv", "convolutional", ("y3", "w4"), ("y4",), (spec["y3"].shape,), (spec["y4"].shape,),
              kernel=(4, 4), params=(w4,)),
        Layer("l5", OUTPUT_OP, "data", ("y4",), (), (spec["y4"].shape,), ()),
    )
    edges = (
        Edge("l1", "l2", "x", spec["x"]),
        Edge("l2", "l3", "y2", spec["y2"]),
        Edge("l3", "l4", "y3", spec["y3"]),
        Edge("l4", "l5", "y4", spec["y4"]),
    )
    return CnnModel("figure_4_1", "thesis Figure 4.1", 17, layers, edges, spec, ("x",), ("y4",))
