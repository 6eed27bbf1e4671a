"""The on-disk cache for generated ONNX models (zoo exports, compiled inline layers).

Location: ``$SBRS_CACHE_DIR``, else ``$XDG_CACHE_HOME/sbrs``, else ``~/.cache/sbrs``. Files are named by a
content key and written atomically, so concurrent processes never see half a file; an entry that changed
after it was written is made again (``cached_file``). A cache folder that cannot be written is a one-line
``InputError`` naming it (set ``SBRS_CACHE_DIR`` to a writable folder).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sbrs import digest
from sbrs.errors import InputError


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
    return digest.sha256(text.encode()).hexdigest()[:16]


def write_atomic(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` all at once (a temporary file renamed); an ``InputError`` naming the path
    when it cannot be written (a folder in the way, no permission, a full disk)."""
    import tempfile  # only when a file is written: not on the run path of a build

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(f"cannot write here: {exc.strerror or exc} ({exc.filename or path.parent})",
                         file=str(path)) from None
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException as exc:
        Path(temporary).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise InputError(f"cannot write here: {exc.strerror or exc}", file=str(path)) from None
        raise
    return path


def cached_file(kind: str, name: str, key: str, produce: Callable[[], bytes], suffix: str = ".onnx") -> Path:
    """``<cache>/<kind>/<name>-<key><suffix>``, produced on first use.

    Beside each entry, ``<entry>.stamp`` records its size and modification time when it was written; an entry
    that no longer matches (replaced, truncated, edited) or has no stamp is produced again, so the cache can
    never feed a run something else than what its key stands for. (A stat, not a hash of the content: it is
    checked at every start, and hashing every cached model would cost the drone app ~0.4 s.)
    """
    path = cache_dir(kind) / f"{name}-{key}{suffix}"
    stamp = path.with_name(path.name + ".stamp")
    try:
        fresh = path.is_file() and stamp.is_file() and stamp.read_text(encoding="ascii") == _stamp_of(path)
    except (OSError, UnicodeDecodeError):
        fresh = False
    if not fresh:
        content = produce()  # its own errors (a bad zoo option, say) are the user's, not the cache's
        try:
            write_atomic(path, content)
            write_atomic(stamp, _stamp_of(path).encode("ascii"))
        except InputError as exc:
            raise InputError(f"the model cache cannot be written: {exc.detail}; set SBRS_CACHE_DIR to a "
                             "writable folder", file=exc.file) from None
    return path


def _stamp_of(path: Path) -> str:
    status = path.stat()
    return f"{status.st_size} {status.st_mtime_ns}\n"
