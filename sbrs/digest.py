"""SHA-256 without OpenSSL on the path that runs a build.

``hashlib`` loads OpenSSL's libcrypto when it is imported, which costs a serving process about 3.5 MB of
resident memory (PSS, measured above a bare interpreter) for nothing it needs: ``sbrs run`` hashes a manifest
of a few kB and, only when a file's size or mtime changed, that file. CPython's own SHA-256 (the builtin
``_sha2`` module, ``_sha256`` before Python 3.12) gives the same digests, about 4.7x slower (144 against 670
MB/s here): so where ``hashlib`` is already imported (a build process, which hashes model files of hundreds of
MB; onnx imports it), or neither builtin exists, ``hashlib`` is used.
"""

from __future__ import annotations

import sys
from typing import IO, Any


def sha256(data: bytes = b"") -> Any:
    """A SHA-256 hash object (``update``, ``hexdigest``, ``digest``) fed ``data``."""
    if "hashlib" in sys.modules:
        return sys.modules["hashlib"].sha256(data)
    try:
        from _sha2 import sha256 as builtin  # Python 3.12 and later
    except ImportError:
        try:
            from _sha256 import sha256 as builtin  # Python 3.10, 3.11
        except ImportError:
            from hashlib import sha256 as builtin
    return builtin(data)


def file_sha256(stream: IO[bytes], chunk: int = 1 << 20) -> str:
    """The hex SHA-256 of everything left in the binary ``stream``."""
    digest = sha256()
    while block := stream.read(chunk):
        digest.update(block)
    return digest.hexdigest()
