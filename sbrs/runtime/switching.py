"""Switching: how a switch request reaches the frame in flight (thesis 5.7.4, 5.9; Algorithms 6 and 7).

The engine (``sbrs.runtime.engine``) runs one frame at a time and checks, after every step, whether a switch
request is pending. What happens then is here:

- ``Transition``: SBRS-TP with old steps left (Algorithm 7). The rest of the old frame and the whole next frame
  on the new scenario, new step i after old step ``wait_i`` of the tables (``sbrs.compile.transitions``), under
  the ``priority`` (one thread, new steps first whenever their waits allow) or ``threads`` schedule; results
  are yielded as their outputs exist.
- ``new_first``: SBRS-TP after the old frame's last step, before its copy-out: the new frame runs first when it
  writes nothing the copy-out reads (every switch of a one-step app goes this way).
- ``cancelling``: ``runtime.on_switch: cancel``: the frame in flight is given up (ONNX Runtime's
  ``RunOptions.terminate``, or between two steps) and runs again from its start on the new scenario.
- ``resuming``: ``runtime.on_switch: resume`` (beyond the thesis): the frame in flight is stopped the same way
  and continues on the new scenario from the deepest step whose computed tensors the new scenario shares
  (``sbrs.compile.transitions.ResumeTable``); with nothing shared, as ``cancelling``.

``transition_starts`` decides once, at load, for every ordered pair whether a transition can help at all, so
that the test in a switch's critical path is one dictionary lookup. Everything here works on the runtime's
``FrameRunner`` (``sbrs.runtime.runner``: its bound calls, copies, control node and lock); none of it adds a
Python call to a frame that does not switch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from sbrs.compile.tables import PairTable
from sbrs.runtime.control_node import SwitchRequest

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from sbrs.runtime.runner import Frame, FrameResult, FrameRunner

#: How ONNX Runtime's error reads when a call stopped because its ``RunOptions.terminate`` was set.
TERMINATED = "terminate flag"
#: What ``next`` returns at the end of the caller's frames, here and on streams (a frame of ``None`` is a malformed
#: frame, raised in its turn, not the end).
END_OF_FRAMES: Any = object()


class Lookahead:
    """The frame stream with one frame of look-ahead (checked frames; None at the end).

    ``peek`` reads the next frame while the frame in flight is still to be delivered (a switch looks at it), so
    a malformed frame or an error of the caller's iterable met there is kept and raised by the ``take`` of its
    turn: the frame in flight finishes and its result is yielded first, as without a switch. A frame that is
    ``None`` is a malformed frame, not the end of the frames."""

    def __init__(self, frames: Iterator[Frame], check: Callable[[Frame], dict[str, np.ndarray]]) -> None:
        self._frames = frames
        self._check = check
        self._next: dict[str, np.ndarray] | None = None
        self._error: Exception | None = None

    def peek(self) -> dict[str, np.ndarray] | None:
        if self._next is None and self._error is None:
            try:
                self._next = self._read()
            except Exception as error:  # raised by ``take`` in its frame's turn
                self._error = error
        return self._next

    @property
    def peeked(self) -> bool:
        """Whether the next frame was taken from the caller's frames already (by ``peek``)."""
        return self._next is not None or self._error is not None

    def take(self) -> dict[str, np.ndarray] | None:
        arrays, self._next = self._next, None
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._read() if arrays is None else arrays

    def _read(self) -> dict[str, np.ndarray] | None:
        frame = next(self._frames, END_OF_FRAMES)
        return None if frame is END_OF_FRAMES else self._check(frame)


def start_transition(runner: FrameRunner, old: str, step: int, pending: SwitchRequest,
                     lookahead: Lookahead) -> Transition | None:
    """The transition old → ``pending``'s scenario after old step ``step`` < |φ^o| (Algorithm 7), if it
    helps: when new step 1 need not wait for the whole old frame (else the frame boundary does the same,
    ``transition_starts``). Only that very request is taken (``ControlNode.take``): another thread may
    replace it while this waits for the next frame; the replacement is seen after the next old step."""
    ok = runner.transition_starts.get((old, pending.scenario))
    if ok is None or not ok[0]:
        return None
    if not lookahead.peeked:  # taking the next frame may refill the array the old frame's feeds still read
        runner.bound.own_frame(old, step)
    arrays = lookahead.peek()
    if arrays is None:
        return None
    request = runner.node.take(pending)
    if request is None:
        return None
    lookahead.take()
    return Transition(runner, request, old, runner.transitions.table(old, request.scenario), step, arrays)


def new_first(runner: FrameRunner, old: str, pending: SwitchRequest, lookahead: Lookahead,
              index: int) -> FrameResult | None:
    """After old's last step, before its copy-out: run the next frame (``index``) on ``pending``'s scenario
    now and return its result, when the new frame writes nothing that copy-out reads (``transition_starts``)
    and the next frame is at hand; else None (the switch waits for the frame boundary).

    SBRS-TP's transition with no old step left (Algorithm 7 with step^o_SSR = |φ^o|): no new step waits,
    so there is nothing to schedule, and this path does without ``Transition``'s objects and generator,
    because everything run here is in Δ: on tiny (0.1-0.3 ms frames) the general path spent 14-19 µs
    between the old frame's last call and the new frame's first, this one 8-12 µs.
    """
    ok = runner.transition_starts.get((old, pending.scenario))
    if ok is None or not ok[1]:
        return None
    arrays = lookahead.peek()
    if arrays is None:
        return None
    node = runner.node
    request = node.take(pending)
    if request is None:
        return None
    lookahead.take()
    new = request.scenario
    calls = runner.new_calls[new]
    old_steps = len(runner.calls[old])
    begin = time.perf_counter()
    for array in arrays.values():
        runner.new_copy_in[new](array)
    calls[0]()
    if len(calls) > 1:  # the switch is under way until the new frame's last step (state, progress)
        node.begin(request)
        for step in range(1, len(calls)):
            node.step_done(old_steps, step)
            calls[step]()
    return runner.new_frame_result(request, old, index, begin, old_steps, 0)


def transition_starts(runner: FrameRunner) -> dict[tuple[str, str], tuple[bool, bool]]:
    """(o, n) → (whether a transition helps after an old step before the last, after the last one), from
    the tables and the bindings, once at load (the test sits in a switch's critical path).

    Before the last step: new step 1 need not wait for the whole old frame (``wait_1 < |φ^o|``). After
    it: the old frame is computed but not copied out, and the new frame may go first when it writes
    nothing that copy-out reads (``pairs_apart_from_copy_out``, or no new step waits for the old frame
    at all).
    """
    apart = pairs_apart_from_copy_out(runner)
    starts: dict[tuple[str, str], tuple[bool, bool]] = {}
    for table in runner.transitions.pairs.values():
        waits, last = table.wait, table.old_steps
        starts[(table.old, table.new)] = (not waits or waits[0] < last,
                                          (table.old, table.new) in apart or not waits or max(waits) < last)
    return starts


def pairs_apart_from_copy_out(runner: FrameRunner) -> frozenset[tuple[str, str]]:
    """Ordered pairs (o, n) whose transition's new frame writes no byte that the copy-out of o's outputs
    reads (from the bindings really made). For those, a request seen after o's last step lets the new
    frame run before that copy-out, so its result reaches the caller first (``new_first``), also when a
    frame is one step. A scenario whose copy-out reads no recorded bytes (a device arena's copy
    sessions): not apart."""
    writes = {scenario: [(start, end) for step in steps for _, start, end in step.writes]
              for scenario, steps in runner.bound_accesses(new_frame=True).items()}
    return frozenset((old, new) for old, reads in runner.copy_out_reads.items() for new in writes if new != old
                     and not any(a < d and c < b for _, a, b in reads for c, d in writes[new]))


def transition_worker(runner: FrameRunner) -> ThreadPoolExecutor:
    if runner.worker is None:
        from concurrent.futures import ThreadPoolExecutor  # only the ``threads`` schedule has a worker

        runner.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sbrs-transition")
    return runner.worker


def cancelling(runner: FrameRunner, arrays: Mapping[str, np.ndarray], index: int,
               inject: tuple[int, str] | None) -> FrameResult:
    """Run frame ``index`` under ``on_switch: cancel``. The caller holds the lock.

    A switch request for another scenario abandons the frame in flight: ONNX Runtime stops the call under
    way at its next node (the control node sets the calls' ``RunOptions.terminate`` while such a request is
    pending), or the loop stops between two steps; then the same frame runs again from its start on the new
    scenario. So Δ is the rest of one node plus the new frame, where finishing costs the rest of the old
    frame; the old scenario's work on that frame is lost, the frame is not: its one result comes from the new
    scenario, and its record's ``cancelled_steps`` says how many old steps had run (observers get
    ``frame_cancelled``). A request seen after the last step finds the frame complete: it is delivered, and
    the switch happens at the frame boundary. A frame is cancelled at most once: requests arriving while
    it runs again wait for its end (the frame boundary), so that requests coming faster than frames can
    never keep every frame from finishing. No SBRS-TP transition runs in this mode: abandoning the old frame
    leaves it nothing to overlap.
    """
    node = runner.node
    cancelled: int | None = None
    runner.cancellable = True  # (a request arriving now is taken by ``start_frame``, which clears terminate)
    while True:
        previous, request, scenario, begin = runner.start_frame(arrays)
        calls = runner.calls[scenario]
        done, _ = _steps_until_stopped(runner, scenario, calls, request, inject, stoppable=cancelled is None)
        if done == len(calls):
            mode = node.mode if cancelled is None else "cancel"
            return runner.old_frame_result(scenario, index, begin, request, previous, mode, cancelled)
        inject = None
        runner.cancellable = False  # before ``take`` clears terminate: later requests leave it cleared
        node.frame_cancelled(scenario, done)
        if request is not None:  # this frame was the first of a switch that now ends without an output
            node.abandon(request)
        cancelled = done


def _steps_until_stopped(runner: FrameRunner, scenario: str, calls: Sequence[Callable[[], object]],
                         request: SwitchRequest | None, inject: tuple[int, str] | None, *,
                         stoppable: bool) -> tuple[int, bool]:
    """Run a frame's steps on ``scenario`` in order, as ``cancelling`` and ``resuming`` do: after each step, stop
    when ``stoppable`` and a request for another scenario is pending; a call stopped inside by
    ``RunOptions.terminate`` stops it too. Returns the steps finished (``len(calls)``: the frame is complete)
    and whether a call was stopped inside. ``runner.in_flight`` names the step running (1-based; 0 between
    frames) for ``Runtime._interrupt_resume``; ``inject`` (``sbrs bench``) requests a switch before a step."""
    node = runner.node
    last = len(calls)
    done = 0
    try:
        for call in calls:
            if inject is not None and inject[0] == done + 1:
                node.request(inject[1], "bench")
            runner.in_flight = done + 1
            call()
            done += 1
            if done == 1 and request is not None and last > 1:
                node.begin(request)
            pending = node.pending
            if stoppable and done < last and pending is not None and pending.scenario != scenario:
                break
    except Exception as error:  # onnxruntime raises RuntimeError (IOBinding) or its own Fail for it
        if TERMINATED not in str(error):
            raise
        return done, True
    finally:
        runner.in_flight = 0
    return done, False


def resuming(runner: FrameRunner, arrays: Mapping[str, np.ndarray], index: int,
             inject: tuple[int, str] | None) -> FrameResult:
    """Run frame ``index`` under ``on_switch: resume``. The caller holds the lock.

    Beyond the thesis (Algorithms 6 and 7 always finish the frame in flight on the old scenario): a switch
    request for another scenario n stops the frame in flight on o as ``cancelling`` does — between two steps, or
    inside a call through ``RunOptions.terminate``, which the runtime sets only when the step in flight is not
    one n would run itself (``Runtime._interrupt_resume``: a step of the shared prefix is let finish, its work is
    n's) — and then *the same frame continues on n* from new step r + 1, where r is the deepest point whose
    computed tensors n's execution sequence consumes unchanged (``sbrs.compile.transitions.ResumeTable``: the
    shared prefix of φ^o and φ^n, its live-in tensors still intact in the arena). r = 0 (nothing shared yet, or
    the shared tensors overwritten since) is ``cancel``: the frame runs again from its start on n. So the frame
    is never lost, its one result comes from n and equals n's own model on it, and Δ is n's remaining steps.
    The record says where it resumed (``SwitchRecord.resumed_steps``: r; ``cancelled_steps``: the old steps
    finished); observers get ``frame_cancelled`` for the old scenario's abandoned frame. As under ``cancel``,
    a frame is stopped at most once (later requests wait for its end), and a request seen after the last step
    finds the frame complete: the switch happens at the frame boundary. No SBRS-TP transition runs here.
    """
    node = runner.node
    tables = runner.resume
    runner.cancellable = True  # (a request arriving now is taken by ``start_frame``, which clears terminate)
    previous, request, scenario, begin = runner.start_frame(arrays)
    calls = runner.calls[scenario]
    done, partial = _steps_until_stopped(runner, scenario, calls, request, inject, stoppable=True)
    if done == len(calls):
        return runner.old_frame_result(scenario, index, begin, request, previous, node.mode)
    runner.cancellable = False  # before ``take`` clears terminate: later requests leave it cleared
    switch = node.take()
    if switch is None:  # the request went back to this scenario meanwhile: the frame goes on where it stopped,
        if partial:  # or, when a call was stopped inside, from its start (a band call's line-buffer moves ran)
            done = 0
            for array in arrays.values():
                runner.copy_in[scenario](array)
        for call in calls[done:]:
            call()
        return runner.old_frame_result(scenario, index, begin, request, previous, node.mode)
    node.frame_cancelled(scenario, done)
    if request is not None:  # this frame was the first of a switch that now ends without an output of its own
        node.abandon(request)
    old, new = scenario, switch.scenario
    table = tables.get((old, new))
    resume = 0 if table is None else (table.during[done] if partial else table.after[done])
    new_calls = runner.calls[new]
    if resume == 0:
        for array in arrays.values():
            runner.copy_in[new](array)
    count = len(new_calls)
    for step in range(resume, count):
        new_calls[step]()
        if step == resume and count - resume > 1:
            node.begin(switch)
    return runner.old_frame_result(new, index, begin, switch, old, "resume", done, resume)


class Transition:
    """One SBRS-TP transition: the rest of the old frame and the whole next frame on the new scenario.

    Constraints (Algorithm 7 with the tables of ``sbrs.compile.transitions``): old steps run in order, new
    steps run in order, new step i starts only once old steps 1..wait_i have finished. The SSR was acted on
    after old step ``ssr_step`` (Algorithm 7, line 2). ``deliver`` runs both frames and yields each result as
    its outputs exist (``completion``) or old first (``stream``). Two schedules keep the constraints:

    ``priority`` (default): one thread. Whenever the next new step's wait is met it runs, else the next old
    step runs. Deviation from Algorithm 7, which runs old and new steps side by side: on the 2-core machine
    this was built on, ONNX Runtime already spreads each step over both cores (the global thread pool), and
    two whole models run concurrently took 1.06x (cifar10), 1.24x (tiny), 1.35x (drone) the time of running
    them one after the other (0.80x only for pamap2's tiny 1-D convolutions) — so overlap cannot shorten the
    critical path, but putting the new frame first does: Δ becomes the new frame's own time plus the old steps
    it must wait for. The old frame still finishes on the old scenario with its own output, right after.

    ``threads``: the old frame's rest on a worker thread, the new frame on the caller's (ONNX Runtime releases
    the GIL); new step i waits on a condition for old step wait_i. Algorithm 7's lock-step barrier is relaxed
    to these per-step waits (every constraint of X that stems from a hazard is kept, ``transition`` module
    docstring).
    """

    def __init__(self, runner: FrameRunner, request: SwitchRequest, old: str, table: PairTable, ssr_step: int,
                 arrays: Mapping[str, np.ndarray]) -> None:
        self.runner = runner
        self.request = request
        self.old = old
        self.new = request.scenario
        self.table = table
        self.ssr_step = ssr_step
        self.arrays = arrays
        self.overlapped = 0
        self._done = ssr_step  # old steps finished
        # the ``threads`` schedule's: made there, as each object made here delays the new frame's first step
        self._condition: threading.Condition | None = None
        self._old_calls = runner.calls[old]
        self._old_index, self._old_begin, self._old_request, self._previous = 0, 0.0, None, old

    def old_frame(self, index: int, begin: float, request: SwitchRequest | None, previous: str) -> None:
        """The frame in flight: its stream index, start time, and the switch it is itself the first frame of
        (``request`` from ``previous``, decided at its frame boundary), if any."""
        self._old_index, self._old_begin, self._old_request, self._previous = index, begin, request, previous

    def deliver(self, order: str) -> Iterator[FrameResult]:
        """Run both frames; yield their results in ``order`` (``Runtime.process``). If the caller stops asking
        after the first result, the old frame still finishes (its result is dropped with the generator)."""
        finish_old: Callable[[], FrameResult]
        if self.runner.transition_schedule == "threads":
            self._condition = threading.Condition()
            future = transition_worker(self.runner).submit(self._old_rest)
            try:
                new_result = self._new_frame_threaded()
            except BaseException:
                future.result()
                raise
            finish_old = future.result
        else:
            old_result, new_result = self._priority()
            if old_result is not None:  # the new frame had to wait for the whole old one: it came first
                order = "stream"
            finish_old = self._old_rest if old_result is None else lambda: old_result
        if order == "completion":
            try:
                yield new_result
            finally:
                old_done = finish_old()
            yield old_done
        else:
            yield finish_old()
            yield new_result

    def _priority(self) -> tuple[FrameResult | None, FrameResult]:
        """Until the new frame is done: a new step whenever its wait is met, else the next old step. Returns
        the old frame's result if it finished meanwhile (else None), and the new frame's."""
        runner, node = self.runner, self.runner.node
        new_calls = runner.new_calls[self.new]
        waits, old_steps = self.table.wait, len(self._old_calls)
        old_result: FrameResult | None = None
        new_begin = 0.0
        for step, call in enumerate(new_calls):
            while waits[step] > self._done:
                self._old_calls[self._done]()
                self._done += 1
                if self._done == old_steps:
                    old_result = self._old_result()
                node.step_done(self._done, step)
            if step == 0:
                new_begin = time.perf_counter()
                for array in self.arrays.values():
                    runner.new_copy_in[self.new](array)
            if self._done < old_steps:
                self.overlapped += 1
            call()
            if step == 0 and len(new_calls) > 1:
                node.begin(self.request)
            node.step_done(self._done, step + 1)
        return old_result, self._new_result(new_begin)

    def _old_rest(self) -> FrameResult:
        """The old frame's remaining steps and its result (caller's thread, or the worker under ``threads``)."""
        old_steps = len(self._old_calls)
        try:
            for step in range(self._done + 1, old_steps + 1):
                self._old_calls[step - 1]()
                if step < old_steps:
                    self._old_done(step)
            return self._old_result()
        finally:
            self._old_done(old_steps)  # after the copy-out (it belongs to the last old step)

    def _old_result(self) -> FrameResult:
        return self.runner.old_frame_result(self.old, self._old_index, self._old_begin, self._old_request,
                                              self._previous, "sbrs-tp")

    def _new_result(self, begin: float) -> FrameResult:
        return self.runner.new_frame_result(self.request, self.old, self._old_index + 1, begin, self.ssr_step,
                                              self.overlapped)

    def _old_done(self, step: int) -> None:
        if self._condition is None:  # priority: one thread
            self._done = step
        else:
            with self._condition:
                self._done = step
                self._condition.notify_all()
        self.runner.node.step_done(step, 0)

    def _new_frame_threaded(self) -> FrameResult:
        runner, new = self.runner, self.new
        old_steps = self.table.old_steps
        begin = time.perf_counter()
        for step, (call, wait) in enumerate(zip(runner.new_calls[new], self.table.wait, strict=True), 1):
            if self._done < wait:
                assert self._condition is not None
                with self._condition:
                    while self._done < wait:
                        self._condition.wait()
            if self._done < old_steps:
                self.overlapped += 1
            if step == 1:
                for array in self.arrays.values():
                    runner.new_copy_in[new](array)
            call()
            if step == 1 and len(self.table.wait) > 1:
                runner.node.begin(self.request)
        return self._new_result(begin)
