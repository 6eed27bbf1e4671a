"""A scenario at its own input size (app.yaml ``input_size: [H, W]``): the frame is resized inside the model.

Frames arrive at the app's ``input.shape``; a scenario that runs at another height and width gets an ONNX
``Resize`` (mode ``linear``, ``half_pixel`` coordinates, no antialias) in front of its first layer, so the
resize is a layer of the scenario like any other (planned in the arena, run by ONNX Runtime, switched under
SBRS-TP) and the scenario's output equals ONNX Runtime running that ``Resize`` and then the model. The
model file may have a symbolic height and width (a dynamic-axes export; several scenarios at different sizes
can share it, and so share every weight) or be exported at the scenario's size.

The rewrite works on the model as read (``sbrs.model.onnx_file``): only the graph input's shape, the input's
consumers and two small tensors change; the mapped weights are not touched.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from sbrs.errors import InputError

#: The Resize this rewrite inserts; ``roi`` and ``scales`` are omitted (its ``sizes`` input gives the size).
RESIZE_ATTRIBUTES = {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}
#: The opset from which Resize takes ``sizes`` with ``roi`` and ``scales`` left out.
MIN_OPSET = 13


def resized_name(input_name: str, size: Sequence[int]) -> str:
    """The name of the resized frame inside the scenario's model."""
    return f"{input_name}.resized_{size[0]}x{size[1]}"


def with_input_resize(model: onnx.ModelProto, input_name: str, frame_shape: Sequence[int],
                      size: Sequence[int], where: str, source: str | None = None) -> onnx.ModelProto:
    """``model`` (changed in place and returned) reading frames of ``frame_shape`` (N, C, H, W) through a Resize
    to ``size`` (H, W). The model's input must be 4-D with the frame's N and C; ``where`` names the scenario's
    ``input_size`` field in errors, ``source`` the model's file."""
    opset = next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), 0)
    if opset < MIN_OPSET:
        raise InputError(f"{where}: a scenario at its own input size needs a model of opset {MIN_OPSET} or later "
                         f"(this one: opset {opset}); export it again with a newer opset", file=source)
    graph = model.graph
    value = next(entry for entry in graph.input if entry.name == input_name)
    dims = value.type.tensor_type.shape.dim
    if len(dims) != 4:
        raise InputError(f"{where}: the model's input '{input_name}' has {len(dims)} dimensions; input_size needs "
                         f"an image input [N, C, H, W]", file=source)
    height, width = (int(size[0]), int(size[1]))
    model_shape = [dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else None for dim in dims]
    for axis, (declared, wanted) in enumerate(zip(model_shape, (frame_shape[0], frame_shape[1], height, width),
                                                  strict=True)):
        if declared is not None and declared != wanted:
            what = "the app's input.shape" if axis < 2 else "input_size"
            raise InputError(f"{where}: the model's input '{input_name}' dim {axis} is {declared}, {what} says "
                             f"{wanted}", file=source)

    resized = resized_name(input_name, (height, width))
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name == input_name:
                node.input[index] = resized
    for output in graph.output:
        if output.name == input_name:
            raise InputError(f"{where}: the model's input '{input_name}' is also its output; nothing to resize for",
                             file=source)
    sizes_name = f"{resized}.sizes"
    sizes = np.array([frame_shape[0], frame_shape[1], height, width], dtype=np.int64)
    graph.initializer.append(numpy_helper.from_array(sizes, sizes_name))
    resize = helper.make_node("Resize", [input_name, "", "", sizes_name], [resized], name=resized,
                              **RESIZE_ATTRIBUTES)
    graph.node.insert(0, resize)
    for dim, extent in zip(dims, frame_shape, strict=True):
        dim.Clear()
        dim.dim_value = int(extent)
    # shapes a file states for the input's consumers assumed the old input; inference derives them again
    del graph.value_info[:]
    return model


def plain_model_file(model_path: str, frame_shape: Sequence[int], size: Sequence[int] | None, folder: str) -> str:
    """The file plain ONNX Runtime runs for a scenario, as a user without sbrs would: the scenario's own model,
    or, for a scenario with its own ``size`` other than the frame's, that model behind the same Resize, written
    into ``folder`` (the comparator of ``sbrs bench``)."""
    if size is None or tuple(size) == tuple(frame_shape[2:]):
        return model_path
    import os

    model = onnx.load(model_path)
    initializers = {entry.name for entry in model.graph.initializer}
    input_name = next(entry.name for entry in model.graph.input if entry.name not in initializers)
    with_input_resize(model, input_name, frame_shape, size, "input_size", model_path)
    path = os.path.join(folder, f"{os.path.basename(model_path)}.resized_{size[0]}x{size[1]}.onnx")
    onnx.save(model, path)
    return path
