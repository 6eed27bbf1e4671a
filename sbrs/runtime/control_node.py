"""The control node c of the SBRS MoC (thesis 5.7.2, 5.7.4) as a state machine (the ``transitions`` library).

States and triggers::

    loading ──loaded──► running ──begin──► switching ──switch_done──► running
                                              │ begin (a second switch while the first is under way): stays
                                              │ switch_done while another switch is under way: stays
    loading/running/switching ──shutdown──► stopping ──halt──► stopped

A *switch request* (SSR) records the wanted scenario and its arrival time (``request``); it never blocks and
may come from any thread (socket workers, the policy, ``Runtime.switch``). The runtime's frame loop acts on the
latest pending request at the next step boundary (``take``): at a frame boundary the next frame simply runs on
the new scenario; in the middle of a frame, under SBRS-TP, the next frame starts on the new scenario while the
old one finishes (``sbrs.compile.transitions``). ``finish`` (``record`` then ``settle``) ends the switch at the
new scenario's first output and records the response delay Δ (thesis 5.9: from the SSR's arrival to that
output). ``status`` shows ``pending`` and ``switching_to`` as they change.

Where the state machine runs, and why: every Python instruction between the request and the new scenario's
first ONNX Runtime call lengthens Δ, and on a loaded 2-core machine far more than the same code costs alone
(a ``transitions`` trigger: 5 µs in a loop, 30-35 µs between ORT calls with a request thread around). Running
the machine on the requesting thread (trigger ``ssr`` on every request) made the tiny app's caller-visible Δ
1.29x that of plain ONNX Runtime; running ``begin`` in ``take`` 1.26x; with neither, 1.13x. So a request only
posts itself (a few attribute writes under the lock), ``take`` only updates the node's attributes, and the
loop calls ``begin`` once the new scenario's first step has run — or, when that step is the whole frame, with
the bookkeeping done after the caller has the frame's output (``settle``). ``switching`` therefore means "a
switch is under way and its new frame has started".

Deviation from the thesis (5.7.4: "If a new SSR is received during an ongoing scenarios switching, it is
ignored"): ignoring loses the environment's latest wish, and a switch takes at most about two frames, so the
node keeps the *latest* request instead. A request arriving during a switch waits; when the switch ends the
node goes on switching to it (unless it names the scenario just reached). A request replaced before it was
acted on is reported to observers as ``request_handled("switch", "replaced")``; every other SSR from a client
(source ``socket`` or ``api``) is reported ``accepted`` when it is acted on. SSRs the policy issues on an
``env`` request are not counted as requests (the ``env`` request is).

With ``interrupt`` (``runtime.on_switch: cancel`` or ``resume``) the node also tells the runtime, under its lock,
whenever a switch to another scenario becomes pending and when none is pending any more, so that the frame in
flight can be given up (``sbrs.runtime.switching.cancelling``, ``resuming``); ``abandon`` ends a switch whose
first frame was given up that way.

The node holds no module state; its lock makes every method safe from any thread. ``pending`` is a plain
attribute read, cheap enough for the frame loop to test at every step.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from transitions import Machine, State

from sbrs.runtime.events import Observers

STATES: tuple[str, ...] = ("loading", "running", "switching", "stopping", "stopped")

#: Sources whose SSRs are client requests (reported through ``request_handled``); others are policy decisions.
CLIENT_SOURCES: frozenset[str] = frozenset({"socket", "api"})

_TRANSITIONS: tuple[dict[str, Any], ...] = (
    {"trigger": "loaded", "source": "loading", "dest": "running"},
    {"trigger": "begin", "source": "running", "dest": "switching"},
    {"trigger": "begin", "source": "switching", "dest": None},
    {"trigger": "switch_done", "source": "switching", "dest": None, "conditions": "busy"},
    {"trigger": "switch_done", "source": "switching", "dest": "running"},
    {"trigger": "shutdown", "source": ["loading", "running", "switching"], "dest": "stopping"},
    {"trigger": "halt", "source": ["loading", "running", "switching", "stopping"], "dest": "stopped"},
)


class _QuietState(State):
    """``transitions``' state without its INFO record at every entry and exit.

    ``transitions`` logs each state entered and left, and each callback run, at INFO on its module's logger:
    six records a switch, in the switch's path, in an application that logs at INFO (a common setting) and
    beside that application's own records. The library has no switch for it per machine, and the
    ``transitions`` logger's level is the application's to set (it may drive machines of its own).
    """

    def enter(self, event_data: Any) -> None:
        event_data.machine.callbacks(self.on_enter, event_data)

    def exit(self, event_data: Any) -> None:
        event_data.machine.callbacks(self.on_exit, event_data)


class _QuietMachine(Machine):
    """``transitions``' machine on ``_QuietState`` whose callbacks are run without an INFO record each."""

    state_cls = _QuietState

    def callbacks(self, funcs: Any, event_data: Any) -> None:
        for func in funcs:
            self.callback(func, event_data)


@dataclass(slots=True, eq=False)  # not frozen: made on the requesting thread, in the switch's critical path
class SwitchRequest:
    """An SSR: its number, the wanted scenario, who asked and when it arrived (``time.perf_counter``).

    Not to be changed once made. Two requests are equal only when they are the same request (identity).
    """

    id: int
    scenario: str
    source: str
    arrived: float


@dataclass(slots=True)  # not frozen: built on the switch's critical path (frozen construction costs 3x)
class SwitchRecord:
    """One finished switch: Δ and how it ran.

    ``ssr_step`` is the old step after which the transition started (None: at a frame boundary, nothing
    overlapped); ``overlapped_steps`` the new steps that started before the old frame's last step finished.
    ``cancelled_steps``: under ``runtime.on_switch: cancel``, the old frame in flight was abandoned after this
    many of its steps had finished and run again from its start on the new scenario (None: nothing cancelled).
    ``resumed_steps``: under ``runtime.on_switch: resume`` (beyond the thesis), the frame in flight was stopped
    after ``cancelled_steps`` old steps and continued on the new scenario after this many of the new scenario's
    steps, taken over from the old frame (its shared prefix; 0: run again from its start, as under ``cancel``).
    None: not resumed.
    """

    old: str
    new: str
    source: str
    mode: str
    response_delay_s: float
    ssr_step: int | None
    overlapped_steps: int
    cancelled_steps: int | None = None
    resumed_steps: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, "source": self.source, "mode": self.mode,
                "response_delay_s": round(self.response_delay_s, 6), "ssr_step": self.ssr_step,
                "overlapped_steps": self.overlapped_steps, "cancelled_steps": self.cancelled_steps,
                "resumed_steps": self.resumed_steps}


class _Fsm:
    """The model object the ``transitions`` machine drives; conditions read the node."""

    state: str

    def __init__(self, node: ControlNode) -> None:
        self._node = node

    def busy(self, *args: Any) -> bool:
        """Another switch is still under way (a frame-boundary switch and a transition can nest)."""
        return bool(self._node._executing)


class ControlNode:
    """The control node (module docstring). ``observers`` get every event of ``sbrs.runtime.events``."""

    def __init__(self, scenarios: tuple[str, ...], initial: str, *, mode: str = "sbrs-tp",
                 observers: Observers | None = None, clock: Callable[[], float] = time.perf_counter,
                 history: int = 256, interrupt: Callable[[bool], None] | None = None) -> None:
        """``interrupt(True)`` is called, under the node's lock, when a switch to another scenario becomes
        pending, ``interrupt(False)`` when none is pending any more (taken or dropped): the runtime's way to
        cancel the frame in flight (``runtime.on_switch: cancel``)."""
        self.scenarios = tuple(scenarios)
        self.mode = mode
        self._interrupt = interrupt
        self.observers = observers or Observers()
        self._clock = clock
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self.scenario = initial  # the scenario of the frame last started (plain attribute, loop thread writes)
        self.pending: SwitchRequest | None = None  # the latest request not acted on yet
        self._executing: list[SwitchRequest] = []  # requests whose switches are under way (at most two)
        self.progress: tuple[int, int] = (0, 0)  # (old steps, new steps) done in the current transition
        self.records: deque[SwitchRecord] = deque(maxlen=history)
        self.switches = 0
        self.replaced = 0
        self._delay_total = 0.0
        self._fsm = _Fsm(self)
        self._last_state = "loading"
        self._machine = _QuietMachine(model=self._fsm, states=list(STATES), transitions=[dict(t) for t in _TRANSITIONS],
                                initial="loading", auto_transitions=False, after_state_change=self._entered)
        self.observers.state_changed("loading", initial)

    # -- state ---------------------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self._fsm.state

    @property
    def executing(self) -> SwitchRequest | None:
        """The latest request whose switch is under way."""
        return self._executing[-1] if self._executing else None

    @property
    def under_way(self) -> tuple[SwitchRequest, ...]:
        """The requests whose switches are under way (taken, not yet settled or abandoned); a snapshot."""
        return tuple(self._executing)

    @property
    def target(self) -> str:
        """The scenario the next frame not yet started will run on."""
        pending = self.pending
        return pending.scenario if pending is not None else self.scenario

    def _entered(self, *args: Any) -> None:
        """After every trigger: tell observers when the state really changed (internal transitions do not)."""
        if self._fsm.state != self._last_state:
            self._last_state = self._fsm.state
            self.observers.state_changed(self._fsm.state, self.scenario)

    def loaded(self, facts: Mapping[str, Any]) -> None:
        """The runtime is built: running, and observers get ``started`` with ``facts``."""
        with self._lock:
            self._fsm.trigger("loaded")
        self.observers.started(self.scenario, facts)

    # -- requests (any thread) -----------------------------------------------------------------------------

    def request(self, scenario: str, source: str = "api") -> SwitchRequest:
        """Record an SSR for ``scenario`` (validated by the caller); never blocks on inference."""
        with self._lock:
            if self._fsm.state in ("stopping", "stopped"):
                from sbrs.errors import SbrsRuntimeError

                raise SbrsRuntimeError(f"the runtime is {self._fsm.state}; switch to '{scenario}' refused")
            request = SwitchRequest(next(self._ids), scenario, source, self._clock())
            previous = self.pending
            if previous is not None:
                self.replaced += 1
                self._report(previous, "replaced")
            if self.executing is None and scenario == self.scenario:
                # nothing to switch: back to (or still) running on the current scenario
                self.pending = None
                self._report(request, "accepted")
                if self._interrupt is not None:
                    self._interrupt(False)
                return request
            self.pending = request
            if self._interrupt is not None:
                self._interrupt(scenario != self.scenario)
            return request

    def _report(self, request: SwitchRequest, result: str) -> None:
        if request.source in CLIENT_SOURCES:
            self.observers.request_handled("switch", result)

    # -- the frame loop's side -----------------------------------------------------------------------------

    def take(self, expected: SwitchRequest | None = None) -> SwitchRequest | None:
        """Act on the pending request, if any, and return it (None: nothing to switch). Loop thread only.

        From here on ``scenario`` is the new scenario (the next frame runs on it) and the request is
        ``executing`` until ``finish``. A pending request naming the current scenario is dropped (accepted).
        With ``expected``, only that very request is taken: the loop decided on it (the transition it starts
        depends on the scenario it names), and another thread may have replaced it since; a replacement stays
        pending for the next decision.
        """
        if self.pending is None:
            return None
        with self._lock:
            request = self.pending
            if request is None:
                return None
            if expected is not None and request is not expected and request.scenario != self.scenario:
                return None
            self.pending = None
            if self._interrupt is not None:
                self._interrupt(False)
            self._report(request, "accepted")
            if request.scenario == self.scenario:
                return None
            self._executing.append(request)
            self.progress = (0, 0)
            self.scenario = request.scenario
            return request

    def begin(self, request: SwitchRequest) -> None:
        """The new frame of ``request``'s switch has started: state ``switching`` (already so when another
        switch is under way, or when ``begin`` ran for it before). Loop thread."""
        if self._fsm.state != "running":
            return
        with self._lock:
            if self._fsm.state == "running" and request in self._executing:
                self._fsm.trigger("begin")

    def step_done(self, old_steps: int, new_steps: int) -> None:
        """Progress of the transition under way (old and new steps finished); shown by ``status``. A plain
        attribute write: the state does not change, and the old frame may still be finishing after the switch
        itself has ended (its new output came first)."""
        self.progress = (old_steps, new_steps)

    def finish(self, request: SwitchRequest, old: str, first_output: float, *, ssr_step: int | None,
               overlapped_steps: int, mode: str | None = None) -> SwitchRecord:
        """The new scenario produced its first output at ``first_output``: record Δ, end the switch."""
        record = self.record(request, old, first_output, ssr_step=ssr_step, overlapped_steps=overlapped_steps,
                             mode=mode)
        self.settle(request, record)
        return record

    def record(self, request: SwitchRequest, old: str, first_output: float, *, ssr_step: int | None,
               overlapped_steps: int, mode: str | None = None, cancelled_steps: int | None = None,
               resumed_steps: int | None = None) -> SwitchRecord:
        """The switch's record (Δ from the request's arrival to ``first_output``); changes nothing."""
        return SwitchRecord(old, request.scenario, request.source, mode or self.mode,
                            max(0.0, first_output - request.arrived), ssr_step, overlapped_steps, cancelled_steps,
                            resumed_steps)

    def settle(self, request: SwitchRequest, record: SwitchRecord) -> None:
        """End the switch of ``request`` with its ``record``: counters, state, observers. ``finish`` in two
        parts, so that the runtime can hand the output to its caller before this bookkeeping."""
        delay = record.response_delay_s
        self.begin(request)
        with self._lock:
            if request in self._executing:
                self._executing.remove(request)
            self.records.append(record)
            self.switches += 1
            self._delay_total += delay
            if self.pending is not None and self.pending.scenario == self.scenario and not self._executing:
                self._report(self.pending, "accepted")
                self.pending = None
                if self._interrupt is not None:
                    self._interrupt(False)
            if self._fsm.state == "switching":  # (not once ``shutdown`` ran: a frame may settle after ``close``)
                self._fsm.trigger("switch_done")
        self.observers.switch_done(record.old, request.scenario, delay)

    def abandon(self, request: SwitchRequest) -> None:
        """``request``'s switch ends without an output of its own: its first frame was cancelled for a newer
        request (``runtime.on_switch: cancel``), which then starts from the scenario it had reached. Loop thread."""
        with self._lock:
            if request in self._executing:
                self._executing.remove(request)
            if self._fsm.state == "switching":
                self._fsm.trigger("switch_done")

    def frame_done(self, scenario: str, seconds: float) -> None:
        self.observers.frame_done(scenario, seconds)

    def frame_cancelled(self, scenario: str, steps_done: int) -> None:
        self.observers.frame_cancelled(scenario, steps_done)

    # -- shutdown ------------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop accepting requests (stopping); idempotent."""
        with self._lock:
            if self._fsm.state not in ("stopping", "stopped"):
                self._fsm.trigger("shutdown")

    def halt(self) -> None:
        """Everything is released (stopped); idempotent."""
        with self._lock:
            if self._fsm.state != "stopped":
                self._fsm.trigger("halt")

    # -- status --------------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """A JSON-ready snapshot: state, scenario, pending request, switch count and Δ figures."""
        with self._lock:
            last = self.records[-1].to_dict() if self.records else None
            return {
                "state": self._fsm.state,
                "running_scenario": self.scenario,
                "pending": None if self.pending is None else self.pending.scenario,
                "switching_to": None if self.executing is None else self.executing.scenario,
                "transition": self.mode,
                "switches_done": self.switches,
                "requests_replaced": self.replaced,
                "last_switch": last,
                "mean_response_delay_s": round(self._delay_total / self.switches, 6) if self.switches else None,
            }
