"""sbrs: scenario-based run-time switching of CNNs sharing layers, weights and one memory arena."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sbrs.app import App
    from sbrs.runtime import Runtime

__version__ = "0.1.0"


def load_app(path: str | Path) -> App:
    """Load an app YAML: validate it and import every scenario's CNN (see ``sbrs.app.load_app``)."""
    from sbrs.app import load_app as _load_app

    return _load_app(path)


def runtime_for(app: App | str | Path, *, use_build: bool = True, **options: Any) -> Runtime:
    """The runtime of an app: given its path, its current build opened as ``sbrs run`` opens it (built first in a
    child process when missing); given a loaded ``App``, its current build, else compiled in memory (see
    ``sbrs.runtime.open.runtime_for``)."""
    from sbrs.runtime import runtime_for as _runtime_for

    return _runtime_for(app, use_build=use_build, **options)
