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

Detectors and segmenters (``DETECTORS``, ``SEGMENTERS``; ``weights=None, weights_backbone=None``):

- a detector is exported whole (``<model>``: its transform, backbone, head, box decoding and post-processing;
  outputs the first image's ``boxes``, ``scores``, ``labels``) and as backbone + head (``<model>_head``: the
  normalised image in, the head's raw maps out: ``cls_logits``, ``bbox_regression`` and, for FCOS,
  ``bbox_ctrness``), since the whole model's post-processing may use operators sbrs does not run;
- a segmenter is exported whole (its ``out`` map, upsampled to the input size).

``--small`` builds the same torchvision classes at reduced width, so that the files stay in the 1-3 MB
range committed under tests/data/torchvision (the full models are 13-136 MB): MobileNetV3-Large at width
0.25 everywhere; SSDlite320 as ``ssdlite320_mobilenet_v3_large`` builds it, with 21 classes; RetinaNet and FCOS on a
32-channel FPN over that backbone's last three stages plus P6/P7 (torchvision's heads, anchors, box coders and
post-processing; the full models use ResNet-50 with a 256-channel FPN); DeepLabV3 with a 48-channel ASPP
head; LRASPP as torchvision builds it. The committed detector and segmenter files were made with

    python tools/export_torchvision.py tests/data/torchvision --small --resolution 128 \
        --models retinanet_resnet50_fpn,fcos_resnet50_fpn,deeplabv3_mobilenet_v3_large,lraspp_mobilenet_v3_large
    python tools/export_torchvision.py tests/data/torchvision --small --resolution 320 \
        --models ssdlite320_mobilenet_v3_large

and the full-size ones measured in docs/MEASUREMENTS.md with the same commands without ``--small``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

MODELS = ("resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "squeezenet1_1",
          "shufflenet_v2_x1_0", "regnet_y_400mf", "densenet121", "googlenet")
#: The small files committed under tests/data/torchvision (CI checks them without torch).
TEST_MODELS = ("mobilenet_v3_small", "shufflenet_v2_x0_5")
DETECTORS = ("ssdlite320_mobilenet_v3_large", "retinanet_resnet50_fpn", "fcos_resnet50_fpn")
SEGMENTERS = ("deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large")
#: File stems of the reduced-width builds of ``--small`` (what they are: module docstring).
SMALL_STEMS = {"ssdlite320_mobilenet_v3_large": "ssdlite320_mnv3_w0.25",
               "retinanet_resnet50_fpn": "retinanet_mnv3_w0.25", "fcos_resnet50_fpn": "fcos_mnv3_w0.25",
               "deeplabv3_mobilenet_v3_large": "deeplabv3_mnv3_w0.25", "lraspp_mobilenet_v3_large": "lraspp_mnv3_w0.25"}
SMALL_WIDTH = 0.25
SMALL_FPN_CHANNELS = 32
SMALL_ASPP_CHANNELS = 48
SMALL_SSD_CLASSES = 21  # SSDlite's classification head is most of its weights: 91 COCO classes make it 6 MB


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


def _export(model: object, stem: str, exporter: str, resolution: int, out: Path, opset: int,
            output_names: tuple[str, ...] = ("logits",)) -> Path:
    import torch

    example = torch.randn(1, 3, resolution, resolution)
    path = out / f"{stem}-{exporter}-{resolution}.onnx"
    with torch.no_grad():
        if exporter == "dynamo":
            program = torch.onnx.export(model, (example,), dynamo=True, opset_version=opset, external_data=False,
                                        output_names=list(output_names))
            program.save(str(path), external_data=False)
        else:
            torch.onnx.export(model, (example,), str(path), dynamo=False, opset_version=17,
                              input_names=["input"], output_names=list(output_names))
    return path


def task_model(name: str, small: bool, resolution: int) -> object:
    """Detector or segmenter ``name`` with random weights: torchvision's own builder, or (``small``) the same
    classes at reduced width (module docstring; the small RetinaNet and FCOS resize images to ``resolution``)."""
    import torch
    from torchvision.models import detection, mobilenet_v3_large, segmentation

    torch.manual_seed(0)
    if not small:
        builder = getattr(detection, name, None) or getattr(segmentation, name)
        return builder(weights=None, weights_backbone=None).eval()
    if name == "ssdlite320_mobilenet_v3_large":
        return _small_ssdlite().eval()
    if name in SEGMENTERS:
        from torchvision.models.segmentation.deeplabv3 import ASPP, _deeplabv3_mobilenetv3
        from torchvision.models.segmentation.lraspp import _lraspp_mobilenetv3

        backbone = mobilenet_v3_large(weights=None, dilated=True, width_mult=SMALL_WIDTH)
        if name == "lraspp_mobilenet_v3_large":
            return _lraspp_mobilenetv3(backbone, 21).eval()
        model = _deeplabv3_mobilenetv3(backbone, 21, False)
        width = SMALL_ASPP_CHANNELS
        inplanes = model.classifier[0].convs[0][0].in_channels
        model.classifier = torch.nn.Sequential(  # DeepLabHead, 48 channels wide instead of 256
            ASPP(inplanes, [12, 24, 36], out_channels=width), torch.nn.Conv2d(width, width, 3, padding=1, bias=False),
            torch.nn.BatchNorm2d(width), torch.nn.ReLU(), torch.nn.Conv2d(width, 21, 1))
        return model.eval()
    from torchvision.models.detection.backbone_utils import BackboneWithFPN
    from torchvision.ops.feature_pyramid_network import LastLevelP6P7

    features = mobilenet_v3_large(weights=None, width_mult=SMALL_WIDTH).features
    stages = [0] + [i for i, block in enumerate(features) if getattr(block, "_is_cn", False)] + [len(features) - 1]
    returned = stages[-3:]
    backbone = BackboneWithFPN(features, {str(index): str(k) for k, index in enumerate(returned)},
                               [features[index].out_channels for index in returned], SMALL_FPN_CHANNELS,
                               extra_blocks=LastLevelP6P7(SMALL_FPN_CHANNELS, SMALL_FPN_CHANNELS))
    detector = detection.RetinaNet if name == "retinanet_resnet50_fpn" else detection.FCOS
    return detector(backbone, num_classes=91, min_size=resolution, max_size=resolution).eval()


def _small_ssdlite() -> object:
    """``ssdlite320_mobilenet_v3_large`` as torchvision builds it, its backbone at ``SMALL_WIDTH`` and
    ``SMALL_SSD_CLASSES`` classes."""
    from functools import partial

    import torch
    from torchvision.models import mobilenet_v3_large
    from torchvision.models.detection import _utils as det_utils
    from torchvision.models.detection.anchor_utils import DefaultBoxGenerator
    from torchvision.models.detection.ssd import SSD
    from torchvision.models.detection.ssdlite import SSDLiteHead, _mobilenet_extractor, _normal_init

    norm_layer = partial(torch.nn.BatchNorm2d, eps=0.001, momentum=0.03)
    backbone = mobilenet_v3_large(weights=None, norm_layer=norm_layer, reduced_tail=True, width_mult=SMALL_WIDTH)
    _normal_init(backbone)
    backbone = _mobilenet_extractor(backbone, 6, norm_layer)
    size = (320, 320)
    anchors = DefaultBoxGenerator([[2, 3] for _ in range(6)], min_ratio=0.2, max_ratio=0.95)
    channels = det_utils.retrieve_out_channels(backbone, size)
    return SSD(backbone, anchors, size, SMALL_SSD_CLASSES,
               head=SSDLiteHead(channels, anchors.num_anchors_per_location(), SMALL_SSD_CLASSES, norm_layer),
               score_thresh=0.001, nms_thresh=0.55, detections_per_img=300, topk_candidates=300,
               image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])


def export_task_model(name: str, exporter: str, resolution: int, out: Path, opset: int, small: bool) -> list[Path]:
    """A detector whole and as backbone + head, or a segmenter whole (module docstring)."""
    import torch

    model = task_model(name, small, resolution)
    stem = SMALL_STEMS[name] if small else name

    class Segmentation(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x)["out"]

    class WholeDetector(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            found = self.model([x[0]])[0]
            return found["boxes"], found["scores"], found["labels"]

    class BackboneAndHead(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            features = list(self.model.backbone(x).values())
            maps = self.model.head(features)
            return tuple(maps[key] for key in HEAD_OUTPUTS if key in maps)

    if name in SEGMENTERS:
        return [_export(Segmentation().eval(), stem, exporter, resolution, out, opset, ("out",))]
    paths = []
    for wrapper, suffix, names in ((WholeDetector(), "", ("boxes", "scores", "labels")),
                                   (BackboneAndHead(), "_head", HEAD_OUTPUTS)):
        if suffix:
            with torch.no_grad():
                produced = len(wrapper.eval()(torch.randn(1, 3, resolution, resolution)))
            names = HEAD_OUTPUTS[:produced]
        try:
            paths.append(_export(wrapper.eval(), f"{stem}{suffix}", exporter, resolution, out, opset, names))
        except Exception as exc:  # report and go on with the other part
            print(f"{stem}{suffix} {exporter}: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}",
                  file=sys.stderr)
    return paths


HEAD_OUTPUTS = ("cls_logits", "bbox_regression", "bbox_ctrness")


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
                if name in DETECTORS + SEGMENTERS:
                    paths = export_task_model(name, exporter, args.resolution, args.out, args.opset, args.small)
                else:
                    paths = [export(name, exporter, args.resolution, args.out, args.opset, args.small, args.classes)]
                for path in paths:
                    print(f"{path} {path.stat().st_size / 1e6:.1f} MB")
            except Exception as exc:  # report and go on with the next model
                failed += 1
                print(f"{name} {exporter}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
