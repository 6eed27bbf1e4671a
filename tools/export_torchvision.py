"""Export torchvision (and timm) CNNs with random weights through both of PyTorch's ONNX exporters (not run by
CI).

Needs torch and torchvision (timm for ``timm:`` models), which the project does not depend on: use a separate
virtual environment, e.g.

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch torchvision onnx onnxscript timm
    /tmp/torchenv/bin/python tools/export_torchvision.py OUT_DIR [--models resnet18,mobilenet_v2]
        [--resolution 224] [--exporters dynamo,legacy] [--opset 18] [--small]
    /tmp/torchenv/bin/python tools/export_torchvision.py OUT_DIR --models timm:ghostnet_100,timm:convnext_atto

A model named ``timm:NAME`` is ``timm.create_model(NAME, pretrained=False)``; its file is ``timm_NAME-...``.

The files under tests/data/torchvision were made with
``--models mobilenet_v3_small,shufflenet_v2_x0_5 --resolution 64 --small``, and the second head on the same
MobileNetV3 backbone with ``--models mobilenet_v3_small --resolution 64 --small --classes 5``.

Writes OUT_DIR/<model>-<exporter>-<resolution>.onnx (weights inside the file) with seeded random weights
(``weights=None``: nothing is downloaded). ``dynamo`` is ``torch.onnx.export(..., dynamo=True)``, PyTorch's
default exporter; ``legacy`` is the TorchScript-based one (``dynamo=False``, opset 17).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

MODELS = ("resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "squeezenet1_1",
          "shufflenet_v2_x1_0", "regnet_y_400mf", "densenet121", "googlenet")
#: The small files committed under tests/data/torchvision (CI checks them without torch).
TEST_MODELS = ("mobilenet_v3_small", "shufflenet_v2_x0_5")


def export(name: str, exporter: str, resolution: int, out: Path, opset: int, small: bool = False,
           classes: int | None = None) -> Path:
    import torch

    torch.manual_seed(0)
    if name.startswith("timm:"):
        import timm

        model = timm.create_model(name.removeprefix("timm:"), pretrained=False).eval()
        return _export(model, name.replace(":", "_"), exporter, resolution, out, opset)
    import torchvision

    options: dict[str, object] = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    if small:  # the files committed for CI: a few MB in all
        options["num_classes"] = 10
    if classes is not None:  # another head on the same (seeded) backbone
        options["num_classes"] = classes
        if name.startswith("mobilenet_v3"):
            options.update(width_mult=0.5, reduced_tail=True)
    model = getattr(torchvision.models, name)(weights=None, **options).eval()
    head = "" if classes is None else f"-{classes}classes"
    return _export(model, f"{name}{head}", exporter, resolution, out, opset)


def _export(model: object, stem: str, exporter: str, resolution: int, out: Path, opset: int) -> Path:
    import torch

    example = torch.randn(1, 3, resolution, resolution)
    path = out / f"{stem}-{exporter}-{resolution}.onnx"
    with torch.no_grad():
        if exporter == "dynamo":
            program = torch.onnx.export(model, (example,), dynamo=True, opset_version=opset, external_data=False)
            program.save(str(path), external_data=False)
        else:
            torch.onnx.export(model, (example,), str(path), dynamo=False, opset_version=17,
                              input_names=["input"], output_names=["logits"])
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--exporters", default="dynamo,legacy")
    parser.add_argument("--opset", type=int, default=18, help="opset of the dynamo exporter")
    parser.add_argument("--classes", type=int, default=None, help="classes of the head (default: the model's)")
    parser.add_argument("--small", action="store_true",
                        help="10 classes, MobileNetV3 at width 0.5 with a reduced tail (the files in tests/data)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.models.split(","):
        for exporter in args.exporters.split(","):
            try:
                path = export(name, exporter, args.resolution, args.out, args.opset, args.small, args.classes)
                print(f"{path} {path.stat().st_size / 1e6:.1f} MB")
            except Exception as exc:  # report and go on with the next model
                failed += 1
                print(f"{name} {exporter}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
