"""What a running app reports as it goes: the seam between the runtime and observers such as metrics.

The runtime (its control node, switching, and ``sbrs run``'s loop and socket controller on its behalf) calls
a ``RunObserver``'s methods as things happen; observers must return quickly and never raise into the caller.
``Observers`` fans one event out to several observers. Names and meanings are the contract the interfaces
(metrics, the control socket's request counts) rely on; the protocol lives with the runtime that emits it, so
the runtime imports nothing of the interfaces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

#: Results of a switch request as counted by observers (``request_handled``); rejected ones carry a reason
#: such as ``rejected:unknown_scenario`` or ``rejected:bad_field``.
REQUEST_RESULTS = ("accepted", "replaced", "rejected")
#: Results of a sensor's reading as counted by observers (``sensor_reading``).
SENSOR_RESULTS = ("accepted", "malformed", "failed", "expired")


class RunObserver(Protocol):
    """Events of a running app (every method optional in spirit: implement them all, as no-ops if unused)."""

    def started(self, scenario: str, facts: Mapping[str, Any]) -> None:
        """The runtime is loaded and about to serve frames; ``facts`` holds plan figures (arena bytes, ...)."""

    def state_changed(self, state: str, scenario: str) -> None:
        """The control node entered ``state`` (loading, running, switching, stopping, stopped)."""

    def frame_done(self, scenario: str, seconds: float) -> None:
        """A frame finished on ``scenario`` after ``seconds`` of inference."""

    def frame_cancelled(self, scenario: str, steps_done: int) -> None:
        """A frame on ``scenario`` was abandoned after ``steps_done`` steps for a switch (``runtime.on_switch:
        cancel``); the same frame runs again from its start on the new scenario, so no frame is lost (under
        ``resume``: it continues on the new scenario from the steps both share)."""

    def switch_done(self, old: str, new: str, response_delay_s: float) -> None:
        """A switch ended: Δ = time from the request's arrival to the first output of ``new`` (thesis 5.9)."""

    def request_handled(self, op: str, result: str) -> None:
        """A control request (``switch``/``env``/``status``) ended as ``accepted``, ``replaced`` or ``rejected:*``."""

    def environment_changed(self, values: Mapping[str, Any]) -> None:
        """The last known environment values (battery, min_fps, energy_budget_j, ...), None for unknown."""

    def sensor_reading(self, kind: str, result: str) -> None:
        """A sensor of ``kind`` (``power_supply``, ``thermal``, ``mavlink``) gave a reading that was ``accepted``,
        one that was ``malformed`` (ignored: garbage in a file, a datagram that is no MAVLink), ``failed`` to
        answer (a file that vanished, a link that broke), or its last value ``expired`` (aged out)."""

    def frames_dropped(self, count: int) -> None:
        """A live frame source replaced ``count`` frames with newer ones before the runtime took them."""

    def source_reconnected(self, source: str) -> None:
        """A frame source that had stopped giving frames was opened again (``sbrs run --reconnect``)."""


class Observers:
    """Forward every event to each observer; an observer that raises is skipped, never the caller."""

    def __init__(self, observers: Iterable[RunObserver] = ()) -> None:
        self._observers = tuple(observers)

    def _emit(self, event: str, *args: Any) -> None:
        for observer in self._observers:
            try:
                getattr(observer, event)(*args)
            except Exception:  # an observer must never break inference or switching
                continue

    def started(self, scenario: str, facts: Mapping[str, Any]) -> None:
        self._emit("started", scenario, facts)

    def state_changed(self, state: str, scenario: str) -> None:
        self._emit("state_changed", state, scenario)

    def frame_done(self, scenario: str, seconds: float) -> None:
        self._emit("frame_done", scenario, seconds)

    def frame_cancelled(self, scenario: str, steps_done: int) -> None:
        self._emit("frame_cancelled", scenario, steps_done)

    def switch_done(self, old: str, new: str, response_delay_s: float) -> None:
        self._emit("switch_done", old, new, response_delay_s)

    def request_handled(self, op: str, result: str) -> None:
        self._emit("request_handled", op, result)

    def environment_changed(self, values: Mapping[str, Any]) -> None:
        self._emit("environment_changed", values)

    def sensor_reading(self, kind: str, result: str) -> None:
        self._emit("sensor_reading", kind, result)

    def frames_dropped(self, count: int) -> None:
        self._emit("frames_dropped", count)

    def source_reconnected(self, source: str) -> None:
        self._emit("source_reconnected", source)
