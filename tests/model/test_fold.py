"""BatchNormalization and activation folding (``sbrs.model.fold``): one layer, one tensor, ORT's outputs."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from onnx import helper, numpy_helper

from sbrs import zoo
from sbrs.model import import_model, params_bytes, unique_params
from sbrs.model.fold import fold_bands, fold_model
from sbrs.model.onnx_export import to_onnx
from tests.conftest import ort_session


def outputs(proto, frame: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    session = ort_session(proto)
    return session.run(None, {session.get_inputs()[0].name: frame})[0]


@pytest.mark.parametrize(("name", "options"), [("mobilenet_v2", {"resolution": 64, "width": 0.5}),
                                              ("resnet18", {"resolution": 64}),
                                              ("efficientnet_b0", {"resolution": 64})])
def test_folded_model_computes_what_ort_computes(name: str, options: dict[str, object]) -> None:
    """Invariant 1's tolerance, 1e-5 * max(1, max |ref|), against ORT running the unfolded file."""
    proto = zoo.build(name, **options)
    model = import_model(proto, name=name)
    folded = fold_model(model)
    ops = Counter(layer.op for layer in folded.layers)
    assert ops["BatchNormalization"] == 0 and ops["Conv"] == Counter(layer.op for layer in model.layers)["Conv"]
    assert fold_model(folded) is folded  # idempotent
    assert len(folded.tensors) < len(model.tensors) and params_bytes([folded]) < params_bytes([model])
    frame = np.random.default_rng(0).standard_normal(model.tensors[model.graph_inputs[0]].shape).astype(np.float32)
    want = outputs(proto, frame)
    got = outputs(to_onnx(folded), frame)
    assert float(np.abs(got - want).max()) <= 1e-5 * max(1.0, float(np.abs(want).max()))


def test_conv_bn_relu6_is_one_layer_and_one_tensor() -> None:
    model = import_model(zoo.build("mobilenet_v2", resolution=64), name="m")
    folded = fold_model(model)
    stem = folded.layer("features.0.0")
    assert [f.op for f in stem.fused] == ["Clip"] and stem.outputs == ("features.0.2",)
    assert "features.0.0" not in folded.tensors and "features.0.1" not in folded.tensors
    assert {e.tensor for e in folded.edges} <= set(folded.tensors)
    project = folded.layer("features.1.conv.1")  # the projection conv: BN folded, no activation after it
    assert not project.fused and len(project.params) == 2
    assert fold_bands(model, folded, {"features.0.0": 4, "features.0.1": 4, "features.0.2": 4, "nope": 1}) == \
        {"features.0.0": 4, "nope": 1}


def test_equal_conv_bn_weights_stay_equal_after_folding() -> None:
    """Algorithm 5 finds shared weights by value: two scenarios equal before folding are equal after it."""
    full = import_model(zoo.build("mobilenet_v2", resolution=64, width=0.5), name="full")
    lite = import_model(zoo.build("mobilenet_v2", resolution=64, width=0.5, drop_blocks=[4, 5]), name="lite")
    a, b = fold_model(full), fold_model(lite)
    shared = [layer.name for layer in full.layers if layer.op == "Conv" and any(
        other.name == layer.name and other.param_digests == layer.param_digests for other in lite.layers)]
    assert len(shared) > 10
    for name in shared:
        assert a.layer(name).param_digests == b.layer(name).param_digests, name
    # shared parameters count once, as before folding
    saved_before = params_bytes([full]) + params_bytes([lite]) - params_bytes([full, lite])
    saved_after = params_bytes([a]) + params_bytes([b]) - params_bytes([a, b])
    assert saved_after > 0.9 * saved_before
    assert set(unique_params([a])) & set(unique_params([b]))


def _tiny(two_readers: bool, output_is_conv: bool) -> tuple[object, list[str]]:
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")]
    for n, v in (("g", 1.0), ("b", 0.0), ("m", 0.1), ("v", 1.0)):
        inits.append(numpy_helper.from_array((v + 0.1 * rng.standard_normal(4)).astype(np.float32), n))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["r"], name="relu")]
    outs = ["r"]
    if two_readers:
        nodes.append(helper.make_node("Add", ["c", "r"], ["y"], name="add"))
        outs = ["y"]
    if output_is_conv:
        outs.append("c")
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info(o, 1, None) for o in outs], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), outs


@pytest.mark.parametrize(("two_readers", "output_is_conv", "layers"),
                         [(False, False, 1), (True, False, 4), (False, True, 3)])
def test_a_conv_read_elsewhere_is_not_folded(two_readers: bool, output_is_conv: bool, layers: int) -> None:
    proto, _ = _tiny(two_readers, output_is_conv)
    model = import_model(proto, name="t")
    folded = fold_model(model)
    assert len(folded.compute_layers) == layers
    frame = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    session = ort_session(proto)
    mine = ort_session(to_onnx(folded))
    for want, got in zip(session.run(None, {"x": frame}), mine.run(None, {"x": frame}), strict=True):
        assert float(np.abs(got - want).max()) <= 1e-5 * max(1.0, float(np.abs(want).max()))
