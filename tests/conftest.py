"""Test-wide settings: a private model cache, so tests never write into the user's ~/.cache."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
APPS = sorted((REPO / "apps").glob("*.yaml"))


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    previous = os.environ.get("SBRS_CACHE_DIR")
    os.environ["SBRS_CACHE_DIR"] = str(tmp_path_factory.mktemp("sbrs-cache"))
    yield
    if previous is None:
        os.environ.pop("SBRS_CACHE_DIR", None)
    else:
        os.environ["SBRS_CACHE_DIR"] = previous
