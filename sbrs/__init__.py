"""sbrs: scenario-based run-time switching of CNNs sharing layers, weights and one memory arena."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sbrs.app import App
    from sbrs.app.config import AppConfig, InputSpec
    from sbrs.run.sources import FrameSource
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


def open_source(source: str | None, app: App | AppConfig | InputSpec | str | Path, **options: Any) -> FrameSource:
    """The frames of ``source`` (a folder, a video file, a camera, a stream URI, a GStreamer pipeline; None: the
    app's ``source:``), pre-processed for ``app``'s input (an ``App``, its config, its ``InputSpec``, or the
    app file's path): an iterable that ``Runtime.process`` takes, to close when done (a context manager). Options
    as ``sbrs.run.frames.open_source`` takes them (``realtime``, ``reconnect``, ``keep_pictures``, ...)."""
    from sbrs.app.config import InputSpec, load_app_config
    from sbrs.run.frames import open_source as _open_source

    if isinstance(app, (str, Path)):
        app = load_app_config(app)
    config = getattr(app, "config", app)
    spec = config if isinstance(config, InputSpec) else config.input
    if source is None and not isinstance(config, InputSpec):
        source = config.source
    return _open_source(source, spec, **options)
