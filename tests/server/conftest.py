"""Short socket directories (Unix socket paths are limited to ~107 bytes; pytest's tmp_path can be longer)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="sbrs-t", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)
