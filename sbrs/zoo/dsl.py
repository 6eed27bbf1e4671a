"""A small YAML-friendly layer language compiled to ONNX with the zoo's name-keyed seeded weights.

A model is a list of entries, each a mapping with ``op`` and its options (a bare string such as ``relu`` is
short for ``{op: relu}``)::

    - {op: conv, out: 16, kernel: 3, stride: 1, pad: 1, bn: true, act: relu}
    - {op: residual, layers: [{op: conv, out: 16, bn: true, act: relu}, {op: conv, out: 16, bn: true}],
       act: relu}
    - {op: maxpool, kernel: 2}
    - {op: gap}
    - {op: flatten}
    - {op: fc, out: 10}

Every entry may carry ``name``; the default is ``l{i}`` at the top level and ``{parent}.{j}`` (residual) or
``{parent}.{branch}.{j}`` (concat_branches) inside. Parameters are named after their layer
(``{name}.weight``, ``{name}.bias``, ``{name}.bn.*``), so two scenarios written with the same names and seed
share identical weights. Validation is strict and every error names the entry and key at fault, e.g.
``layers[3].kernel: kernel 7x7 does not fit the padded input 4x4``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import onnx

from sbrs.errors import InputError
from sbrs.zoo.builder import GraphBuilder, pads4, window_out

ACTIVATIONS = ("none", "relu", "relu6", "sigmoid", "tanh", "hardswish", "hardsigmoid", "leakyrelu", "silu")

# Keys each op accepts besides ``op`` and ``name``; ``REQUIRED`` lists the keys without a default.
OP_KEYS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "conv": frozenset({"out", "kernel", "stride", "pad", "groups", "dilation", "bias", "bn", "act"}),
        "dwconv": frozenset({"kernel", "stride", "pad", "dilation", "bias", "bn", "act"}),
        "maxpool": frozenset({"kernel", "stride", "pad", "ceil"}),
        "avgpool": frozenset({"kernel", "stride", "pad", "ceil"}),
        "gap": frozenset(),
        "flatten": frozenset(),
        "fc": frozenset({"out", "bias", "act"}),
        "softmax": frozenset(),
        "bn": frozenset(),
        "relu": frozenset(),
        "relu6": frozenset(),
        "sigmoid": frozenset(),
        "tanh": frozenset(),
        "hardswish": frozenset(),
        "hardsigmoid": frozenset(),
        "silu": frozenset(),
        "leakyrelu": frozenset({"alpha"}),
        "upsample": frozenset({"scale"}),
        "residual": frozenset({"layers", "act"}),
        "concat_branches": frozenset({"branches", "act"}),
    }
)
REQUIRED: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "conv": frozenset({"out"}),
        "fc": frozenset({"out"}),
        "residual": frozenset({"layers"}),
        "concat_branches": frozenset({"branches"}),
    }
)
FOUR_D_OPS = frozenset(
    {"conv", "dwconv", "maxpool", "avgpool", "gap", "bn", "upsample", "residual", "concat_branches"}
)


# --------------------------------------------------------------------------- value checks


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(value: object, field: str) -> int:
    if not _is_int(value) or value <= 0:  # type: ignore[operator]
        raise InputError(f"must be a positive int, got {value!r}", field=field)
    return int(value)  # type: ignore[arg-type]


def _int_pair(value: object, field: str) -> tuple[int, int]:
    """A positive int or a list [h, w] of positive ints."""
    if _is_int(value):
        return _positive_int(value, field), _positive_int(value, field)
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(_is_int(v) and v > 0 for v in value):
        return int(value[0]), int(value[1])
    raise InputError(f"must be a positive int or a list [h, w] of positive ints, got {value!r}", field=field)


def _pads(value: object, field: str) -> tuple[int, int, int, int]:
    """A non-negative int, [h, w] or [top, left, bottom, right]."""
    ok = (_is_int(value) and value >= 0) or (  # type: ignore[operator]
        isinstance(value, (list, tuple))
        and len(value) in (2, 4)
        and all(_is_int(v) and v >= 0 for v in value)
    )
    if not ok:
        raise InputError(
            f"must be a non-negative int, [h, w] or [top, left, bottom, right], got {value!r}", field=field
        )
    return pads4(value)  # type: ignore[arg-type]


def _bool(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"must be true or false, got {value!r}", field=field)
    return value


def _act(value: object, field: str) -> str:
    if value is None:
        return "none"
    if not isinstance(value, str) or value not in ACTIVATIONS:
        raise InputError(f"unknown activation {value!r}; valid: {', '.join(ACTIVATIONS)}", field=field)
    return value


def _number(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"must be a number, got {value!r}", field=field)
    return float(value)


# --------------------------------------------------------------------------- compiler


class _Compiler:
    """Walks the layer list once, validating each entry and emitting its nodes into one GraphBuilder."""

    def __init__(self, builder: GraphBuilder) -> None:
        self.b = builder
        self.names: set[str] = set()

    def layers(self, x: str, entries: object, where: str, prefix: str) -> str:
        """Apply a list of entries to ``x``; ``prefix`` builds default names (``l`` or ``parent.``)."""
        if not isinstance(entries, list) or not entries:
            raise InputError("must be a non-empty list of layers", field=where)
        for i, entry in enumerate(entries):
            x = self.entry(x, entry, f"{where}[{i}]", f"{prefix}{i}")
        return x

    def entry(self, x: str, entry: object, path: str, default_name: str) -> str:
        """Validate and emit one entry."""
        if isinstance(entry, str):
            entry = {"op": entry}
        if not isinstance(entry, Mapping):
            raise InputError(
                f"a layer must be a mapping with 'op' (or an op name), got {entry!r}", field=path
            )
        op = entry.get("op")
        if op is None:
            raise InputError(f"missing 'op'; valid ops: {', '.join(OP_KEYS)}", field=path)
        if not isinstance(op, str) or op not in OP_KEYS:
            raise InputError(f"unknown op {op!r}; valid ops: {', '.join(OP_KEYS)}", field=f"{path}.op")
        allowed = OP_KEYS[op]
        for key in entry:
            if key not in allowed and key not in ("op", "name"):
                valid = ", ".join(sorted(allowed | {"name"}))
                raise InputError(
                    f"unknown key {key!r} for op {op}; valid keys: {valid}", field=f"{path}.{key}"
                )
        for key in sorted(REQUIRED.get(op, frozenset())):
            if key not in entry:
                raise InputError(f"op {op} needs '{key}'", field=f"{path}.{key}")
        name = self._name(entry.get("name", default_name), f"{path}.name")
        shape = self.b.shape(x)
        if op in FOUR_D_OPS and len(shape) != 4:
            raise InputError(f"op {op} needs a 4-D input [N, C, H, W], got {list(shape)}", field=f"{path}.op")
        if op == "fc" and len(shape) != 2:
            raise InputError(
                f"op fc needs a 2-D input [N, F], got {list(shape)}; add {{op: flatten}} or "
                "{op: gap} and {op: flatten} before it",
                field=f"{path}.op",
            )
        handler: Callable[[str, Mapping[str, Any], str, str], str] | None = getattr(self, f"op_{op}", None)
        try:
            if handler is None:
                return self.op_simple(x, entry, path, name, op)
            return handler(x, entry, path, name)
        except InputError as err:
            if err.field is not None:
                raise
            raise InputError(err.detail, field=path) from None

    def _name(self, name: object, field: str) -> str:
        if not isinstance(name, str) or not name.strip() or any(c.isspace() for c in name):
            raise InputError(f"must be a non-empty name without spaces, got {name!r}", field=field)
        if name in self.names:
            raise InputError(f"layer name {name!r} is used twice", field=field)
        self.names.add(name)
        return name

    # ------------------------------------------------------------------- convolutions and pools

    def _window(
        self, x: str, entry: Mapping[str, Any], path: str, *, default_pad: str, dilation: int = 1
    ) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int, int, int]]:
        """Kernel, stride and pads of a sliding-window entry, checked against the input."""
        kernel = _int_pair(entry.get("kernel", 3 if default_pad == "same" else 2), f"{path}.kernel")
        stride = _int_pair(entry.get("stride", 1 if default_pad == "same" else kernel), f"{path}.stride")
        if "pad" in entry:
            pads = _pads(entry["pad"], f"{path}.pad")
        elif default_pad == "same":
            ph, pw = dilation * (kernel[0] - 1) // 2, dilation * (kernel[1] - 1) // 2
            pads = (ph, pw, ph, pw)
        else:
            pads = (0, 0, 0, 0)
        _, _, h, w = self.b.shape(x)
        ceil = bool(entry.get("ceil", False))
        oh = window_out(h, kernel[0], stride[0], pads[0], pads[2], dilation=dilation, ceil_mode=ceil)
        ow = window_out(w, kernel[1], stride[1], pads[1], pads[3], dilation=dilation, ceil_mode=ceil)
        if oh <= 0 or ow <= 0:
            raise InputError(
                f"kernel {kernel[0]}x{kernel[1]} does not fit the padded input {h}x{w}",
                field=f"{path}.kernel",
            )
        return kernel, stride, pads

    def _conv(self, x: str, entry: Mapping[str, Any], path: str, name: str, out: int, groups: int) -> str:
        dilation = _positive_int(entry.get("dilation", 1), f"{path}.dilation")
        kernel, stride, pads = self._window(x, entry, path, default_pad="same", dilation=dilation)
        bn = _bool(entry.get("bn", False), f"{path}.bn")
        bias = _bool(entry.get("bias", not bn), f"{path}.bias")
        act = _act(entry.get("act", "none"), f"{path}.act")
        y = self.b.conv(
            x, out, kernel, name=name, stride=stride, pad=pads, groups=groups, dilation=dilation, bias=bias
        )
        if bn:
            y = self.b.batchnorm(y, name=f"{name}.bn")
        return self.b.activation(y, act, name=f"{name}.act")

    def op_conv(self, x: str, entry: Mapping[str, Any], path: str, name: str) -> str:
        """Convolution: ``out`` channels, optional groups, bias, BatchNormalization and activation."""
        out = _positive_int(entry["out"], f"{path}.out")
        groups = _positive_int(entry.get("groups", 1), f"{path}.groups")
        channels = self.b.channels(x)
        if channels % groups or out % groups:
            raise InputError(
                f"groups={groups} must divide the input channels ({channels}) and out ({out})",
                field=f"{path}.groups",
            )
        return self._conv(x, entry, path, name, out, groups)

    def op_dwconv(self, x: str, entry: Mapping[str, Any], path: str, name: str) -> str:
        """Depthwise convolution (one filter per input channel)."""
        channels = self.b.channels(x)
        return self._conv(x, entry, path, name, channels, channels)

    def _pool(self, x: str, entry: Mapping[str, Any], path: str, name: str, kind: str) -> str:
        if "ceil" in entry:
            _bool(entry["ceil"], f"{path}.ceil")
        kernel, stride, pads = self._window(x, entry, path, default_pad="zero")
        if max(pads[0], pads[2]) >= kernel[0] or max(pads[1], pads[3]) >= kernel[1]:
            raise InputError("padding must be smaller than the kernel", field=f"{path}.pad")
        pool = self.b.maxpool if kind == "max" else self.b.avgpool
        return pool(x, kernel, stride=stride, pad=pads, ceil_mode=bool(entry.get("ceil", False)), name=name)

    def op_maxpool(self, x: str, entry: Mapping[str, Any], path: str, name: str) -> str:
        """Max pooling; ``stride`` defaults to ``kernel`` (2)."""
        return self._pool(x, entry, path, name, "max")

    def op_avgpool(self, x: str, entry: Mapping[str, Any], path: str, name: str) -> str:
        """Average pooling (padding excluded from the average); ``stride`` defaults to ``kernel``."""
        return self._pool(x, entry, path, name, "avg")

    # ------------------------------------------------------------------- other single ops

    def op_fc(self, x: str, entry: Mapping[str, Any], path: str, name: str) -> str:
        """Fully connected layer on an [N, F] input."""
        out = _positive_int(entry["out"], f"{path}.out")
        bias = _bool(entry.get("bias", True), f"{path}.bias")
        act = _act(entry.get("act", "none"), f"{path}.act")
        gain = 1.0 if act == "none" else 2.0
        return self.b.activation(
            self.b.gemm(x, out, name=name, bias=bias, gain=gain), act, name=f"{name}.act"
        )

    def op_leakyrelu(self, x: str, entry: Mapping[str, Any], path: str, name: str) -> str:
        """LeakyRelu with ``alpha`` (default 0.01)."""
        return self.b.leaky_relu(x, alpha=_number(entry.get("alpha", 0.01), f"{path}.alpha"), name=name)

    def op_upsample(self, x: str, entry: Mapping[str, Any], path: str, name: str) -> str:
        """Nearest-neighbour upsampling by an integer ``scale`` (default 2)."""
        return self.b.resize(x, _positive_int(entry.get("scale", 2), f"{path}.scale"), name=name)

    def op_simple(self, x: str, entry: Mapping[str, Any], path: str, name: str, op: str) -> str:
        """Ops without options: gap, flatten, softmax, bn and the activations."""
        b = self.b
        if op == "gap":
            return b.global_avgpool(x, name=name)
        if op == "flatten":
            return b.flatten(x, name=name)
        if op == "softmax":
            return b.softmax(x, axis=1 if len(b.shape(x)) == 2 else -1, name=name)
        if op == "bn":
            return b.batchnorm(x, name=name)
        return b.activation(x, op, name=name)

    # ------------------------------------------------------------------- composites

    def op_residual(self, x: str, entry: Mapping[str, Any], path: str, name: str) -> str:
        """Inner layers applied to ``x`` and added to it (shapes must match), then an optional activation."""
        act = _act(entry.get("act", "none"), f"{path}.act")
        y = self.layers(x, entry["layers"], f"{path}.layers", f"{name}.")
        if self.b.shape(y) != self.b.shape(x):
            raise InputError(
                f"the inner layers turn {list(self.b.shape(x))} into {list(self.b.shape(y))}; "
                "a residual needs the same shape",
                field=f"{path}.layers",
            )
        return self.b.activation(self.b.add(y, x, name=f"{name}.add"), act, name=f"{name}.act")

    def op_concat_branches(self, x: str, entry: Mapping[str, Any], path: str, name: str) -> str:
        """Each branch applied to ``x``; outputs concatenated on channels (N, H, W must agree)."""
        act = _act(entry.get("act", "none"), f"{path}.act")
        branches = entry["branches"]
        if not isinstance(branches, list) or not branches:
            raise InputError("must be a non-empty list of layer lists", field=f"{path}.branches")
        outs = [
            self.layers(x, branch, f"{path}.branches[{k}]", f"{name}.{k}.")
            for k, branch in enumerate(branches)
        ]
        shapes = [self.b.shape(o) for o in outs]
        if any(
            len(s) != 4 or (s[0], s[2], s[3]) != (shapes[0][0], shapes[0][2], shapes[0][3]) for s in shapes
        ):
            raise InputError(
                f"branch outputs {[list(s) for s in shapes]} differ outside the channel axis",
                field=f"{path}.branches",
            )
        y = outs[0] if len(outs) == 1 else self.b.concat(outs, name=f"{name}.concat")
        return self.b.activation(y, act, name=f"{name}.act")


def compile_layers(
    layers: list,
    input_shape: Sequence[int],
    *,
    seed: int = 0,
    input_name: str = "input",
    output_name: str = "output",
    where: str = "layers",
) -> onnx.ModelProto:
    """Compile a layer list into an ONNX model with input ``input_shape`` ([N, C, H, W] or [N, F]).

    Raises ``InputError`` with ``field`` such as ``f"{where}[2].kernel"`` on the first problem found.
    """
    if (
        not isinstance(input_shape, (list, tuple))
        or len(input_shape) not in (2, 4)
        or not all(_is_int(d) and d > 0 for d in input_shape)
    ):
        raise InputError(
            f"must be [N, C, H, W] or [N, F] with positive ints, got {input_shape!r}", field="input_shape"
        )
    if not _is_int(seed):
        raise InputError(f"must be an int, got {seed!r}", field="seed")
    builder = GraphBuilder(input_shape, seed=seed, input_name=input_name, graph_name=where)
    y = _Compiler(builder).layers(builder.input, layers, where, "l")
    try:
        return builder.build_model(y, output_name=output_name)
    except InputError as err:
        raise InputError(err.detail, field=err.field or where) from None
