"""The control interface the socket server talks to, and ``PolicyController``, the one ``sbrs run`` uses.

``Controller`` is what a request needs from the rest of sbrs: the scenario names, an explicit switch, an
environment update and a status snapshot. Every method must return quickly and be safe to call from any
thread: the server calls them from worker threads, never from the inference loop.

``PolicyController`` holds the last known ``Environment``, runs the ``Policy`` on every environment update
and calls the ``switch(name)`` callable it was given when the decision differs from the current scenario.
``switch`` must not block on inference: it should only record the switch request (the runtime applies it
between frames). It is called with the controller's lock held, so switches are issued in decision order.
With ``switch_source=True`` it is called as ``switch(name, source)`` (``socket``, ``api``, ``environment``,
...), so the runtime's control node can tell client requests from policy decisions.

Explicit switches bypass the policy: ``request_switch`` switches at once and the controller enters
``explicit`` mode. The policy is not consulted again until the next environment update (or ``reevaluate``),
which is evaluated afresh from the full last known environment and may switch away from the explicitly
chosen scenario; the controller is then back in ``policy`` mode.

Sensors (``sbrs.control.sensors``) take the same path as an ``env`` request: ``update_environment(changes,
source="sensor:KIND")``, so the source of the switches they cause says which sensor it was. ``attach_status``
adds a section of someone else's (the sensors' state) to ``status()``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from sbrs.app.settings import AppConfig
from sbrs.control.policy import CHARACTERISTICS, Decision, Environment, MeasuredValues, Policy, finite_number
from sbrs.errors import InputError, SbrsError


class RequestError(Exception):
    """A request the controller refuses: ``code`` (machine-readable, e.g. ``unknown_scenario``) and a message."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = " ".join(message.split())
        super().__init__(self.message)


class Controller(Protocol):
    """What the socket server needs from the runtime (module docstring). Methods are quick and thread-safe."""

    @property
    def scenarios(self) -> tuple[str, ...]:
        """The app's scenario names, in app-file order."""
        ...

    def request_switch(self, scenario: str, source: str) -> dict[str, Any]:
        """Switch to ``scenario`` now (``source`` names the requester, e.g. ``socket``). Raises ``RequestError``."""
        ...

    def update_environment(self, changes: Mapping[str, Any], source: str = "environment") -> dict[str, Any]:
        """Apply validated environment ``changes`` (None clears a value) and act on them; ``source`` names who
        reported them (a switch they cause carries it). Raises ``RequestError``."""
        ...

    def status(self) -> dict[str, Any]:
        """A JSON-ready snapshot: at least ``scenario`` and ``scenarios``."""
        ...


class PolicyController:
    """A ``Controller`` that applies the app's ``Policy`` on environment updates (module docstring)."""

    def __init__(self, config: AppConfig, switch: Callable[..., object], *, current: str | None = None,
                 policy: Policy | None = None, switch_source: bool = False) -> None:
        self._config = config
        self._switch = switch
        self._switch_source = switch_source  # call switch(name, source): who asked (socket, environment, ...)
        self._policy = policy or Policy(config)
        self._lock = threading.Lock()
        self._current = current or config.initial
        if self._current not in config.scenario_names:
            raise InputError(f"unknown scenario '{self._current}' (scenarios: {', '.join(config.scenario_names)})")
        self._environment = Environment()
        self._measured: dict[str, dict[str, float]] = {}
        self._decision: Decision | None = None
        self._mode = "initial"
        self._last_source: str | None = None
        self._switches_asked = 0  # scenario changes asked of the runtime (a switch ends later, or is replaced)
        self._status_sections: dict[str, Callable[[], Any]] = {}

    @property
    def scenarios(self) -> tuple[str, ...]:
        return self._config.scenario_names

    @property
    def scenario(self) -> str:
        """The scenario last requested from the runtime."""
        with self._lock:
            return self._current

    @property
    def environment(self) -> Environment:
        with self._lock:
            return self._environment

    @property
    def decision(self) -> Decision | None:
        """The policy's last decision (None before the first environment update)."""
        with self._lock:
            return self._decision

    def request_switch(self, scenario: str, source: str = "api") -> dict[str, Any]:
        """Explicit switch: bypasses the policy until the next environment update."""
        if scenario not in self.scenarios:
            raise RequestError("unknown_scenario",
                               f"unknown scenario '{scenario}' (scenarios: {', '.join(self.scenarios)})")
        with self._lock:
            previous = self._current
            self._apply(scenario, source)
            self._mode = "explicit"
            return {"scenario": scenario, "previous": previous, "switched": scenario != previous}

    def update_environment(self, changes: Mapping[str, Any], source: str = "environment") -> dict[str, Any]:
        """Merge ``changes`` into the environment, run the policy, switch if it chooses another scenario (the
        switch's ``source``: who reported the changes, ``environment`` for a request, ``sensor:KIND`` for a
        sensor).

        The new environment is kept even when the switch itself fails (the values are facts); the failure is
        a ``RequestError`` with code ``switch_failed``.
        """
        with self._lock:
            try:
                environment = self._environment.updated(changes)
            except InputError as exc:
                raise RequestError("bad_field", str(exc)) from None
            self._environment = environment
            return self._evaluate(source)

    def reevaluate(self, source: str = "reevaluate") -> dict[str, Any]:
        """Run the policy on the last known environment (e.g. after new measurements) and act on it."""
        with self._lock:
            return self._evaluate(source)

    def update_measurements(self, scenario: str, values: Mapping[str, float | None]) -> None:
        """Record measured characteristics of ``scenario`` (preferred over declared ones from now on).

        A value of None forgets that measurement. Does not re-run the policy (see ``reevaluate``).
        """
        if scenario not in self.scenarios:
            raise InputError(f"unknown scenario '{scenario}'", field="measured")
        checked: dict[str, float | None] = {}
        for key, value in values.items():
            if key not in CHARACTERISTICS:
                raise InputError(f"unknown characteristic (allowed: {', '.join(CHARACTERISTICS)})",
                                 field=f"measured.{key}")
            number = None if value is None else finite_number(value)
            if value is not None and (number is None or number < 0):
                raise InputError(f"expected a finite number ≥ 0, got {value!r}", field=f"measured.{key}")
            checked[key] = number
        with self._lock:
            current = self._measured.setdefault(scenario, {})
            for key, number in checked.items():
                if number is None:
                    current.pop(key, None)
                else:
                    current[key] = number

    def attach_status(self, name: str, section: Callable[[], Any]) -> None:
        """From now on ``status()`` holds ``name: section()`` (called without the controller's lock held)."""
        with self._lock:
            self._status_sections[name] = section

    def status(self) -> dict[str, Any]:
        with self._lock:
            sections = dict(self._status_sections)
            snapshot: dict[str, Any] = {
                "scenario": self._current,
                "scenarios": list(self.scenarios),
                "mode": self._mode,
                "last_switch_source": self._last_source,
                "switches_asked": self._switches_asked,
                "high_power": self._current in self._config.policy.high_power,
                "environment": self._environment.to_dict(),
                "decision": None if self._decision is None else self._decision.to_dict(),
                "measured": {name: dict(values) for name, values in self._measured.items() if values},
            }
        for name, section in sections.items():
            snapshot[name] = section()
        return snapshot

    def _evaluate(self, source: str) -> dict[str, Any]:
        """Run the policy and switch; the caller holds the lock."""
        previous = self._current
        measured: MeasuredValues = {name: dict(values) for name, values in self._measured.items()}
        decision = self._policy.decide(self._environment, previous, measured)
        self._decision = decision
        self._apply(decision.scenario, source)
        self._mode = "policy"
        return {"scenario": decision.scenario, "previous": previous, "switched": decision.scenario != previous,
                "satisfied": decision.satisfied, "reason": decision.reason,
                "environment": self._environment.to_dict()}

    def _apply(self, scenario: str, source: str) -> None:
        """Ask the runtime for ``scenario`` unless it is current; the caller holds the lock."""
        if scenario == self._current:
            return
        try:
            if self._switch_source:
                self._switch(scenario, source)
            else:
                self._switch(scenario)
        except SbrsError as exc:
            raise RequestError("switch_failed", f"switch to '{scenario}' failed: {exc}") from None
        self._current = scenario
        self._switches_asked += 1
        self._last_source = source
