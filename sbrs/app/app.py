"""``load_app``: an app file → its validated config and the CNN model of every scenario."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbrs.app.config import AppConfig, ScenarioConfig, load_app_config
from sbrs.errors import InputError
from sbrs.model import CnnModel, memory_figures, params_bytes

if TYPE_CHECKING:
    from sbrs.runtime import Runtime


@dataclass(frozen=True)
class App:
    """A loaded app: config plus one imported ``CnnModel`` per scenario (in the config's order)."""

    config: AppConfig
    models: dict[str, CnnModel]

    @property
    def name(self) -> str:
        return self.config.name

    def model(self, scenario: str) -> CnnModel:
        return self.models[scenario]

    def runtime(self, *, use_build: bool = True, **options: Any) -> Runtime:
        """A ``sbrs.runtime.Runtime`` running this app's scenarios (options: see ``Runtime``).

        With ``use_build`` (default), the app's ``sbrs build`` folder is used when it is current, intact, made
        from this very configuration and compiled for the options asked; otherwise (no build, a stale or
        damaged one, other options) the runtime is compiled from the models in memory, which this object
        already holds, so nothing is refused here (``sbrs run`` refuses a bad build instead).

        With ``memory_limit_mb`` set and reuse alone above it, the runtime runs band calls
        (``sbrs.runtime.reduced.ReducedRuntime``, the same API): from the build, or compiled here from the
        band heights saved in the app's plan file when it is current and made for this limit, else searched
        now (``sbrs build``'s Algorithm 9 with its default options).
        """
        from sbrs.runtime import Runtime

        if use_build:
            from sbrs.build.artifact import MANIFEST, build_dir, load_build, runtime_of_build

            if (build_dir(self.config.path) / MANIFEST).is_file():
                try:
                    build = load_build(self.config.path)
                except InputError:
                    build = None
                if build is not None and _same_config(build.config, self.config) and _build_fits(build, options):
                    return runtime_of_build(build, **options)
        if self.config.memory_limit_mb is not None:
            from sbrs.runtime.reduced import app_reduction, fit_reduction, runtime_from_app

            reduction = app_reduction(self)
            if not reduction["early_exit"]:
                options.pop("granularity", None)
                return runtime_from_app(self, fit_reduction(self, reduction), **options)
        return Runtime(self, **options)

    def summary(self) -> dict[str, Any]:
        """Per-scenario model figures (thesis Eq. 2.6, naive buffers) and the app's unique-parameter total."""
        return {
            "app": self.config.name,
            "params_bytes": params_bytes(self.models.values()),
            "scenarios": {
                name: {"layers": len(model.compute_layers), "edges": len(model.edges),
                       **memory_figures(model).__dict__}
                for name, model in self.models.items()
            },
        }


def _same_config(built: AppConfig, loaded: AppConfig) -> bool:
    """Equal configurations up to where files lie (paths are compared by name: the build's fingerprint
    already vouches for their content, and generated models are named by a key of their content)."""
    from dataclasses import replace

    def placeless(config: AppConfig) -> AppConfig:
        return replace(config, path=Path(config.path).name, scenarios=tuple(
            replace(s, defined_in=Path(s.defined_in).name, model_path=Path(s.model_path).name)
            for s in config.scenarios))

    return placeless(built) == placeless(loaded)


def _build_fits(build: Any, options: dict[str, Any]) -> bool:
    mode = options.get("transition") or build.config.runtime.transition
    arena = options.get("transition_arena") or (build.transition_arena if mode == build.transition else
                                                "shadow" if mode == "sbrs-tp" else "shared")
    return bool(build.matches(options.get("granularity"), mode, arena))


def _import_scenario(config: AppConfig, scenario: ScenarioConfig) -> CnnModel:
    from sbrs.model.onnx_file import read_onnx
    from sbrs.model.onnx_import import import_model

    loaded = read_onnx(scenario.model_path)
    onnx_model = loaded.model
    initializers = {init.name for init in onnx_model.graph.initializer}
    data_inputs = [value for value in onnx_model.graph.input if value.name not in initializers]
    where = f"{scenario.defined_in}: scenario '{scenario.name}'"
    if len(data_inputs) != 1:
        raise InputError(f"{where}: the model has {len(data_inputs)} data inputs; an app has exactly one"
                         f" ({scenario.model_path})")
    model_input = data_inputs[0].name
    try:  # the model read above is imported in place: each file is read once, its weights mapped
        model = import_model(onnx_model, source=scenario.model_path, name=scenario.name,
                             input_shapes={model_input: config.input.shape}, copy=False,
                             threads=config.runtime.threads, arrays=loaded.arrays)
    except InputError as exc:
        raise InputError(f"scenario '{scenario.name}': {exc.detail}", file=exc.file, line=exc.line,
                         field=exc.field) from None
    spec = model.tensors[model_input]
    if spec.dtype != config.input.dtype:
        raise InputError(f"{where}: input dtype {spec.dtype} differs from the app's input dtype {config.input.dtype}")
    return model


def load_app(path: str | Path) -> App:
    """Load an app YAML: validate it, resolve and import every scenario's CNN."""
    config = load_app_config(path)
    return App(config, {s.name: _import_scenario(config, s) for s in config.scenarios})
