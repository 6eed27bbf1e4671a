"""App and scenario files: validation, model resolution, and the loaded ``App``."""

from typing import TYPE_CHECKING

from sbrs._lazy import lazy_exports

if TYPE_CHECKING:
    from sbrs.app.app import App, load_app
    from sbrs.app.config import AppConfig, InputSpec, ScenarioConfig, load_app_config

__all__ = ["App", "AppConfig", "InputSpec", "ScenarioConfig", "load_app", "load_app_config"]

__getattr__, __dir__ = lazy_exports(globals(), {
    "App": "sbrs.app.app",
    "load_app": "sbrs.app.app",
    "AppConfig": "sbrs.app.config",
    "InputSpec": "sbrs.app.config",
    "ScenarioConfig": "sbrs.app.config",
    "load_app_config": "sbrs.app.config",
})
