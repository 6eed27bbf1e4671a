"""The environment from sensors: a battery and a temperature read from Linux' sysfs or from a flight controller,
fed to the policy the way a control socket's ``env`` request is.

Sources (``sbrs.app.environment`` parses their text, ``environment.sources`` or ``sbrs run --env-source``;
``open_sensors`` opens them): a Linux power supply's battery and the hottest thermal zone
(``sbrs.control.sysfs``), a flight controller's battery over MAVLink (``sbrs.control.mavlink``, read as its
messages arrive).

``EnvironmentSensors`` runs them on one thread of its own (``sbrs-sensors``): every ``poll_s`` it reads the sysfs
sources, and in between it waits on the MAVLink links' descriptors (``selectors``), so a flight controller's
message is used when it comes. Every reading takes the path of an ``env`` request: the value is checked as the
socket checks it (``check_environment_value``), then ``PolicyController.update_environment(changes,
source="sensor:KIND")`` runs the policy with its hysteresis and asks for a switch, whose record (JSON line,
``sbrs status``) names the sensor, and the observers hear ``environment_changed`` (the metrics' gauges). A reading
equal to the last one the sensor gave only refreshes its age: an explicit ``sbrs switch`` holds until a sensor's
value changes (a socket ``env`` request would otherwise be undone at every poll).

What can go wrong, and what happens:

- A reading that is garbage (a sysfs file that holds no number, or an impossible one; a datagram or bytes that
  are no MAVLink) is ignored and counted: ``malformed`` in the summary and in ``sbrs_sensor_readings_total``
  (``RunObserver.sensor_reading``); the first one of each sensor is logged.
- A sensor that stops answering (a file gone or unreadable, a link broken, a link that brings nothing from the
  flight controller for ``SILENT_AFTER_S``, five heartbeats) is logged once, and once more when it answers
  again; a broken link is opened again at every poll. Its last value ages out: ``max_age_s`` after its last reading
  the value is forgotten (None, unknown, as ``sbrs env --clear`` does), which the policy sees as no constraint.
- Nothing raises out of the thread: an unexpected error is logged once per sensor and the thread goes on.
  Hysteresis (the policy's thresholds) and the once-per-change forwarding keep a value hovering at a threshold
  from switching at every reading.

The seam for ``environment.min_fps: source``: ``initial_environment(config, source_fps)`` gives the policy the
frame source's rate; ``sbrs run`` passes ``source_frame_rate(frames)``, the ``fps`` attribute of its frame
source (None where the source has no rate of its own, such as a folder of frames).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sbrs.app.environment import EnvironmentConfig, SensorSpec
from sbrs.control.controller import RequestError
from sbrs.control.policy import check_environment_value
from sbrs.control.readings import Batch, MalformedReading, Sensor, SensorFailure
from sbrs.errors import InputError
from sbrs.runtime.events import Observers

if TYPE_CHECKING:
    import selectors

    from sbrs.control.controller import PolicyController

logger = logging.getLogger(__name__)

SILENT_AFTER_S = 5.0
"""A link (MAVLink) that brings nothing from the flight controller for this long (five of its 1 Hz heartbeats) is
logged as silent; its value still ages out after ``max_age_s``. Not tied to ``poll_s``: a short period for the
sysfs sensors must not make a healthy link look silent between two heartbeats."""


def open_sensor(spec: SensorSpec) -> Sensor:
    """The sensor of ``spec``, open (``InputError`` naming the source when it cannot be: no such supply or zone,
    a port that cannot be bound, a device that is not there, pymavlink missing)."""
    from sbrs.control.sysfs import PowerSupplyBattery, ThermalTemperature

    if spec.kind == "power_supply":
        return PowerSupplyBattery(spec)
    if spec.kind == "thermal":
        return ThermalTemperature(spec)
    from sbrs.control.mavlink import MavlinkBattery  # pymavlink and sockets only for a flight controller

    return MavlinkBattery(spec)


def open_sensors(specs: Iterable[SensorSpec]) -> list[Sensor]:
    """Every sensor of ``specs``, open; if one fails, those opened before it are closed."""
    sensors: list[Sensor] = []
    try:
        for spec in specs:
            sensors.append(open_sensor(spec))
    except BaseException:
        for sensor in sensors:
            sensor.close()
        raise
    return sensors


# -- min_fps from the frame source ---------------------------------------------------------------------------


def source_frame_rate(frames: object) -> float | None:
    """The frame rate a frame source declares (its ``fps`` attribute: a camera's, a video file's), or None when
    it has none (a folder of frames, synthetic frames) or an unusable one (not a finite number > 0)."""
    value = getattr(frames, "fps", None)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


def initial_environment(config: EnvironmentConfig, source_fps: float | None = None) -> dict[str, Any]:
    """The environment values the app file fixes before any sensor speaks: ``min_fps`` (a number, or with
    ``min_fps: source`` the frame source's rate ``source_fps``; without one it stays unknown, and a warning says
    why). ``{}`` when there are none."""
    if config.min_fps is None:
        return {}
    if isinstance(config.min_fps, str):  # "source"
        if source_fps is None:
            logger.warning("sbrs run: environment.min_fps: source: the frame source has no frame rate of its own "
                           "(a folder of frames, synthetic frames); min_fps stays unknown")
            return {}
        return {"min_fps": float(source_fps)}
    return {"min_fps": float(config.min_fps)}


# -- the thread ----------------------------------------------------------------------------------------------


@dataclass
class SensorState:
    """What the hub knows of one sensor: its counts and last value (written under the hub's lock, which
    ``status`` reads them under) and the sensors' thread's own bookkeeping."""

    sensor: Sensor
    readings: int = 0
    malformed: int = 0
    failed: int = 0
    expired: int = 0
    value: float | None = None  # the last accepted reading
    value_at: float | None = None
    forwarded: float | None = None  # the last value given to the policy
    heard_at: float = 0.0
    answering: bool = True
    broken: bool = False  # a link that must be opened again
    watched: int | None = None  # the descriptor the thread waits on
    malformed_logged: bool = False
    error_logged: bool = False

    @property
    def spec(self) -> SensorSpec:
        return self.sensor.spec

    def to_dict(self, now: float) -> dict[str, Any]:
        return {"source": self.spec.spec, "field": self.spec.field, "value": self.value,
                "age_s": None if self.value_at is None else round(now - self.value_at, 3),
                "answering": self.answering, "readings": self.readings, "malformed": self.malformed,
                "failed": self.failed, "expired": self.expired}


class EnvironmentSensors:
    """Reads ``sensors`` on a thread of its own and gives every reading to ``controller`` (module docstring).

    ``poll_s``: how often polled sensors are read (and broken links opened again); ``max_age_s``: how long a value
    lives without a new reading (None: for ever). ``observers`` hear ``environment_changed`` and
    ``sensor_reading``. ``poll(now)`` and ``receive(index, now)`` are one round of the thread, callable directly
    (tests drive them with their own clock, without ``start``). ``start``/``stop`` (or ``with``) run the thread;
    ``close`` closes the sensors. ``status()`` and ``summary()`` are safe from any thread; the controller's
    ``status()`` holds the first as ``sensors``.
    """

    def __init__(self, controller: PolicyController, sensors: Sequence[Sensor], *, poll_s: float,
                 max_age_s: float | None, observers: Observers | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._controller = controller
        self._states = [SensorState(sensor) for sensor in sensors]
        self.poll_s = poll_s
        self.max_age_s = max_age_s
        self._observers = observers or Observers()
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._selector: selectors.BaseSelector | None = None
        self._wake: tuple[int, int] | None = None
        started = clock()
        for state in self._states:
            state.heard_at = started
            state.broken = not state.sensor.polled and state.sensor.fileno() is None  # a link not open yet
        controller.attach_status("sensors", self.status)  # sbrs status shows them

    @property
    def sensors(self) -> list[Sensor]:
        return [state.sensor for state in self._states]

    # -- one round ---------------------------------------------------------------------------------------------

    def poll(self, now: float | None = None) -> None:
        """Read every polled sensor, open broken links again, log silent links, forget values too old."""
        now = self._clock() if now is None else now
        for index, state in enumerate(self._states):
            self._guarded(state, self._poll_one, index, state, now)
        for state in self._states:
            self._guarded(state, self._age, state, now)

    def receive(self, index: int, now: float | None = None) -> None:
        """Read link ``index`` (its descriptor is readable)."""
        state = self._states[index]
        self._guarded(state, self._take, state, self._clock() if now is None else now)

    def _poll_one(self, index: int, state: SensorState, now: float) -> None:
        sensor = state.sensor
        if sensor.polled:
            self._take(state, now)
            return
        if state.broken:
            try:
                sensor.reopen()
            except SensorFailure as exc:
                self._failed(state, str(exc))
                return
            state.broken = False
            state.heard_at = now
            self._watch(index)
            logger.info("sbrs run: sensor %s: open again", state.spec.spec)
        elif state.answering and now - state.heard_at > SILENT_AFTER_S:
            state.answering = False
            logger.warning("sbrs run: sensor %s: nothing from it for %.3g s; %s", state.spec.spec,
                           now - state.heard_at, self._age_text(state))

    def _take(self, state: SensorState, now: float) -> None:
        """Read the sensor and use what it brought."""
        try:
            batch = state.sensor.read()
        except MalformedReading as exc:
            batch = Batch()
            batch.garbage(str(exc))
        except SensorFailure as exc:
            if not state.sensor.polled:
                self._unwatch(state)
                state.broken = True
            self._failed(state, str(exc))
            return
        kind = state.spec.kind
        if batch.malformed:
            with self._lock:
                state.malformed += batch.malformed
            for _ in range(batch.malformed):
                self._observers.sensor_reading(kind, "malformed")
            if not state.malformed_logged:
                state.malformed_logged = True
                logger.warning("sbrs run: sensor %s: ignored a malformed reading (%s); such readings are counted "
                               "(malformed in the summary and in sbrs_sensor_readings_total)", state.spec.spec,
                               batch.why)
            else:
                logger.debug("sbrs run: sensor %s: ignored a malformed reading (%s)", state.spec.spec, batch.why)
        values = []
        for value in batch.values:
            try:
                checked = check_environment_value(state.spec.field, value)
            except InputError as exc:
                with self._lock:
                    state.malformed += 1
                self._observers.sensor_reading(kind, "malformed")
                logger.debug("sbrs run: sensor %s: ignored %r: %s", state.spec.spec, value, exc)
                continue
            values.append(float(checked))  # type: ignore[arg-type]
        if batch.heard or values:
            state.heard_at = now
            if not state.answering:
                state.answering = True
                logger.info("sbrs run: sensor %s answers again", state.spec.spec)
        if not values:
            return
        with self._lock:
            state.readings += len(values)
            state.value, state.value_at = values[-1], now
        for _ in values:
            self._observers.sensor_reading(kind, "accepted")
        if values[-1] != state.forwarded:
            state.forwarded = values[-1]
            self._forward(state, {state.spec.field: values[-1]})

    def _failed(self, state: SensorState, why: str) -> None:
        with self._lock:
            state.failed += 1
        self._observers.sensor_reading(state.spec.kind, "failed")
        if state.answering:
            state.answering = False
            logger.warning("sbrs run: sensor %s does not answer: %s; %s", state.spec.spec, why, self._age_text(state))
        else:
            logger.debug("sbrs run: sensor %s does not answer: %s", state.spec.spec, why)

    def _age(self, state: SensorState, now: float) -> None:
        if self.max_age_s is None or state.value_at is None or state.value is None:
            return
        if now - state.value_at <= self.max_age_s:
            return
        with self._lock:
            state.value = None
            state.expired += 1
        self._observers.sensor_reading(state.spec.kind, "expired")
        logger.warning("sbrs run: sensor %s: no reading for %.3g s: the %s is unknown now", state.spec.spec,
                       now - state.value_at, state.spec.field)
        forwarded, state.forwarded = state.forwarded, None
        # a value someone else gave since (an env request) is theirs to keep
        if forwarded is not None and getattr(self._controller.environment, state.spec.field) == forwarded:
            self._forward(state, {state.spec.field: None})

    def _forward(self, state: SensorState, changes: Mapping[str, Any]) -> None:
        """The ``env`` request's path: the policy (and a switch), then the observers."""
        try:
            reply = self._controller.update_environment(changes, source=f"sensor:{state.spec.kind}")
        except RequestError as exc:  # e.g. switch_failed while the runtime stops
            logger.debug("sbrs run: sensor %s: %s", state.spec.spec, exc.message)
            return
        self._observers.environment_changed(dict(reply["environment"]))

    def _guarded(self, state: SensorState, action: Callable[..., None], *args: Any) -> None:
        """``action(*args)``; an unexpected error is logged once per sensor, never raised (the thread goes on)."""
        try:
            action(*args)
        except Exception as exc:
            message = " ".join(str(exc).split())[:300]
            if not state.error_logged:
                state.error_logged = True
                logger.error("sbrs run: sensor %s: %s: %s (the sensors go on)", state.spec.spec,
                             type(exc).__name__, message)
            else:
                logger.debug("sbrs run: sensor %s: %s: %s", state.spec.spec, type(exc).__name__, message)

    def _age_text(self, state: SensorState) -> str:
        if self.max_age_s is None:
            return f"its last {state.spec.field} is kept (max_age_s: null)"
        return f"its {state.spec.field} is forgotten {self.max_age_s:g} s after its last reading"

    # -- the thread --------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Read the sensors on a thread of their own from now on. The first poll runs here, before it returns:
        values the sensors have now reach the policy before the first frame."""
        if self._thread is not None:
            return
        import selectors

        self._selector = selectors.DefaultSelector()
        self._wake = os.pipe()
        os.set_blocking(self._wake[0], False)
        self._selector.register(self._wake[0], selectors.EVENT_READ, None)
        for index in range(len(self._states)):
            self._watch(index)
        started = self._clock()
        self.poll(started)
        self._thread = threading.Thread(target=self._run, args=(started + self.poll_s,), name="sbrs-sensors",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the thread (at once: it is woken) and close the sensors."""
        self._stop.set()
        if self._wake is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake[1], b"x")
        if self._thread is not None:
            self._thread.join(timeout=10.0)
            self._thread = None
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        if self._wake is not None:
            for descriptor in self._wake:
                os.close(descriptor)
            self._wake = None
        self.close()

    def close(self) -> None:
        for state in self._states:
            try:
                state.sensor.close()
            except Exception as exc:  # closing must not stop the others
                logger.debug("sbrs run: sensor %s: closing: %s", state.spec.spec, exc)

    def __enter__(self) -> EnvironmentSensors:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _watch(self, index: int) -> None:
        import selectors

        state = self._states[index]
        descriptor = state.sensor.fileno()
        if self._selector is not None and descriptor is not None:
            self._unwatch(state)
            self._selector.register(descriptor, selectors.EVENT_READ, index)
            state.watched = descriptor

    def _unwatch(self, state: SensorState) -> None:
        if self._selector is not None and state.watched is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(state.watched)
        state.watched = None

    def _run(self, next_poll: float) -> None:
        selector = self._selector
        assert selector is not None and self._wake is not None
        while not self._stop.is_set():
            now = self._clock()
            if now >= next_poll:
                self.poll(now)
                next_poll = max(next_poll + self.poll_s, now)
            try:
                ready = selector.select(max(0.0, next_poll - self._clock()))
            except (OSError, ValueError):  # a descriptor closed under it: the next poll reopens the link
                ready = []
            for key, _ in ready:
                if key.data is None:
                    with contextlib.suppress(OSError):
                        os.read(self._wake[0], 64)
                    continue
                self.receive(key.data)

    # -- what it knows -----------------------------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """Each sensor: its source, environment value, last value and its age, whether it answers, its counts."""
        now = self._clock()
        with self._lock:
            return [state.to_dict(now) for state in self._states]

    def summary(self) -> list[dict[str, Any]]:
        """The run summary's ``sensors``: as ``status()``."""
        return self.status()


def sensors_text(sensors: Sequence[Mapping[str, Any]]) -> str:
    """The summary line's part on the sensors, e.g. ``mavlink:udpin:0.0.0.0:14550 95 readings, 1 malformed``."""
    parts = []
    for item in sensors:
        readings = item["readings"]
        counts = [f"{readings} reading{'' if readings == 1 else 's'}"] + [
            f"{item[key]} {key}" for key in ("malformed", "failed", "expired") if item[key]]
        parts.append(f"{item['source']} {', '.join(counts)}")
    return "; ".join(parts)


def environment_for_run(config: EnvironmentConfig, controller: PolicyController, observers: Observers | None = None,
                        *, sources: Sequence[str] | None = None, poll_s: float | None = None,
                        max_age_s: float | None = None, source_fps: float | None = None) -> EnvironmentSensors | None:
    """What ``sbrs run`` does with the app's ``environment:`` section: ``sources`` (``--env-source``, repeatable;
    they replace the app file's, ``["none"]`` none), ``poll_s`` (``--env-poll``) and ``max_age_s``
    (``--env-max-age``) override it; the fixed values (``min_fps``, with ``source_fps`` the frame source's rate)
    go to the policy now, the way an ``env`` request does; the sensors are opened (``InputError`` when one cannot
    be) and returned as an ``EnvironmentSensors`` to start, or None when there are none."""
    from sbrs.app.environment import check_period, sources_from_args

    specs = config.sources if sources is None else sources_from_args(tuple(sources))
    period = config.poll_s if poll_s is None else check_period(poll_s, "--env-poll")
    age = config.max_age_s if max_age_s is None else check_period(max_age_s, "--env-max-age")
    assert period is not None
    initial = initial_environment(config, source_fps)
    try:
        sensors = open_sensors(specs)
    except InputError as exc:  # named where the source was given
        raise InputError(exc.detail, field="--env-source" if sources is not None else "environment.sources") from None
    if initial:
        try:
            reply = controller.update_environment(initial)
        except RequestError as exc:
            for sensor in sensors:
                sensor.close()
            raise InputError(exc.message, field="environment") from None
        (observers or Observers()).environment_changed(dict(reply["environment"]))
    if not sensors:
        return None
    hub = EnvironmentSensors(controller, sensors, poll_s=period, max_age_s=age, observers=observers)
    for sensor in sensors:
        logger.info("sbrs run: %s from %s", sensor.spec.field, sensor.spec.spec)
    return hub
