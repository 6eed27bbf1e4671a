"""One process at a time in a folder's critical step: an exclusive ``flock`` on the folder itself.

Used where two sbrs processes may replace the same entry of a folder at once: two servers on one stale control
socket (``sbrs.server.server.bind_unix_socket``), two builds of one app swapping their folder in
(``sbrs.artifact.write``). A lock on the folder's own descriptor needs no lock file beside the entry, and ends
with the process if it dies. A folder the user may write to but not read cannot be opened to be locked: then
the step runs unlocked, as it did before there was a lock.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (module docstring) for the ``with`` block."""
    try:
        descriptor: int | None = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        descriptor = None
    try:
        if descriptor is not None:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        if descriptor is not None:
            os.close(descriptor)  # and the lock with it
