"""sbrs: scenario-based run-time switching of CNNs sharing layers, weights and one memory arena."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sbrs.app import App

__version__ = "0.1.0"


def load_app(path: str | Path) -> App:
    """Load an app YAML: validate it and import every scenario's CNN (see ``sbrs.app.load_app``)."""
    from sbrs.app import load_app as _load_app

    return _load_app(path)
