"""App and scenario files: validation, model resolution, and the loaded ``App``.

``settings``: what an app file says, resolved (``AppConfig`` and its dataclasses); ``config``: reading and
validating an app file into them (``load_app_config``; ``schema``: the files' pydantic schemas, ``yaml_lines``:
their lines for errors); ``derive``: scenarios derived from others; ``preprocess``, ``frames`` and
``postprocess``: pictures into inputs, frame folders, outputs into results; ``app``: the loaded ``App``."""

from typing import TYPE_CHECKING

from sbrs._lazy import lazy_exports

if TYPE_CHECKING:
    from sbrs.app.app import App, load_app
    from sbrs.app.config import load_app_config
    from sbrs.app.settings import AppConfig, InputSpec, ScenarioConfig

__all__ = ["App", "AppConfig", "InputSpec", "ScenarioConfig", "load_app", "load_app_config"]

__getattr__, __dir__ = lazy_exports(globals(), {
    "App": "sbrs.app.app",
    "load_app": "sbrs.app.app",
    "AppConfig": "sbrs.app.settings",
    "InputSpec": "sbrs.app.settings",
    "ScenarioConfig": "sbrs.app.settings",
    "load_app_config": "sbrs.app.config",
})
