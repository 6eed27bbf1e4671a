"""What a frame's outputs become for the user: post-processing (top-k, detections, raw, the user's function)
and the ``.npz`` files of ``sbrs run --save-outputs``. Below the app stage and the runtime: numpy only."""

from typing import TYPE_CHECKING

from sbrs._lazy import lazy_exports

if TYPE_CHECKING:
    from sbrs.outputs.detections import Detections, class_aware_nms, detect
    from sbrs.outputs.postprocess import FrameMeta, PostprocessError, PostProcessor, postprocessors_for
    from sbrs.outputs.save import OutputSaver
    from sbrs.outputs.spec import DetectionsSpec, FunctionSpec, PostprocessSpec, RawSpec, TopKSpec

__all__ = ["Detections", "DetectionsSpec", "FrameMeta", "FunctionSpec", "OutputSaver", "PostProcessor",
           "PostprocessError", "PostprocessSpec", "RawSpec", "TopKSpec", "class_aware_nms", "detect",
           "postprocessors_for"]

__getattr__, __dir__ = lazy_exports(globals(), {
    "Detections": "sbrs.outputs.detections",
    "class_aware_nms": "sbrs.outputs.detections",
    "detect": "sbrs.outputs.detections",
    "FrameMeta": "sbrs.outputs.postprocess",
    "PostprocessError": "sbrs.outputs.postprocess",
    "PostProcessor": "sbrs.outputs.postprocess",
    "postprocessors_for": "sbrs.outputs.postprocess",
    "OutputSaver": "sbrs.outputs.save",
    "DetectionsSpec": "sbrs.outputs.spec",
    "FunctionSpec": "sbrs.outputs.spec",
    "PostprocessSpec": "sbrs.outputs.spec",
    "RawSpec": "sbrs.outputs.spec",
    "TopKSpec": "sbrs.outputs.spec",
})
