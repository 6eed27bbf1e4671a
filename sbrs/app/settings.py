"""What an app file says, resolved: ``AppConfig`` and the dataclasses it is made of (its input and how pictures
become that input, its scenarios, runtime options, policy, metrics and environment).

Plain data, read by every later stage and by the run of a build (``sbrs.artifact.read`` makes them from the
manifest). Reading and validating an app file into them is ``sbrs.app.config`` (YAML and pydantic, which a
compiled build needs neither of); ``sbrs.app.config`` names these too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sbrs.app.environment import EnvironmentConfig
from sbrs.outputs.spec import DEFAULT_SPEC, PostprocessSpec

#: ``input.preprocess`` (``Preprocess``, applied by ``sbrs.app.preprocess.Preprocessor``).
RESIZE_MODES: tuple[str, ...] = ("stretch", "letterbox", "center-crop")
COLOR_ORDERS: tuple[str, ...] = ("RGB", "BGR")
IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)
#: ``pad_value`` where the app gives none: ultralytics' grey.
DEFAULT_PAD = 114


@dataclass(frozen=True)
class Preprocess:
    """``input.preprocess`` of the app file, resolved (module docstring). ``mean`` and ``std`` None: the default
    for the input's channels (ImageNet's for 3, 0 and 1 for one)."""

    resize: str = "stretch"
    pad_value: int = DEFAULT_PAD
    colors: str = "RGB"
    scale: float = 1 / 255
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    def means(self, channels: int) -> tuple[float, ...]:
        if self.mean is not None:
            return self.mean * channels if len(self.mean) == 1 else self.mean
        return IMAGENET_MEAN if channels == 3 else (0.0,) * channels

    def stds(self, channels: int) -> tuple[float, ...]:
        if self.std is not None:
            return self.std * channels if len(self.std) == 1 else self.std
        return IMAGENET_STD if channels == 3 else (1.0,) * channels


DEFAULT_PREPROCESS = Preprocess()


def preprocess_from_dict(data: dict[str, Any] | None) -> Preprocess:
    """A ``Preprocess`` from its ``dataclasses.asdict`` form (a build's manifest); None: the default."""
    if not data:
        return DEFAULT_PREPROCESS
    values = dict(data)
    for key in ("mean", "std"):
        if values.get(key) is not None:
            values[key] = tuple(float(v) for v in values[key])
    return Preprocess(**values)



@dataclass(frozen=True)
class InputSpec:
    """The app's ``input:``; ``preprocess``: how pictures become this input (``sbrs.app.preprocess``)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    preprocess: Preprocess = DEFAULT_PREPROCESS


@dataclass(frozen=True)
class RequirementSet:
    """Thesis Section 5.6: (r_a, r_t, r_m, r_e)."""

    accuracy: float
    throughput: float
    memory: float
    energy: float


@dataclass(frozen=True)
class DeclaredCharacteristics:
    """What the app's author declares about a scenario (thesis Table 5.4 columns); not measured by sbrs."""

    accuracy: float | None = None
    fps: float | None = None
    energy_j: float | None = None
    memory_mb: float | None = None


@dataclass(frozen=True)
class ScenarioConfig:
    """``derived_from``, ``quantize`` and ``calibration`` are set for a scenario derived from another
    (``from:`` + ``quantize:``, ``sbrs.app.derive``): the source's name, the mode, and the absolute folder of the
    calibration frames (None: synthetic frames, or a mode that needs none)."""

    name: str
    defined_in: str
    model_kind: str  # "onnx" | "layers" | "zoo" | "derived"
    model_path: str
    requirements: RequirementSet
    characteristics: DeclaredCharacteristics
    postprocess: PostprocessSpec = DEFAULT_SPEC  # its own ``postprocess:``, else the app's, else top-5
    derived_from: str | None = None
    quantize: str | None = None
    calibration: str | None = None
    #: ``input_size: [H, W]``: the scenario's own input height and width (frames are resized to it), or None
    input_size: tuple[int, int] | None = None


#: ``runtime.share_min_mb`` and ``runtime.switch_steps`` where the app leaves them out, on the CPU provider and on
#: a GPU one (the first provider decides, as it decides where the arena lives: ``sbrs.runtime.device``). On a GPU
#: every execution unit is a session with a provider instance of its own, about 140 MiB of GPU memory each
#: (measured on an H200: drone's 20 units 3576 MiB, its 5 scenarios as one unit each 1512 MiB, plain ONNX
#: Runtime 1586), and a call the host synchronises with: so there a run of layers is shared only when its
#: weights outweigh a session, and a frame is one step (docs/MEASUREMENTS.md, "On a GPU").
UNIT_DEFAULTS_CPU = (1.0, 4)
UNIT_DEFAULTS_GPU = (140.0, 1)
#: ``runtime.session`` where the app leaves it out, by the first provider as above. On a GPU provider one graph holds
#: one provider instance where the units hold one each, so the build measures both forms and keeps the one that runs
#: as fast (``auto``, ``sbrs.compile.session_choice``). On the CPU one graph saves 1-2 MB of an app's memory, its
#: switch waits for the whole frame in flight, and the build's choice between forms within a few percent of each
#: other follows the machine's load (docs/MEASUREMENTS.md, "``runtime.session: auto``"): units there.
SESSION_DEFAULT_CPU = "units"
SESSION_DEFAULT_GPU = "auto"


def first_on_cpu(providers: Sequence[str]) -> bool:
    """Whether ``providers``' first, which decides the defaults above, is the CPU provider."""
    return providers[0] == "CPUExecutionProvider"


def default_session(providers: Sequence[str]) -> str:
    """``runtime.session`` of an app that leaves it out and runs on ``providers`` (the first decides)."""
    return SESSION_DEFAULT_CPU if first_on_cpu(providers) else SESSION_DEFAULT_GPU


@dataclass(frozen=True)
class RuntimeOptions:
    """``runtime:`` of the app. ``share_min_mb``: the least weight memory a run of steps must hold to be shared
    by scenarios as one execution unit (``sbrs.compile.units``); smaller runs are compiled into each scenario's
    own units. ``switch_steps``: under SBRS-TP, how many steps of similar work a frame is cut into at most, so
    a switch waits for about 1/switch_steps of the old frame. Both None where the app leaves them out: the
    provider's defaults then (``UNIT_DEFAULTS_CPU``, ``UNIT_DEFAULTS_GPU``; :attr:`unit_share_min_mb`,
    :attr:`unit_switch_steps`). ``on_switch``: what a switch does to the frame in
    flight, ``finish`` it on the old scenario, ``cancel`` it and run it again on the new one, or ``resume`` it on
    the new one from the layers both share (``sbrs.runtime.engine.Runtime``). ``threads``: intra-op threads of a
    session running a whole unit (default: every core); ``threads_scope``: ``session`` (each session its own
    threads, nothing process-wide) or ``process`` (ONNX Runtime's global pool, refusing the application's own
    sessions; ``sbrs.ort_env``). ``streams``: frames in flight at once in ``process`` (``sbrs.runtime.streams``):
    1, one frame at a time; 2, two, each in an arena of its own, on one-thread sessions (execution units) or as
    the search chooses (by parts); ``auto`` (default): for execution units, what ``sbrs build`` measured faster
    (``sbrs.compile.unit_streams``; one stream without a build), by parts the search's choice.
    ``session``: ``units``, the execution units above; ``one``, the app as one ONNX graph run by one session
    (``sbrs.compile.one_graph``); ``auto``, whichever ``sbrs build`` measured as fast on this machine
    (``sbrs.compile.session_choice``; units without a build). Where the app leaves it out, the first provider's
    default (``default_session``): units on the CPU, auto on a GPU provider."""

    providers: tuple[str, ...]
    threads: int | None
    granularity: str
    transition: str
    share_min_mb: float | None = None
    switch_steps: int | None = None
    on_switch: str = "finish"
    threads_scope: str = "session"
    streams: int | str = "auto"
    session: str = "units"

    @property
    def unit_share_min_mb(self) -> float:
        """``share_min_mb``, or the default of the app's first provider."""
        return self._unit_defaults()[0] if self.share_min_mb is None else self.share_min_mb

    @property
    def unit_switch_steps(self) -> int:
        """``switch_steps``, or the default of the app's first provider."""
        return self._unit_defaults()[1] if self.switch_steps is None else self.switch_steps

    def _unit_defaults(self) -> tuple[float, int]:
        return UNIT_DEFAULTS_CPU if first_on_cpu(self.providers) else UNIT_DEFAULTS_GPU

    def max_streams(self, *, by_parts: bool, measured: int | None = None) -> int:
        """The most frames a runtime keeps in flight (``sbrs.runtime.streams``), the one rule for the search,
        the plan and the runtime. One where a switch gives the frame in flight up or resumes it (``on_switch``)
        or the app asks for one (``streams: 1``). Else, by parts, two unless the app keeps its sessions to one
        thread (``threads: 1``), the search choosing between one and two; execution units: two where the app
        asks for them (``streams: 2``: their sessions then have one thread each), and under ``auto`` the
        build's ``measured`` choice (``sbrs.compile.unit_streams``), one where there is none."""
        if self.on_switch != "finish" or self.streams == 1:
            return 1
        if by_parts:
            return 1 if self.threads is not None and self.threads < 2 else 2
        if self.streams == 2:
            return 2
        return measured or 1


@dataclass(frozen=True)
class BatteryRule:
    """``policy.battery[i]``: below battery level ``below`` force ``scenario``, or rank by ``requirements``."""

    below: float
    scenario: str | None = None
    requirements: RequirementSet | None = None


#: What a temperature may be, in °C (an environment value, a ``policy.temperature`` threshold).
TEMPERATURE_RANGE_C: tuple[float, float] = (-273.15, 1000.0)


@dataclass(frozen=True)
class TemperatureRule:
    """``policy.temperature[i]``: above ``above`` °C force ``scenario``, or rank by ``requirements``."""

    above: float
    scenario: str | None = None
    requirements: RequirementSet | None = None


@dataclass(frozen=True)
class PolicyConfig:
    """The app's ``policy:`` section, resolved (semantics in ``sbrs.control.policy``).

    ``battery`` is sorted by ``below`` (lowest first), ``temperature`` by ``above`` (highest first).
    ``default_requirements`` is None only in configs built by hand; ``load_app_config`` fills in the initial
    scenario's requirements when the file gives none.
    """

    battery: tuple[BatteryRule, ...] = ()
    battery_hysteresis: float = 0.05
    fps_hysteresis: float = 0.1
    high_power: tuple[str, ...] = ()
    default_requirements: RequirementSet | None = None
    temperature: tuple[TemperatureRule, ...] = ()
    temperature_hysteresis: float = 5.0


@dataclass(frozen=True)
class MetricsConfig:
    """The app's ``metrics:`` section: where ``sbrs run`` serves Prometheus metrics (off while ``port`` is None).

    ``address`` must be a loopback address unless ``allow_remote`` is set (see ``is_loopback_host``).
    """

    port: int | None = None
    address: str = "127.0.0.1"
    allow_remote: bool = False


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (127.0.0.0/8, ::1); False for any other name or address."""
    text = host.strip().strip("[]")
    if text.lower() in ("localhost", "localhost."):
        return True
    try:
        import ipaddress  # only a --listen address needs it

        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class AppConfig:
    name: str
    path: str
    input: InputSpec
    adaptive: tuple[str, ...]
    initial: str
    scenarios: tuple[ScenarioConfig, ...]
    runtime: RuntimeOptions
    memory_limit_mb: float | None
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)
    #: ``source:`` of the app file (``sbrs run``'s frames without ``--source``): a URI, a device, or a path
    #: made absolute from the app file's folder; None: none given
    source: str | None = None

    def scenario(self, name: str) -> ScenarioConfig:
        for scenario in self.scenarios:
            if scenario.name == name:
                return scenario
        raise KeyError(name)

    @property
    def scenario_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.scenarios)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
