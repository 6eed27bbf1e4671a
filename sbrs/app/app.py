"""``load_app``: an app file → its validated config and the CNN model of every scenario."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sbrs.app.config import AppConfig, ScenarioConfig, load_app_config
from sbrs.errors import InputError
from sbrs.log import Progress
from sbrs.model import CnnModel, memory_figures, params_bytes
from sbrs.model.cnn import WeightStore

logger = logging.getLogger(__name__)


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
        if scenario.input_size is not None and tuple(scenario.input_size) != tuple(config.input.shape[2:]):
            from sbrs.model.input_size import with_input_resize

            with_input_resize(onnx_model, model_input, config.input.shape, scenario.input_size,
                              "input_size", scenario.model_path)
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
    """Load an app YAML: validate it, resolve and import every scenario's CNN (put in canonical form first when
    it needs it, ``sbrs.model.canonical``), and check that each scenario's ``postprocess:`` fits its outputs."""
    from sbrs.app.postprocess import check_model_outputs

    config = load_app_config(path)
    progress = Progress(logger, f"importing the models of app '{config.name}'", len(config.scenarios),
                        unit="models")
    models = {}
    held: dict[str, np.ndarray] = {}  # every weight by content digest, as the first scenario holding it has it
    for done, scenario in enumerate(config.scenarios, 1):
        logger.debug("scenario %s: importing %s", scenario.name, scenario.model_path)
        models[scenario.name] = _held_once(_import_scenario(config, scenario), held)
        progress(done)
    check_model_outputs(config, models)
    return App(config, models)


def _held_once(model: CnnModel, held: dict[str, np.ndarray]) -> CnnModel:
    """``model`` with each weight that an earlier scenario holds too (equal by value: one content digest) taken
    from that scenario, so that its own copy is freed: scenarios of one family each read from their own file
    held the same weights once per scenario (60 ResNet-18 variants: 1190 MB, of which 46 MB distinct)."""
    duplicates = [digest for digest, array in model.weights.items() if held.setdefault(digest, array) is not array]
    if not duplicates:
        return model
    return replace(model, weights=WeightStore((digest, held[digest]) for digest in model.weights))
