"""Detectors and segmenters nobody here wrote: torchvision's SSDlite320, RetinaNet, FCOS, DeepLabV3 and LRASPP
on MobileNetV3-Large, through both of PyTorch's exporters, with random weights.

The files under tests/data/torchvision/detect_segment were made by ``tools/export_torchvision.py --small``
(its docstring: torchvision's own classes at reduced width, so that each file is 1-3.5 MB). Every segmenter
and every detector's backbone + head runs in sbrs equal to ONNX Runtime running the file. A whole detector
(its transform, box decoding and NMS in the graph) exists only from the legacy exporter (the dynamo exporter
stops at torchvision's ``batched_nms``: ``GuardOnDataDependentSymNode``) and is refused, in one line naming
the first operator sbrs does not run: ``Greater`` of the score threshold, on data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from sbrs.app import load_app
from sbrs.errors import InputError
from sbrs.model import import_onnx
from sbrs.runtime import runtime_for
from tests.conftest import ort_session
from tests.runtime.conftest import assert_equivalent

DATA = Path(__file__).resolve().parents[1] / "data" / "torchvision" / "detect_segment"
#: Whole detectors: the node sbrs refuses (the first, in graph order, that the canonical form could not fold).
REFUSED = {
    "ssdlite320_mnv3_w0.25-legacy-320": "/model/Greater_19",
    "retinanet_mnv3_w0.25-legacy-256": "/model/Greater_4",
    "fcos_mnv3_w0.25-legacy-256": "/model/Greater_4",
}
RUNNING = sorted(path for path in DATA.glob("*.onnx") if path.stem not in REFUSED)


def test_the_committed_exports_are_there() -> None:
    names = {path.stem for path in DATA.glob("*.onnx")}
    for model, resolution in (("ssdlite320_mnv3_w0.25", 320), ("retinanet_mnv3_w0.25", 256),
                              ("fcos_mnv3_w0.25", 256)):
        assert {f"{model}_head-dynamo-{resolution}", f"{model}_head-legacy-{resolution}",
                f"{model}-legacy-{resolution}"} <= names
    for model in ("deeplabv3_mnv3_w0.25", "lraspp_mnv3_w0.25"):
        assert {f"{model}-dynamo-128", f"{model}-legacy-128"} <= names
    assert all(path.stat().st_size < 4_000_000 for path in DATA.glob("*.onnx"))


@pytest.mark.parametrize("stem", sorted(REFUSED))
def test_a_whole_detector_is_refused_in_one_line_naming_the_operator(stem: str) -> None:
    path = DATA / f"{stem}.onnx"
    with pytest.raises(InputError) as error:
        import_onnx(path)
    message = str(error.value)
    assert message.startswith(f"{path}: node '{REFUSED[stem]}': unsupported op 'Greater' (its inputs are not "
                              "constant once the app's input shape is fixed, so it could not be folded; re-export "
                              "with a newer opset or without that operation; supported: Abs, Add,"), message
    assert "\n" not in message
    assert {"Greater", "TopK", "NonZero", "GatherND", "If", "NonMaxSuppression"} <= _ops(onnx.load(path).graph)


def _ops(graph: onnx.GraphProto) -> set[str]:
    """Operators of ``graph`` and of its subgraphs (the NMS sits in an ``If`` branch)."""
    found = set()
    for node in graph.node:
        found.add(node.op_type)
        for attribute in node.attribute:
            for subgraph in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                found |= _ops(subgraph)
    return found


@pytest.mark.parametrize("path", RUNNING, ids=[p.stem for p in RUNNING])
def test_export_runs_in_sbrs_equal_to_onnx_runtime(path: Path, tmp_path: Path) -> None:
    source = onnx.load(path, load_external_data=False)
    data_input = source.graph.input[0]
    shape = [d.dim_value for d in data_input.type.tensor_type.shape.dim]
    app_file = tmp_path / "app.yaml"
    app_file.write_text(f"name: real\ninput: {{name: {data_input.name}, shape: {shape}, dtype: float32}}\n"
                        f"scenarios:\n  - {{name: only, model: {path}}}\n")
    app = load_app(app_file)
    frame = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    session = ort_session(path)
    want = dict(zip([o.name for o in session.get_outputs()], session.run(None, {data_input.name: frame}),
                    strict=True))
    with runtime_for(app, use_build=False) as runtime:
        got = runtime.infer(frame)
    assert_equivalent(got, want, path.stem)
    if path.stem.startswith(("deeplabv3", "lraspp")):
        assert got["out"].shape == (1, 21, *shape[2:])  # upsampled to the input in the graph
    else:
        assert got["cls_logits"].shape[:2] == got["bbox_regression"].shape[:2]
