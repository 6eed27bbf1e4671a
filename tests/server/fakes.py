"""An in-memory ``Controller`` for server and client tests."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from sbrs.control import RequestError


class FakeController:
    """Records every call; switching to ``broken`` fails; ``gate`` (when set) makes ``update_environment`` wait for it, like a stuck runtime."""

    def __init__(self, scenarios: tuple[str, ...] = ("accurate", "eco", "frugal", "broken")) -> None:
        self.scenarios = scenarios
        self.current = scenarios[0]
        self.switches: list[tuple[str, str]] = []
        self.updates: list[dict[str, Any]] = []
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.sensors: list[dict[str, Any]] | None = None  # the ``sensors`` section of a run with sensors
        self._lock = threading.Lock()

    def request_switch(self, scenario: str, source: str) -> dict[str, Any]:
        if scenario == "broken":
            raise RequestError("switch_failed", "the runtime refused")
        with self._lock:
            previous, self.current = self.current, scenario
            self.switches.append((scenario, source))
        return {"scenario": scenario, "previous": previous, "switched": scenario != previous}

    def update_environment(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(30)
        with self._lock:
            self.updates.append(dict(changes))
        return {"scenario": self.current, "previous": self.current, "switched": False, "satisfied": True,
                "reason": "fake"}

    def status(self) -> dict[str, Any]:
        with self._lock:
            status = {"scenario": self.current, "scenarios": list(self.scenarios), "mode": "fake",
                      "environment": {"battery": None, "min_fps": None}}
            if self.sensors is not None:
                status["sensors"] = self.sensors
            return status
