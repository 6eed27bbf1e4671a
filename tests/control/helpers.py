"""Hand-built ``AppConfig``s for policy and controller tests (no model files are read)."""

from __future__ import annotations

from sbrs.app.config import (
    AppConfig,
    BatteryRule,
    DeclaredCharacteristics,
    InputSpec,
    PolicyConfig,
    RequirementSet,
    RuntimeOptions,
    ScenarioConfig,
)

ACCURACY_ONLY = RequirementSet(1.0, 0.0, 0.0, 0.0)


def requirements(accuracy: float = 0.0, throughput: float = 0.0, memory: float = 0.0,
                 energy: float = 0.0) -> RequirementSet:
    return RequirementSet(accuracy, throughput, memory, energy)


def make_config(scenarios: dict[str, DeclaredCharacteristics], *, initial: str | None = None,
                battery: tuple[BatteryRule, ...] = (), battery_hysteresis: float = 0.05,
                fps_hysteresis: float = 0.1, high_power: tuple[str, ...] = (),
                default_requirements: RequirementSet | None = None) -> AppConfig:
    """An app with the given scenarios (declared characteristics) and policy; model paths are dummies."""
    entries = tuple(ScenarioConfig(name, "test", "onnx", f"/nonexistent/{name}.onnx", ACCURACY_ONLY, characteristics)
                    for name, characteristics in scenarios.items())
    policy = PolicyConfig(tuple(sorted(battery, key=lambda rule: rule.below)), battery_hysteresis, fps_hysteresis,
                          high_power, default_requirements)
    return AppConfig(name="test", path="/nonexistent/app.yaml", input=InputSpec("input", (1, 3, 8, 8), "float32"),
                     adaptive=("I", "O", "par"), initial=initial or next(iter(scenarios)), scenarios=entries,
                     runtime=RuntimeOptions(("CPUExecutionProvider",), None, "auto", "sbrs-tp"), memory_limit_mb=None,
                     policy=policy)


def three_scenarios(**policy: object) -> AppConfig:
    """accurate (slow, hungry), balanced, frugal (fast, cheap): a simple, well-ordered trade-off."""
    return make_config({
        "accurate": DeclaredCharacteristics(accuracy=80.0, fps=10.0, energy_j=0.4, memory_mb=300.0),
        "balanced": DeclaredCharacteristics(accuracy=75.0, fps=30.0, energy_j=0.2, memory_mb=200.0),
        "frugal": DeclaredCharacteristics(accuracy=70.0, fps=60.0, energy_j=0.1, memory_mb=100.0),
    }, **policy)  # type: ignore[arg-type]
