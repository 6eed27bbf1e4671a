"""What a sensor of the environment gives (``sbrs.control.sensors`` reads them): a ``Batch`` of readings, or
``SensorFailure`` (no answer) and ``MalformedReading`` (garbage); ``Sensor`` is what every source implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sbrs.app.environment import SensorSpec


class SensorFailure(Exception):
    """The sensor did not answer: a file gone or unreadable, a link broken or not open."""


class MalformedReading(Exception):
    """The sensor answered with garbage (the message says what it was); ignored and counted."""


@dataclass
class Batch:
    """What one read of a sensor brought: ``values`` of its environment value (oldest first), how many pieces
    were ``malformed`` (and ``why`` the first was), and whether the sensor was ``heard`` at all (a flight
    controller's heartbeat counts: it is there even while it sends no battery level)."""

    values: list[float] = field(default_factory=list)
    malformed: int = 0
    why: str | None = None
    heard: bool = False

    def garbage(self, why: str) -> None:
        self.malformed += 1
        if self.why is None:
            self.why = why


class Sensor(Protocol):
    """A source of one environment value (``spec.field``). Polled sensors (``polled``) are read every period;
    the others (links) are read when their ``fileno()`` is readable and ``reopen``-ed while broken."""

    spec: SensorSpec
    polled: bool

    def read(self) -> Batch:
        """What the sensor has now. Raises ``SensorFailure`` (no answer) or ``MalformedReading`` (garbage)."""
        ...

    def fileno(self) -> int | None:
        """A descriptor to wait on (None: polled, or a link not open)."""
        ...

    def reopen(self) -> None:
        """Open a broken link again; ``SensorFailure`` while it stays broken. Polled sensors do nothing."""
        ...

    def close(self) -> None:
        ...
