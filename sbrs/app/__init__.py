"""App and scenario files: validation, model resolution, and the loaded ``App``."""

from sbrs.app.app import App, load_app
from sbrs.app.config import AppConfig, InputSpec, ScenarioConfig, load_app_config

__all__ = ["App", "AppConfig", "InputSpec", "ScenarioConfig", "load_app", "load_app_config"]
