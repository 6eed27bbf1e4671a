"""The scenario policy: last known environment values → the scenario to run, with the reason why.

The app's ``policy:`` section (``sbrs.app.schema.PolicyEntry``, resolved to ``PolicyConfig``) and the
scenarios' requirement sets and characteristics (thesis Section 5.6 and Table 5.4) drive one deterministic
decision, ``Policy.decide(env, current, measured)``. Rules, in order:

1. Battery. ``policy.battery`` thresholds are *active* while the battery is low: a threshold becomes active
   when ``battery < below`` and stays active until ``battery > below + hysteresis.battery`` (so a level
   hovering at ``below`` does not flap). The lowest active threshold governs: if it names a ``scenario``,
   that scenario is chosen, whatever else the environment says (``satisfied`` still reports whether it
   meets ``min_fps`` and the energy budget); if it names ``requirements``, those weights rank the scenarios
   in rule 3 unless the environment gives explicit ones. An unknown battery level activates nothing.
1b. Temperature (°C, e.g. a board's hottest thermal zone). ``policy.temperature`` thresholds are active while
   it is hot: a threshold becomes active when ``temperature > above`` and stays active until ``temperature <
   above − hysteresis.temperature``. The highest active threshold governs, as a battery threshold does. When
   both a battery and a temperature threshold govern, the battery's comes first: its scenario, if it names
   one, else the temperature threshold's scenario, else the battery threshold's requirements. An unknown
   temperature activates nothing.
2. Constraints. With ``min_fps`` given, candidates are the scenarios whose fps ≥ ``min_fps``; the current
   scenario stays a candidate while its fps ≥ ``min_fps · (1 − hysteresis.fps)``. With ``energy_budget_j``
   given (per frame), candidates are further limited to ``energy_j ≤ energy_budget_j``. A scenario whose
   fps (or energy) is unknown cannot show that it meets the constraint and is not a candidate.
   If no scenario meets ``min_fps``, the fastest known scenario is chosen; if some meet ``min_fps`` but none
   of them the energy budget, the most frugal of those is chosen. Either way ``satisfied`` is False and the
   reason names the failing constraint.
3. Ranking (thesis Section 5.6). Among candidates, the highest score wins::

       score(s) = r_a·g_acc(s) + r_t·g_fps(s) + r_m·g_mem(s) + r_e·g_energy(s)

   where g is the min-max normalised value over *all* scenarios that have it (higher is better: ``norm``
   for accuracy and fps, ``1 − norm`` for memory and energy; 1 for each scenario when all values are equal)
   and a missing value scores 0. Normalising over all scenarios, not only the candidates, keeps a
   scenario's score independent of the constraints. The weights r are the environment's explicit
   ``requirements``, else those of the governing battery threshold, else ``policy.default_requirements``
   (default: the initial scenario's requirement set). Ties (scores equal to 9 decimals) go to the higher
   accuracy, then to the earlier scenario in the app file. With only ``min_fps`` given and weights
   (1, 0, 0, 0) this is "the most accurate scenario whose fps meets it".

Values: a *measured* value (``measured[scenario][characteristic]``, e.g. the runtime's fps, the plan's
modelled memory) is preferred over the author's *declared* one; ``Decision.used["values"]`` says which was
used for every scenario and characteristic (characteristics: ``accuracy``, ``fps``, ``memory_mb``,
``energy_j``).

State: the policy's only state is the set of active battery and temperature thresholds (their hysteresis);
every other input is given to ``decide``. Explicit switch requests bypass the policy (``PolicyController`` applies
them as they come); the next environment update is evaluated afresh and may switch away again.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from sbrs.app.settings import (
    TEMPERATURE_RANGE_C,
    AppConfig,
    BatteryRule,
    PolicyConfig,
    RequirementSet,
    TemperatureRule,
)
from sbrs.errors import InputError

CHARACTERISTICS: tuple[str, ...] = ("accuracy", "fps", "memory_mb", "energy_j")
ENVIRONMENT_FIELDS: tuple[str, ...] = ("battery", "min_fps", "energy_budget_j", "requirements", "temperature")
REQUIREMENT_FIELDS: tuple[str, ...] = ("accuracy", "throughput", "memory", "energy")
TIE_DIGITS = 9  # scores equal to this many decimals tie

MeasuredValues = Mapping[str, Mapping[str, float]]
"""Measured characteristics by scenario, e.g. ``{"fast": {"fps": 61.2, "memory_mb": 40.1}}``."""


def finite_number(value: Any) -> float | None:
    """``value`` as a finite float, or None when it is not a finite real number (bools are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def check_requirements(value: Any, field: str = "requirements") -> RequirementSet:
    """A requirement set from a ``RequirementSet`` or a mapping of weights in [0, 1] summing to 1."""
    if isinstance(value, RequirementSet):
        value = asdict(value)
    if not isinstance(value, Mapping):
        raise InputError(f"expected an object of weights ({', '.join(REQUIREMENT_FIELDS)}), got "
                         f"{type(value).__name__}", field=field)
    weights: dict[str, float] = dict.fromkeys(REQUIREMENT_FIELDS, 0.0)
    for key, raw in value.items():
        if key not in weights:
            raise InputError(f"unknown key {str(key)[:40]!r} (allowed: {', '.join(REQUIREMENT_FIELDS)})", field=field)
        number = finite_number(raw)
        if number is None or not 0.0 <= number <= 1.0:
            raise InputError(f"weight must be a number in [0, 1], got {_short(raw)}", field=f"{field}.{key}")
        weights[key] = number
    total = sum(weights.values())
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        raise InputError(f"requirement weights must sum to 1, they sum to {total:g}", field=field)
    return RequirementSet(**weights)


def check_environment_value(name: str, value: Any) -> float | RequirementSet | None:
    """Validate one environment value; None clears it. Raises ``InputError`` naming the field."""
    if name not in ENVIRONMENT_FIELDS:
        raise InputError(f"unknown environment value (allowed: {', '.join(ENVIRONMENT_FIELDS)})", field=name)
    if value is None:
        return None
    if name == "requirements":
        return check_requirements(value)
    number = finite_number(value)
    if number is None:
        raise InputError(f"expected a finite number, got {_short(value)}", field=name)
    if name == "battery" and not 0.0 <= number <= 1.0:
        raise InputError(f"battery level must be in [0, 1], got {number:.10g}", field=name)
    if name == "temperature":
        low, high = TEMPERATURE_RANGE_C
        if not low <= number <= high:
            raise InputError(f"temperature in °C must be in [{low:g}, {high:g}], got {number:.10g}", field=name)
        return number
    if number < 0.0:
        raise InputError(f"must be ≥ 0, got {number:.10g}", field=name)
    return number


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class Environment:
    """The last known environment values; None means unknown (no constraint). ``temperature`` in °C."""

    battery: float | None = None
    min_fps: float | None = None
    energy_budget_j: float | None = None
    requirements: RequirementSet | None = None
    temperature: float | None = None

    def __post_init__(self) -> None:
        for item in fields(self):
            checked = check_environment_value(item.name, getattr(self, item.name))
            object.__setattr__(self, item.name, checked)

    def updated(self, changes: Mapping[str, Any]) -> Environment:
        """A copy with ``changes`` applied (a value of None clears that field); values are validated."""
        for name in changes:
            if name not in ENVIRONMENT_FIELDS:
                raise InputError(f"unknown environment value (allowed: {', '.join(ENVIRONMENT_FIELDS)})", field=name)
        return replace(self, **dict(changes))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Decision:
    """The policy's choice: ``scenario``, a one-line ``reason``, whether every constraint is met, and what it
    used (``values``: measured/declared per scenario and characteristic; ``requirements`` and where they came
    from; ``battery_rule``; ``temperature_rule``; ``candidates`` and their ``scores``)."""

    scenario: str
    reason: str
    satisfied: bool
    used: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "reason": self.reason, "satisfied": self.satisfied, "used": dict(self.used)}


Values = dict[str, dict[str, float]]


def rank_scenarios(requirements: RequirementSet, values: Values, names: tuple[str, ...] | list[str],
                   normalise_over: tuple[str, ...] | list[str] | None = None) -> list[tuple[str, float]]:
    """Thesis Section 5.6 scores of ``names``, best first (module docstring, rule 3).

    ``values[s]`` holds the known characteristics of scenario ``s``; normalisation runs over
    ``normalise_over`` (default: every scenario in ``values``). Returns ``(name, score)`` pairs.
    """
    pool = list(normalise_over if normalise_over is not None else values)
    terms = (("accuracy", requirements.accuracy, True), ("fps", requirements.throughput, True),
             ("memory_mb", requirements.memory, False), ("energy_j", requirements.energy, False))
    scores = dict.fromkeys(names, 0.0)
    for key, weight, higher_is_better in terms:
        known = [values[s][key] for s in pool if key in values.get(s, {})]
        if weight == 0.0 or not known:
            continue
        low, high = min(known), max(known)
        for name in names:
            if key not in values.get(name, {}):
                continue
            if high == low:
                goodness = 1.0
            else:
                norm = (values[name][key] - low) / (high - low)
                goodness = norm if higher_is_better else 1.0 - norm
            scores[name] += weight * goodness
    order = {name: index for index, name in enumerate(names)}

    def key(name: str) -> tuple[float, float, int]:
        return (-round(scores[name], TIE_DIGITS), -values.get(name, {}).get("accuracy", -math.inf), order[name])

    return [(name, scores[name]) for name in sorted(names, key=key)]


class Policy:
    """Chooses a scenario from environment values (module docstring). Thread-safe."""

    def __init__(self, config: AppConfig) -> None:
        self.scenarios: tuple[str, ...] = config.scenario_names
        self.config: PolicyConfig = config.policy
        self._rules: tuple[BatteryRule, ...] = tuple(sorted(config.policy.battery, key=lambda rule: rule.below))
        self._hot_rules: tuple[TemperatureRule, ...] = tuple(sorted(config.policy.temperature,
                                                                    key=lambda rule: -rule.above))
        self.default_requirements: RequirementSet = (config.policy.default_requirements
                                                     or config.scenario(config.initial).requirements)
        self._declared: dict[str, dict[str, float]] = {
            s.name: {key: float(value) for key, value in asdict(s.characteristics).items() if value is not None}
            for s in config.scenarios}
        self._lock = threading.Lock()
        self._active: frozenset[float] = frozenset()
        self._hot: frozenset[float] = frozenset()

    @property
    def active_thresholds(self) -> tuple[float, ...]:
        """The battery thresholds active now, lowest first."""
        return tuple(sorted(self._active))

    @property
    def active_temperature_thresholds(self) -> tuple[float, ...]:
        """The temperature thresholds active now, highest first."""
        return tuple(sorted(self._hot, reverse=True))

    def reset(self) -> None:
        """Forget the hysteresis state (battery and temperature thresholds)."""
        with self._lock:
            self._active = frozenset()
            self._hot = frozenset()

    def values(self, measured: MeasuredValues | None = None) -> tuple[Values, dict[str, dict[str, str]]]:
        """Each scenario's characteristics, measured over declared, and where each value came from."""
        values: Values = {}
        sources: dict[str, dict[str, str]] = {}
        for name in self.scenarios:
            values[name], sources[name] = {}, {}
            for key in CHARACTERISTICS:
                number = finite_number((measured or {}).get(name, {}).get(key))
                if number is not None:
                    values[name][key], sources[name][key] = number, "measured"
                elif key in self._declared[name]:
                    values[name][key], sources[name][key] = self._declared[name][key], "declared"
        return values, sources

    def _battery_rule(self, battery: float | None) -> BatteryRule | None:
        """Update the active thresholds for ``battery``; the governing (lowest active) rule."""
        margin = self.config.battery_hysteresis
        active = set()
        if battery is not None:
            for rule in self._rules:
                if battery < rule.below or (rule.below in self._active and battery <= rule.below + margin):
                    active.add(rule.below)
        self._active = frozenset(active)
        return next((rule for rule in self._rules if rule.below in active), None)

    def _temperature_rule(self, temperature: float | None) -> TemperatureRule | None:
        """Update the active temperature thresholds; the governing (highest active) rule."""
        margin = self.config.temperature_hysteresis
        active = set()
        if temperature is not None:
            for rule in self._hot_rules:
                if temperature > rule.above or (rule.above in self._hot and temperature >= rule.above - margin):
                    active.add(rule.above)
        self._hot = frozenset(active)
        return next((rule for rule in self._hot_rules if rule.above in active), None)

    def decide(self, env: Environment, current: str, measured: MeasuredValues | None = None) -> Decision:
        """The scenario for ``env`` when ``current`` runs now (module docstring for the rules)."""
        with self._lock:
            rule = self._battery_rule(env.battery)
            hot = self._temperature_rule(env.temperature)
        values, sources = self.values(measured)
        used: dict[str, Any] = {"battery_rule": None if rule is None else rule.below,
                                "temperature_rule": None if hot is None else hot.above, "values": sources}
        forced = None
        if rule is not None and rule.scenario is not None:
            forced = rule.scenario, f"{self._battery_text(env.battery, rule)}: forces {rule.scenario}"
        elif hot is not None and hot.scenario is not None:
            forced = hot.scenario, f"{self._temperature_text(env.temperature, hot)}: forces {hot.scenario}"
        if forced is not None:
            scenario, reason = forced
            failing = self._failing(scenario, env, current, values)
            return Decision(scenario, reason + (f" ({failing})" if failing else ""), not failing, used)

        if env.requirements is not None:
            weights, origin = env.requirements, "explicit"
        elif rule is not None and rule.requirements is not None:
            weights, origin = rule.requirements, f"battery below {rule.below:g}"
        elif hot is not None and hot.requirements is not None:
            weights, origin = hot.requirements, f"temperature above {hot.above:g} °C"
        else:
            weights, origin = self.default_requirements, "default"
        used["requirements"] = asdict(weights)
        used["requirements_from"] = origin

        candidates = list(self.scenarios)
        if env.min_fps is not None:
            candidates = [s for s in candidates if self._meets_fps(s, env.min_fps, current, values)]
            if not candidates:
                return self._fallback(env, current, values, used, "fps")
        if env.energy_budget_j is not None:
            frugal = [s for s in candidates if values[s].get("energy_j", math.inf) <= env.energy_budget_j]
            if not frugal:
                return self._fallback(env, current, values, used, "energy", candidates)
            candidates = frugal

        ranking = rank_scenarios(weights, values, candidates, normalise_over=self.scenarios)
        used["candidates"] = [name for name, _ in ranking]
        used["scores"] = {name: round(score, 6) for name, score in ranking}
        best, score = ranking[0]
        constraints = self._constraint_text(env)
        among = f"{len(candidates)} of {len(self.scenarios)} scenarios meeting {constraints}" if constraints \
            else f"all {len(self.scenarios)} scenarios"
        return Decision(best, f"ranked by {origin} requirements among {among}: {best} scores {score:.3f}", True, used)

    def _battery_text(self, battery: float | None, rule: BatteryRule) -> str:
        """Why ``rule`` is active: the battery is below its level, or has not yet risen past its hysteresis
        (a reason saying 0.18 "is below 0.15" would be false)."""
        if battery is not None and battery < rule.below:
            level, below = _apart(battery, rule.below)
            return f"battery {level} is below {below}"
        release = rule.below + self.config.battery_hysteresis
        return f"battery {battery:g} has not risen above {release:g} since it fell below {rule.below:g} (hysteresis)"

    def _temperature_text(self, temperature: float | None, rule: TemperatureRule) -> str:
        """Why ``rule`` is active: the temperature is above its level, or has not yet fallen past its hysteresis."""
        if temperature is not None and temperature > rule.above:
            degrees, above = _apart(temperature, rule.above)
            return f"temperature {degrees} °C is above {above}"
        release = rule.above - self.config.temperature_hysteresis
        return (f"temperature {temperature:g} °C has not fallen below {release:g} since it rose above {rule.above:g} "
                "(hysteresis)")

    def _meets_fps(self, name: str, min_fps: float, current: str, values: Values) -> bool:
        fps = values[name].get("fps")
        if fps is None:
            return False
        if name == current:
            return fps >= min_fps * (1.0 - self.config.fps_hysteresis)
        return fps >= min_fps

    def _failing(self, name: str, env: Environment, current: str, values: Values) -> str:
        """Which constraint of ``env`` scenario ``name`` fails, as text ("" when it meets them all)."""
        problems = []
        if env.min_fps is not None and not self._meets_fps(name, env.min_fps, current, values):
            fps, wanted = _apart(values[name].get("fps"), env.min_fps)
            problems.append(f"min_fps {wanted} not met: fps {fps}")
        energy = values[name].get("energy_j")
        if env.energy_budget_j is not None and (energy is None or energy > env.energy_budget_j):
            spent, budget = _apart(energy, env.energy_budget_j)
            problems.append(f"energy_budget_j {budget} not met: energy_j {spent}")
        return "; ".join(problems)

    def _fallback(self, env: Environment, current: str, values: Values, used: dict[str, Any], failing: str,
                  pool: list[str] | None = None) -> Decision:
        """No scenario meets the constraints: the closest one (fastest, or most frugal among ``pool``)."""
        order = {name: index for index, name in enumerate(self.scenarios)}
        if failing == "fps":
            known = [s for s in self.scenarios if "fps" in values[s]]
            what = f"min_fps {env.min_fps:g}"
            if not known:
                return Decision(current, f"no scenario meets {what}: no scenario has a known fps; keeping {current}",
                                False, used)
            best = min(known, key=lambda s: (-values[s]["fps"], values[s].get("energy_j", math.inf), order[s]))
            fps, wanted = _apart(values[best]["fps"], env.min_fps)
            what, closest = f"min_fps {wanted}", f"fastest: {best} at {fps} fps"
        else:
            pool = pool or list(self.scenarios)
            known = [s for s in pool if "energy_j" in values[s]]
            with_fps = " with min_fps" if env.min_fps is not None else ""
            if not known:
                best = current if current in pool else pool[0]
                return Decision(best, f"no scenario meets energy_budget_j {env.energy_budget_j:g}{with_fps}: no "
                                f"candidate has a known energy_j; choosing {best}", False, used)
            best = min(known, key=lambda s: (values[s]["energy_j"], -values[s].get("fps", 0.0), order[s]))
            spent, budget = _apart(values[best]["energy_j"], env.energy_budget_j)
            what, closest = f"energy_budget_j {budget}{with_fps}", f"most frugal: {best} at {spent} J"
        return Decision(best, f"no scenario meets {what} ({closest})", False, used)

    @staticmethod
    def _constraint_text(env: Environment) -> str:
        parts = []
        if env.min_fps is not None:
            parts.append(f"min_fps {env.min_fps:g}")
        if env.energy_budget_j is not None:
            parts.append(f"energy_budget_j {env.energy_budget_j:g}")
        return " and ".join(parts)


def _apart(value: float | None, bound: float) -> tuple[str, str]:
    """``value`` (None: ``unknown``) and the ``bound`` it is compared with, as text with the fewest digits, six
    or more, that tell them apart: ``:g`` alone made a battery of 0.19999999 read "battery 0.2 is below 0.2"."""
    if value is None:
        return "unknown", f"{bound:g}"
    for digits in range(6, 18):
        texts = f"{value:.{digits}g}", f"{bound:.{digits}g}"
        if texts[0] != texts[1]:
            break
    return texts
