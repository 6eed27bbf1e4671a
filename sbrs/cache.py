"""The on-disk cache for generated ONNX models (zoo exports, compiled inline layers).

Location: ``$SBRS_CACHE_DIR``, else ``$XDG_CACHE_HOME/sbrs``, else ``~/.cache/sbrs``. Files are named by a
content key and written atomically, so concurrent processes never see half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cache_dir(kind: str) -> Path:
    root = os.environ.get("SBRS_CACHE_DIR")
    if root:
        base = Path(root)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg) if xdg else Path.home() / ".cache") / "sbrs"
    return base / kind


def content_key(*parts: Any) -> str:
    """Short stable hash of JSON-serialisable parts."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_atomic(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def cached_file(kind: str, name: str, key: str, produce: Callable[[], bytes], suffix: str = ".onnx") -> Path:
    """``<cache>/<kind>/<name>-<key><suffix>``, produced on first use."""
    path = cache_dir(kind) / f"{name}-{key}{suffix}"
    if not path.is_file():
        write_atomic(path, produce())
    return path
