"""``sbrs export APP.yaml -o APP.onnx``: the app as one ONNX model any ONNX runtime that runs ``If`` can serve.

The model is ``sbrs.compile.one_graph``'s: the app's input under its own name plus ``scenario`` (int64 scalar,
the scenario's index in the app file from 0), every weight once, ``If`` where the scenarios' paths split. Beside
it a JSON sidecar (``APP.json``: ``OneGraphSpec.to_dict``) names each scenario's index and outputs. The model is
checked with ``onnx.checker`` (full check, shape inference included) before it is written; it is written to a
temporary file beside the target and renamed into place, so a failed export leaves no half-written file.
Models whose weights pass protobuf's 2 GB limit keep them in ``APP.onnx.data`` beside the model (ONNX external
data).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from sbrs.errors import InputError

#: Above this many bytes of weights the model keeps them as external data (protobuf refuses messages of 2 GiB).
EXTERNAL_DATA_BYTES = 1_800_000_000


def sidecar_path(output: Path) -> Path:
    """Where the sidecar of the model ``output`` goes: ``APP.json`` beside ``APP.onnx``."""
    return output.with_suffix(".json")


def export_app(app_path: str | Path, output: str | Path) -> dict[str, Any]:
    """Write ``app_path``'s one graph to ``output`` and its sidecar beside it; returns the sidecar (with the paths
    written under ``files``). An unwritable target is an ``InputError`` naming it, raised before any work."""
    import onnx

    from sbrs.app import load_app
    from sbrs.compile.one_graph import one_graph

    target = Path(output)
    sidecar = sidecar_path(target)
    if target.suffix == ".json":
        raise InputError(f"{target}: the model's file must not end in .json (its sidecar is written beside it as "
                         f"{sidecar.name})", field="--output")
    _check_writable(target)
    app = load_app(app_path)
    graph = one_graph(app)
    onnx.checker.check_model(graph.model, full_check=True)
    external = graph.spec.params_bytes > EXTERNAL_DATA_BYTES
    description = graph.spec.to_dict() | {"model": target.name}
    if external:
        description["external_data"] = f"{target.name}.data"
    try:
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as staging:
            staged = Path(staging) / target.name
            if external:
                onnx.save_model(graph.model, str(staged), save_as_external_data=True, all_tensors_to_one_file=True,
                                location=f"{target.name}.data", size_threshold=1024)
                os.replace(Path(staging) / f"{target.name}.data", target.with_name(f"{target.name}.data"))
            else:
                onnx.save_model(graph.model, str(staged))
            (Path(staging) / sidecar.name).write_text(json.dumps(description, indent=1) + "\n", encoding="utf-8")
            os.replace(staged, target)
            os.replace(Path(staging) / sidecar.name, sidecar)
    except OSError as exc:
        raise InputError(f"cannot write {target}: {exc.strerror or exc}", field="--output") from None
    return description | {"files": [str(target), str(sidecar)]}


def _check_writable(target: Path) -> None:
    """``InputError`` unless a file can be made in ``target``'s folder and ``target`` is not a folder."""
    folder = target.parent
    if target.is_dir():
        raise InputError(f"cannot write {target}: it is a folder", field="--output")
    if not folder.is_dir():
        raise InputError(f"cannot write {target}: no folder {folder}", field="--output")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise InputError(f"cannot write {target}: {exc.strerror or exc}", field="--output") from None
