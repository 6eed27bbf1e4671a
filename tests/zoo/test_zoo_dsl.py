"""The layer DSL: good programs compile and run with the expected shapes; bad ones fail on the right field."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
import yaml

from sbrs.errors import InputError
from sbrs.zoo import trainable_parameter_count
from sbrs.zoo.dsl import compile_layers
from tests.zoo.zoo_helpers import check_graph_names, initializers, run_ort

SMALL_NET = yaml.safe_load("""
- {op: conv, out: 16, kernel: 3, stride: 1, pad: 1, bn: true, act: relu}
- {op: dwconv, kernel: 3, stride: 2, pad: 1, bn: true, act: relu6}
- {op: residual, act: relu, layers: [
    {op: conv, out: 16, bn: true, act: relu},
    {op: conv, out: 16, kernel: [1, 3], pad: [0, 1], bn: true}]}
- {op: concat_branches, branches: [
    [{op: conv, out: 8, kernel: 1, act: hardswish}],
    [{op: maxpool, kernel: 3, stride: 1, pad: 1}, {op: conv, out: 8, kernel: 1, act: silu}]]}
- {op: upsample, scale: 2}
- {op: avgpool, kernel: 2}
- {op: conv, out: 8, groups: 2, act: leakyrelu}
- {op: leakyrelu, alpha: 0.2}
- hardsigmoid
- {op: bn}
- {op: maxpool, kernel: 2, stride: 2, ceil: true}
- gap
- flatten
- {op: fc, out: 32, act: relu}
- {op: fc, out: 10}
- softmax
""")


def test_small_net_compiles_and_runs() -> None:
    model = compile_layers(SMALL_NET, (1, 3, 32, 32), seed=4)
    onnx.checker.check_model(model, full_check=True)
    check_graph_names(model)
    y = run_ort(model)
    assert y.shape == (1, 10)
    np.testing.assert_allclose(y.sum(), 1.0, rtol=1e-5)
    assert compile_layers(SMALL_NET, (1, 3, 32, 32), seed=4).SerializeToString() == model.SerializeToString()


def test_shapes_follow_the_layers() -> None:
    layers = [
        {"op": "conv", "out": 6, "kernel": 5, "pad": 0},
        {"op": "maxpool", "kernel": 2},
        {"op": "conv", "out": 12, "kernel": 3, "stride": 2, "pad": [1, 0]},
    ]
    y = run_ort(compile_layers(layers, [1, 2, 20, 16]))
    assert y.shape == (1, 12, 4, 2)  # H: 20 → 16 → 8 → 4; W: 16 → 12 → 6 → 2


def test_semantics_against_numpy() -> None:
    x = np.random.default_rng(1).standard_normal((1, 3, 4, 6), dtype=np.float32)
    up = run_ort(compile_layers([{"op": "upsample", "scale": 2}], (1, 3, 4, 6)), x)
    np.testing.assert_array_equal(up, x.repeat(2, axis=2).repeat(2, axis=3))
    gap = run_ort(compile_layers(["gap", "flatten"], (1, 3, 4, 6)), x)
    np.testing.assert_allclose(gap, x.mean(axis=(2, 3)), rtol=1e-5, atol=1e-6)
    relu6 = run_ort(compile_layers(["relu6"], (1, 3, 4, 6)), x * 10)
    np.testing.assert_array_equal(relu6, np.clip(x * 10, 0, 6))
    # A residual of one conv is conv(x) + x: compare with the same conv alone, named alike.
    inner = {"op": "conv", "out": 3, "name": "c"}
    res = run_ort(compile_layers([{"op": "residual", "name": "r", "layers": [inner]}], (1, 3, 4, 6)), x)
    conv = run_ort(compile_layers([inner], (1, 3, 4, 6)), x)
    np.testing.assert_allclose(res, conv + x, rtol=1e-5, atol=1e-6)


def test_vector_input_and_bare_strings() -> None:
    model = compile_layers(
        [{"op": "fc", "out": 8, "act": "tanh"}, "sigmoid", {"op": "fc", "out": 3}, "softmax"], (2, 20)
    )
    y = run_ort(model)
    assert y.shape == (2, 3)
    np.testing.assert_allclose(y.sum(axis=1), [1.0, 1.0], rtol=1e-5)
    assert trainable_parameter_count(model) == 20 * 8 + 8 + 8 * 3 + 3


def test_default_names_and_shared_weights() -> None:
    body = [
        {"op": "conv", "out": 8, "bn": True, "act": "relu"},
        {"op": "residual", "layers": [{"op": "conv", "out": 8}, {"op": "conv", "out": 8}]},
        "gap",
        "flatten",
    ]
    a = initializers(compile_layers([*body, {"op": "fc", "out": 10}], (1, 3, 16, 16), seed=9))
    b = initializers(
        compile_layers([*body, {"op": "fc", "out": 4, "name": "small_head"}], (1, 3, 16, 16), seed=9)
    )
    assert {"l0.weight", "l0.bn.weight", "l0.bn.running_var", "l1.0.weight", "l1.1.bias", "l4.weight"} <= set(
        a
    )
    assert "l0.bias" not in a  # conv followed by BN has no bias by default
    shared = a.keys() & b.keys()
    assert "l1.1.weight" in shared and "small_head.weight" in b
    assert all(a[k] == b[k] for k in shared)
    c = initializers(compile_layers(body, (1, 3, 16, 16), seed=10))
    assert c["l0.weight"] != a["l0.weight"]


def test_custom_io_names_and_where() -> None:
    model = compile_layers(["relu"], (1, 2, 3, 3), input_name="frame", output_name="probs", where="s.layers")
    assert [i.name for i in model.graph.input] == ["frame"] and [o.name for o in model.graph.output] == [
        "probs"
    ]
    with pytest.raises(InputError) as err:
        compile_layers(["relu", {"op": "nope"}], (1, 2, 3, 3), where="scenarios[1].layers")
    assert err.value.field == "scenarios[1].layers[1].op"


C4 = (1, 4, 4, 4)
BAD: list[tuple[Any, tuple[int, ...], str, str]] = [
    ([{"op": "foo"}], C4, "layers[0].op", "unknown op 'foo'; valid ops: conv, dwconv"),
    ([{"kernel": 3}], C4, "layers[0]", "missing 'op'"),
    ([42], C4, "layers[0]", "must be a mapping"),
    ([], C4, "layers", "non-empty list"),
    ("conv", C4, "layers", "non-empty list"),
    ([{"op": "conv"}], C4, "layers[0].out", "needs 'out'"),
    ([{"op": "conv", "out": 0}], C4, "layers[0].out", "positive int"),
    ([{"op": "conv", "out": True}], C4, "layers[0].out", "positive int"),
    ([{"op": "conv", "out": 2.5}], C4, "layers[0].out", "positive int"),
    ([{"op": "conv", "out": 8, "colour": 1}], C4, "layers[0].colour", "valid keys: act, bias, bn"),
    ([{"op": "conv", "out": 8, "kernel": 9, "pad": 0}], C4, "layers[0].kernel", "does not fit"),
    ([{"op": "conv", "out": 8, "kernel": [3]}], C4, "layers[0].kernel", "list [h, w]"),
    ([{"op": "conv", "out": 8, "stride": 0}], C4, "layers[0].stride", "positive"),
    ([{"op": "conv", "out": 8, "pad": -1}], C4, "layers[0].pad", "non-negative"),
    ([{"op": "conv", "out": 8, "pad": [1, 1, 1]}], C4, "layers[0].pad", "non-negative"),
    ([{"op": "conv", "out": 8, "groups": 3}], C4, "layers[0].groups", "must divide"),
    ([{"op": "conv", "out": 8, "bn": "yes"}], C4, "layers[0].bn", "true or false"),
    ([{"op": "conv", "out": 8, "act": "gelu"}], C4, "layers[0].act", "valid: none, relu"),
    ([{"op": "dwconv", "out": 8}], C4, "layers[0].out", "unknown key 'out'"),
    ([{"op": "maxpool", "kernel": 8}], C4, "layers[0].kernel", "does not fit"),
    ([{"op": "maxpool", "kernel": 2, "pad": 2}], C4, "layers[0].pad", "smaller than the kernel"),
    ([{"op": "avgpool", "ceil": 1}], C4, "layers[0].ceil", "true or false"),
    ([{"op": "upsample", "scale": 1.5}], C4, "layers[0].scale", "positive int"),
    ([{"op": "leakyrelu", "alpha": "big"}], C4, "layers[0].alpha", "number"),
    ([{"op": "fc", "out": 10}], C4, "layers[0].op", "2-D input"),
    (["gap", "flatten", {"op": "conv", "out": 3}], C4, "layers[2].op", "4-D input"),
    ([{"op": "relu", "name": "a"}, {"op": "relu", "name": "a"}], C4, "layers[1].name", "used twice"),
    ([{"op": "relu", "name": ""}], C4, "layers[0].name", "non-empty"),
    ([{"op": "relu", "name": 3}], C4, "layers[0].name", "non-empty"),
    ([{"op": "residual", "layers": []}], C4, "layers[0].layers", "non-empty list"),
    ([{"op": "residual", "layers": [{"op": "conv", "out": 8}]}], C4, "layers[0].layers", "same shape"),
    (
        [{"op": "residual", "layers": [{"op": "conv", "out": 4, "kernel": "x"}]}],
        C4,
        "layers[0].layers[0].kernel",
        "positive int",
    ),
    ([{"op": "concat_branches", "branches": [["relu"], []]}], C4, "layers[0].branches[1]", "non-empty"),
    ([{"op": "concat_branches", "branches": "relu"}], C4, "layers[0].branches", "list of layer lists"),
    (
        [{"op": "concat_branches", "branches": [[{"op": "maxpool"}], [{"op": "conv", "out": 4}]]}],
        C4,
        "layers[0].branches",
        "differ outside the channel axis",
    ),
    (
        [{"op": "concat_branches", "branches": [["relu"], [{"op": "nope"}]]}],
        C4,
        "layers[0].branches[1][0].op",
        "unknown op",
    ),
    (["relu"], (1, 4, 0, 4), "input_shape", "positive ints"),
    (["relu"], (1, 4, 4), "input_shape", "[N, C, H, W] or [N, F]"),
]


@pytest.mark.parametrize(("layers", "shape", "field", "message"), BAD)
def test_bad_layers(layers: Any, shape: tuple[int, ...], field: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        compile_layers(layers, shape)
    assert err.value.field == field
    assert message in err.value.detail
    assert "\n" not in str(err.value) and str(err.value).startswith(f"{field}: ")


def test_names_colliding_with_generated_ones_are_refused() -> None:
    with pytest.raises(InputError) as err:
        compile_layers([{"op": "conv", "out": 4, "bn": True, "name": "a"}, {"op": "bn", "name": "a.bn"}], C4)
    assert err.value.field == "layers[1]"


def test_layer_named_like_the_output_is_refused() -> None:
    with pytest.raises(InputError) as err:
        compile_layers([{"op": "relu", "name": "output"}, "sigmoid"], C4)
    assert err.value.field == "layers" and "output" in err.value.detail
