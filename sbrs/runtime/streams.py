"""Streams: frames in flight at once, one per core, each in an arena of its own (beyond the thesis).

A band call is too small for a pool of threads (its fork and join cost more than the second core gives,
``sbrs.ort_env``), so a runtime by parts runs every call on one thread. Where the build's search chose two
band streams (``sbrs.reduction.ga.with_streams``: the plan counts the buffers once per stream), the runtime
binds every call a second time, to an arena of its own, and ``Runtime.process`` keeps two frames in flight,
each on its own stream and worker thread; ONNX Runtime releases the GIL inside a call, and a session runs
calls of several threads at once. Each worker takes the caller's next frame itself when it is free
(``_Feeder``): a stream never idles while the caller's thread wakes, yields a result and hands it the next
frame (pamap2's 0.1 ms frames: 0.95-1.28 of plain ONNX Runtime's best on two streams that way, against 0.65-0.85
when a thread pool was handed each frame, both against a comparator later found low; 0.74-0.96 against the settled
one on 2026-11-29, docs/MEASUREMENTS.md "The regression guard"). MobileNetV2 1.0@224 at 15.7 MB: 5.9-6.0 ms a
frame on two streams against 10.3-10.9 ms on one (docs/MEASUREMENTS.md). Execution units do the same where the app
asks for it (``runtime.streams: 2``): their sessions then have one thread each, as plain ONNX Runtime's "two frames at
once" has, which beats a two-thread session on models whose layers parallelise poorly (detect, pamap2).

Switching needs no transition room: the frame a request is taken for starts on the stream that is free while
the other stream's frame finishes on the old scenario; their buffers never meet. Where no stream is free and the
frames in flight have long enough left, the youngest is stopped for the request and runs again after the switch's
frame, on its stream (``Streams.stop_for``); where the runtime made sessions of its threads for it (units whose
frames take 2 ms or more), every frame in flight is stopped (one about to end is waited for instead) and the
switch's frame runs on both cores, the other streams waiting, then the stopped frames run again. Results come
back one per frame, in stream order (``completion``: a switch's new frame may pass the old ones), as from the
one-stream loop. ``infer`` runs on stream 0 and waits for its frame in flight.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING

import numpy as np
import onnxruntime as ort

from sbrs.errors import SbrsRuntimeError
from sbrs.runtime.binding import Bound
from sbrs.runtime.device import ArenaMemory
from sbrs.runtime.runner import frames_never_wait
from sbrs.runtime.switching import END_OF_FRAMES, TERMINATED

if TYPE_CHECKING:
    from sbrs.runtime.control_node import SwitchRequest
    from sbrs.runtime.runner import Frame, FrameResult, FrameRunner

#: Where the caller's own thread runs stream 0 (frames that never wait, ``process_in_streams``): results it hands
#: out between two checks, and the mean time the caller may spend on each result (between taking it and asking
#: for the next) before stream 0 gets a thread of its own after all. Stream 0's frames stand still while the
#: caller works on a result; a worker thread costs the caller a wake-up per frame instead (about 10 µs on the
#: development machine: MobileNetV3-Small's 10.3k against 11.8k frames a second).
CALLER_WINDOW = 32
MAX_CALLER_AWAY_S = 10e-6
#: ... the window's longest results left out of that mean (``caller_busy``): a stall of the caller's thread (the
#: system running something else for a moment) is not a caller busy with each result. Counted in full, one stall
#: of 0.43-0.44 ms among results of 2-3 µs gave stream 0 its worker in two long runs of three (pamap2's ``light``,
#: 200k frames), and the rest of the run then went at 22.4-22.9k frames a second against 28.3-29.8k before it.
CALLER_STALLS = 2

#: A switch on streams stops a frame in flight only where every stream's frame has this long left (seconds). A stop
#: is slow to take: on tiny's units (whole calls of 100-170 µs on this machine) ONNX Runtime returns from a call set
#: to stop before it starts after 80-110 µs, and from one stopped in flight 150-170 µs after the flag is set.
#: Switches on pamap2 (0.05-0.2 ms frames) took 0.30 ms stopping at once against 0.28 ms waiting for a free stream;
#: on cifar10 (0.5-1.2 ms) 1.28-1.32 against 1.47-1.48 ms.
MIN_LEFT_S = 200e-6

#: A switch stops every stream's frame and runs its own on both cores (where the runtime made sessions for it) only
#: where every frame in flight has this long left (seconds); else it stops the younger alone. The stops, and the
#: sessions of the switch's frame waking, cost a few tenths of a ms.
BOTH_CORES_MIN_LEFT_S = 1e-3

#: The longest a stream's worker waits, before its next frame, for a switch's frame on both cores
#: (``Streams.wait_for_solo``); such a frame takes one frame's time at most.
SOLO_WAIT_S = 1.0

#: A frame's computed outputs, with the times its stream started and finished it.
Computed = tuple[dict[str, np.ndarray], float, float]


class FrameStopped(Exception):
    """A stream's frame stopped inside a call for a switch (``Streams.stop_for``): it runs again after the switch's
    frame."""


@dataclass(slots=True)
class _InFlight:
    """A frame a stream runs now, as ``Streams.stop_for`` sees it: its index, scenario, whether a switch may stop
    it, and when it began (``time.perf_counter``)."""

    index: int
    scenario: str
    stoppable: bool
    began: float


class Streams:
    """Every stream's arena, bound steps and run options (stream 0's are the runtime's own) and a lock per stream.
    ``bind(arena, run_options)`` binds every step of the plan to another arena of the same size (``bind_parts``, or
    ``bind_units`` without shadow slots), on ``device`` as the first, its calls run with ``run_options``.

    A switch on streams waits for a free stream. Where every stream runs a frame when a request for another
    scenario arrives, ``stop_for`` stops the youngest of them inside its call (``RunOptions.terminate``: ONNX Runtime
    stops at its next node), so that the switch's frame starts on that stream at once; the stopped frame runs again,
    whole, right after it (``process_in_streams``). Only where every frame in flight still has ``MIN_LEFT_S`` to
    run, by its scenario's last frame on the streams: a stopped call takes 0.1-0.2 ms to return, so on shorter
    waits the stop costs more than it saves. Which frames run, and which one is stopped, is read
    and written under one lock with each stream's ``terminate``, so a flag never outlives the frame it was set for.

    With ``bind_on_both_cores`` (the plan bound, per stream, to sessions with the runtime's threads: ``both_cores``),
    a request that finds every stream running a frame of another scenario stops each that may be stopped and has
    ``BOTH_CORES_MIN_LEFT_S`` left, where at least one has and the others end within it (they run whole: on
    drone with ``streams: 2`` one switch in 25 found a frame that close to its end, and its frame ran on one thread
    until 2026-11-29). The first stopped worker (``solo_role``: ``"run"``) takes the next frame, which took the
    request, and runs it on both cores once every other stream's frame has left its call (``wait_for_stopped``);
    the others (``"wait"``) and every worker about to take a frame wait until it ran (``solo_done``,
    ``wait_for_solo``), then the stopped frames run again, whole. One stream's frame running beside the switch's
    would hold one of its two threads back, and one thread of the streams' own sessions runs the switch's frame at
    one core's speed. A stopped call returns only at its next node: drone's other stream left its call 0.3-0.6 ms
    after the first on average (up to 2 ms), and a switch's frame started at once ran its first two units 1-2 ms
    slower than warm, more than the wait costs (docs/MEASUREMENTS.md, "Two streams' switch waits for both stops").
    """

    def __init__(self, count: int, first: Bound, first_arena: ArenaMemory, first_options: ort.RunOptions,
                 arena_bytes: int, alignment: int, bind: Callable[[ArenaMemory, ort.RunOptions], Bound],
                 device: str, bind_on_both_cores: Callable[[ArenaMemory, ort.RunOptions], Bound] | None = None) -> None:
        self.arenas = [first_arena]
        self.bounds = [first]
        self.run_options = [first_options]
        for _ in range(1, count):
            arena = ArenaMemory(arena_bytes, device, alignment)
            options = ort.RunOptions()
            self.arenas.append(arena)
            self.run_options.append(options)
            self.bounds.append(bind(arena, options))
        self.locks = [threading.Lock() for _ in self.bounds]
        self._stop_lock = threading.Lock()
        #: notified (where ``both_cores`` is) when a registered frame leaves its call: ``wait_for_stopped``
        self._left_call = threading.Condition(self._stop_lock)
        self._running: list[_InFlight | None] = [None] * count  # per stream, the frame it runs now
        self._stopping: list[bool] = [False] * count
        self._frame_s: dict[str, float] = {}  # per scenario, its last frame's time on a stream
        #: Per stream, the plan bound to its arena on sessions with the runtime's threads (None: none were made):
        #: where a switch's frame runs on both cores once every stream's frame was stopped for it.
        self.both_cores = (None if bind_on_both_cores is None else
                           [bind_on_both_cores(arena, options) for arena, options in zip(self.arenas, self.run_options,
                                                                                          strict=True)])
        self._solo: set[int] = set()  # streams stopped for a switch on both cores whose workers have not seen it
        self._solo_claimed = False  # a worker runs (or ran) that switch's frame
        self._solo_free = threading.Event()  # clear from such a stop until the switch's frame ran
        self._solo_free.set()
        #: Per stream, whether ``release`` dropped its bindings (written and read under the stream's lock).
        self._released = [False] * count

    def release(self) -> None:
        """Drop every stream's bindings (``Runtime.close``; stream 0's are the runtime's own), each under its stream's
        lock: a frame running on it ends first, and one taken before the close that runs after it raises
        ``SbrsRuntimeError`` in its turn (``_run``). The caller's feeder takes no frame once the runtime is closed."""
        for stream, lock in enumerate(self.locks):
            with lock:
                self._released[stream] = True
                self.bounds[stream].release()
                if self.both_cores is not None:
                    self.both_cores[stream].release()

    def stop_for(self, scenario: str) -> None:
        """A request for ``scenario`` is pending. With ``both_cores``, where every stream runs a frame of another
        scenario: stop every one that may be stopped and has ``BOTH_CORES_MIN_LEFT_S`` or more left, provided at
        least one does and the others end within that; the switch's frame then runs on both cores once all have
        left their calls (class docstring). A frame that ends within 1 ms is not stopped but waited for: stopping
        it saves nothing, and it runs whole. Else, where every stream runs a frame with ``MIN_LEFT_S`` or more left,
        stop the youngest of them if it may be stopped and runs another scenario (never an older one alone: the
        frames after it would wait for it, holding their slots). One stop per switch: a later request renews the
        same stop. Any thread; cheap (the control node calls it under its lock)."""
        with self._stop_lock:
            if self._renew_stops():
                return
            if any(frame is None for frame in self._running):
                return  # a free stream takes the request with its next frame
            running: list[_InFlight] = self._running  # type: ignore[assignment]
            now = time.perf_counter()
            left = [self._frame_s.get(f.scenario, 0.0) - (now - f.began) for f in running]
            if self.both_cores is not None and all(f.scenario != scenario for f in running):
                stops = [s for s, f in enumerate(running) if f.stoppable and left[s] >= BOTH_CORES_MIN_LEFT_S]
                if stops and all(s in stops or left[s] < BOTH_CORES_MIN_LEFT_S for s in range(len(running))):
                    self._solo = set(range(len(running)))  # the switch's frame runs on both cores
                    self._solo_claimed = False
                    self._solo_free.clear()
                    for stream in stops:
                        self._stopping[stream] = True
                        self.run_options[stream].terminate = True
                    return
            if any(frame_left < MIN_LEFT_S for frame_left in left):
                return  # a stream is free about as soon as a stop would free one
            stream = max(range(len(running)), key=lambda s: running[s].index)
            if running[stream].stoppable and running[stream].scenario != scenario:
                self._stopping[stream] = True
                self.run_options[stream].terminate = True

    @property
    def count(self) -> int:
        return len(self.bounds)

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arenas)

    def renew_stops(self) -> None:
        """Set the stop of every frame still to stop again: stream 0's options are the runtime's, which each
        request, and each request taken, rewrites (``Runtime._interrupt_step``)."""
        with self._stop_lock:
            self._renew_stops()

    def _renew_stops(self) -> bool:
        for stream, stopping in enumerate(self._stopping):
            if stopping:
                self.run_options[stream].terminate = True
        return any(self._stopping)

    def solo_role(self, stream: int) -> str | None:
        """What the worker of ``stream``, whose frame a switch just stopped, does: ``"run"`` the switch's frame on
        both cores (the first stopped stream to ask), ``"wait"`` while another stream runs it
        (``wait_for_solo``), or None where the stop was for the younger frame alone."""
        with self._stop_lock:
            if stream not in self._solo:
                return None
            self._solo.discard(stream)
            if self._solo_claimed:
                return "wait"
            self._solo_claimed = True
            return "run"

    def solo_done(self) -> None:
        """The switch's frame on both cores ran (or none took the request): the other streams go on."""
        self._solo_free.set()

    def wait_for_stopped(self, stream: int) -> None:
        """Return once every other stream's frame has left its call (stopped for the switch's frame on both cores,
        which ``stream`` is about to run; class docstring), at most ``SOLO_WAIT_S``."""
        with self._left_call:
            self._left_call.wait_for(
                lambda: all(frame is None for other, frame in enumerate(self._running) if other != stream), SOLO_WAIT_S)

    def wait_for_solo(self) -> None:
        """Return once no switch's frame is due or running on both cores (a worker waits before its next frame).
        At most ``SOLO_WAIT_S``: a frame would then run beside it, slower, never held back for good."""
        if not self._solo_free.is_set():
            self._solo_free.wait(SOLO_WAIT_S)

    def _run(self, stream: int, scenario: str, arrays: Mapping[str, np.ndarray],
             frame: tuple[int, bool] | None = None, on_both_cores: bool = False) -> Computed:
        """``arrays`` run on ``scenario`` on ``stream``, under its lock. ``frame`` (its index, and whether a switch
        may stop it): the frame is registered for ``stop_for`` while it runs, and one it stopped raises
        ``FrameStopped``. ``on_both_cores``: on the sessions of the runtime's threads (``both_cores``)."""
        bound = self.both_cores[stream] if on_both_cores and self.both_cores is not None else self.bounds[stream]
        stopped = False
        with self.locks[stream]:
            if self._released[stream]:  # a frame taken before ``Runtime.close`` and run after it
                raise SbrsRuntimeError("the runtime is closed")
            begin = time.perf_counter()
            if frame is not None:
                with self._stop_lock:
                    self._running[stream] = _InFlight(frame[0], scenario, frame[1], begin)
            try:
                for array in arrays.values():
                    bound.copy_in[scenario](array)
                for call in bound.calls[scenario]:
                    call()
                outputs = {name: copy() for name, copy in bound.copy_out[scenario].items()}
                end = time.perf_counter()
                if frame is not None and not on_both_cores:
                    self._frame_s[scenario] = end - begin
                return outputs, begin, end
            except Exception as error:  # onnxruntime raises RuntimeError (IOBinding) or its own Fail for it
                if frame is not None and self._stopping[stream] and TERMINATED in str(error):
                    stopped = True
                    raise FrameStopped(f"frame {frame[0]} stopped for a switch") from error
                raise
            finally:
                if frame is not None:
                    with self._stop_lock:
                        self._running[stream] = None
                        if self.both_cores is not None:  # (only a switch on both cores waits for it)
                            self._left_call.notify_all()
                        self._stopping[stream] = False
                        self.run_options[stream].terminate = False
                        if not stopped and stream in self._solo:  # it ended before the stop took: not stopped
                            self._solo.discard(stream)
                            if not self._solo and not self._solo_claimed:
                                self._solo_free.set()


@dataclass
class _Taken:
    """A frame a stream took: its index in the stream of frames, its scenario, the switch request it was the
    first frame of (and the scenario before), its arrays, and what the stream computed (or the error it raised)
    once it has."""

    index: int
    scenario: str
    request: SwitchRequest | None
    previous: str
    arrays: Mapping[str, np.ndarray]
    computed: Computed | BaseException | None = None
    lent: bool = False  # taken on the slot of a frame stopped for a switch, holding none of its own


class _Feeder:
    """The caller's frames, handed to the streams' workers one at a time: each worker takes its next frame
    itself the moment it is free, so a stream never waits for the caller's thread to hand it one (two wake-ups
    and the caller's own work per frame: on pamap2's 0.1 ms frames two streams ran no faster than one that
    way). At most ``slots`` frames are taken and not yet given to the caller, so workers never run ahead of a
    slow caller by more than that. Taking a frame checks it and takes the switch request for it
    (``FrameRunner.take_request``), as the one-stream loop does when a frame starts.

    Everything a frame passes through between threads is a lock or a queue of the C runtime, never a
    ``threading.Condition`` (Python code, and a new lock per wait): the free slots are tokens in a queue, and the
    caller's thread reads what was taken (``next_index``, ``scenarios``) without a lock, as the only thread that
    removes entries. On pamap2's 0.05 ms frames the threads' coordination is what two streams run at: 19-20k
    frames a second with conditions, 21-22k with tokens, where the bare calls ran 31-34k (docs/DESIGN.md)."""

    def __init__(self, runner: FrameRunner, frames: Iterable[Frame], slots: int, workers: int, *,
                 own_copies: bool = False) -> None:
        self.runner = runner
        self.source = iter(frames)
        # Take each frame as a copy of its arrays: a source that may refill the array it handed over (a capture loop
        # into one buffer) does so when the next frame is taken, by another stream, maybe before this frame was
        # copied into its arena, and before a frame stopped for a switch runs again (17 results in 300 were
        # another frame's on pamap2); one stream, or plain ONNX Runtime, is done with a frame before the next.
        self.own_copies = own_copies
        self.workers = workers
        self.free: SimpleQueue[None] = SimpleQueue()  # a token per slot not in use
        for _ in range(slots):
            self.free.put(None)
        self.next_index = 0  # frames taken so far; written under ``source_lock`` after ``scenarios``
        self.scenarios: dict[int, str] = {}  # a frame taken and not yet given to the caller: its scenario
        self.stopped = False
        self.error: BaseException | None = None  # the malformed frame's (or the source's) error, raised in turn
        self.source_lock = threading.Lock()  # one worker at a time takes from the source, in stream order
        #: the switch requests frames taken took whose results were not yet recorded (``process_in_streams``)
        self.requests: list[SwitchRequest] = []

    def take(self, *, wait: bool = True, lent: bool = False) -> _Taken | None:
        """The next frame for the worker asking, or None when there is none to take (the frames ended, one was bad, or
        the caller stopped). A live source may keep a worker waiting here for its next frame; the caller's
        thread meanwhile goes on giving out the results that exist. Not ``wait``: None at once where no slot is
        free (the caller's own thread, which frees the slots, asks so). ``lent``: on the slot of the worker's frame
        stopped for a switch, without waiting for one: the stopped frame runs again only after this one, and the
        caller may be waiting for it while every other slot holds a later frame of its scenario."""
        if not lent:  # a free slot (``given`` and ``stop`` put them)
            try:
                self.free.get(block=wait)
            except Empty:
                return None
        taken = None
        try:
            with self.source_lock:
                if self.stopped or self.error is not None:
                    return None
                runner = self.runner
                try:
                    frame = next(self.source, END_OF_FRAMES)
                    if frame is END_OF_FRAMES:
                        self.stop()
                        return None
                    arrays = runner.checked_frame(frame)
                    if self.own_copies:
                        arrays = {name: array.copy() for name, array in arrays.items()}
                except BaseException as error:  # raised to the caller after the frames before it
                    self.error = error
                    return None
                with runner.lock:
                    if runner.closed:
                        self.error = SbrsRuntimeError("the runtime is closed")
                        return None
                    previous, request, scenario = runner.take_request()
                    if request is not None:
                        self.requests.append(request)
                index = self.next_index
                taken = _Taken(index, scenario, request, previous, arrays, lent=lent)
                self.scenarios[index] = scenario
                self.next_index = index + 1
                return taken
        finally:
            if taken is None and not lent:
                self.free.put(None)  # a take that took nothing holds no slot

    def given(self, taken: _Taken) -> None:
        """``taken``'s result went to the caller (or was counted): its slot is free (a lent one was never held)."""
        del self.scenarios[taken.index]
        if not taken.lent:
            self.free.put(None)

    def stop(self) -> None:
        """No more frames are taken; a worker waiting for a slot wakes and ends."""
        self.stopped = True
        for _ in range(self.workers):
            self.free.put(None)


def caller_busy(aways: Sequence[float]) -> bool:
    """Whether a caller whose thread runs stream 0 spends more than ``MAX_CALLER_AWAY_S`` on each result: the mean of
    ``aways`` (seconds between handing out each result of a window and being asked for the next) without its
    ``CALLER_STALLS`` longest."""
    kept = sorted(aways)[:max(1, len(aways) - CALLER_STALLS)]
    return sum(kept) > len(kept) * MAX_CALLER_AWAY_S


def process_in_streams(runner: FrameRunner, streams: Streams, frames: Iterable[Frame],
                       order: str) -> Iterator[FrameResult]:
    """``Runtime.process`` on streams: a worker thread per stream takes the caller's next frame when it is free
    (``_Feeder``), each frame's scenario (and any switch request) taken when it starts; results are yielded one
    per frame in ``order``. A malformed frame raises ``InputError`` after the frames before it were yielded;
    frames still in flight when the caller stops are finished and counted.

    Where the frames never wait (``frames_never_wait``: in memory, a file) the caller's own thread is stream 0's
    worker: between handing out results it takes a frame and runs it, and only the other streams have threads.
    A result then reaches the caller without a thread waking it up for every frame (MobileNetV3-Small at 64x64,
    0.09 ms a frame on two streams: 10.3k frames a second with a worker per stream, 11.0k so, where the bare calls
    on two threads ran 11.8k). Stream 0 stands still while the caller works on a result, so a caller that spends
    more than ``MAX_CALLER_AWAY_S`` on each (over ``CALLER_WINDOW`` results, a stall or two of its thread left out:
    ``caller_busy``) gets a worker for stream 0 after all. A source that may wait keeps a worker per stream from
    the start: the caller's thread waiting on it would hold the other stream's finished frames back from the
    caller."""
    never_wait = frames_never_wait(frames)
    caller_runs = never_wait  # until the caller turns out to spend its time on each result
    # a slot per stream, one for a result waiting for the caller, and, where the caller's thread runs stream 0, one
    # more: it hands out nothing during its own frame, and one that ends before a worker's (whose result is due
    # first) goes on with the next; without it the worker, finishing then, found every slot held and its core
    # idled for the rest of the caller's frame (drone on two streams: one frame in ten lost, in blocks of 20); kept
    # where stream 0 gets a worker later in the call, which only lets one more frame be taken ahead
    feeder = _Feeder(runner, frames, slots=streams.count + 1 + caller_runs, workers=streams.count - caller_runs,
                     own_copies=not caller_runs)
    done: SimpleQueue[_Taken | int] = SimpleQueue()  # a computed frame, or a worker's stream when it ends
    run = streams._run

    def compute(stream: int, taken: _Taken, *, stoppable: bool = False, seen: bool = True,
                on_both_cores: bool = False) -> bool:
        """``taken`` run on ``stream``, its outputs (or the error it raised) kept for its turn; False where a switch
        stopped it (``Streams.stop_for``, only where ``stoppable``): it is to run again. ``seen``: registered as
        running for ``stop_for`` (not on the caller's thread: a stop waits for every stream to run a frame, and the
        caller's thread takes the request with its next frame). ``on_both_cores``: a switch's frame, on the
        sessions of the runtime's threads."""
        try:
            taken.computed = run(stream, taken.scenario, taken.arrays, (taken.index, stoppable) if seen else None,
                                 on_both_cores)
        except FrameStopped:
            return False
        except BaseException as error:  # raised to the caller in its frame's turn
            taken.computed = error
            feeder.stop()
        return True

    def run_on(stream: int, taken: _Taken) -> None:
        """``taken`` run on a worker's ``stream`` and handed in. Where a switch stopped it, the next frame runs first
        if it took the switch's request, and ``taken`` again after it; else (the other stream took the request first,
        or it went away) ``taken`` runs first, as its results are due first. The next frame is taken on the stopped
        frame's slot (``_Feeder.take``), and neither is stopped again: the stream's frames in flight stay at two, and
        the stopped frame, which the caller may be waiting for, always runs."""
        if compute(stream, taken, stoppable=True):
            done.put(taken)
            return
        role = streams.solo_role(stream)
        if role == "wait":  # every stream's frame stopped; another runs the switch's frame on both cores
            streams.wait_for_solo()
            compute(stream, taken)
            done.put(taken)
            return
        following = feeder.take(lent=True)
        switch_first = following is not None and following.request is not None
        if role == "run" and not switch_first:  # the other stream took the request first, or it went away
            streams.solo_done()
        for frame in (following, taken) if switch_first else (taken, following):
            if frame is not None:
                on_both_cores = role == "run" and switch_first and frame is following
                if on_both_cores:
                    streams.wait_for_stopped(stream)
                compute(stream, frame, on_both_cores=on_both_cores)
                done.put(frame)
                if on_both_cores:
                    streams.solo_done()

    def work(stream: int) -> None:
        try:
            while True:
                streams.wait_for_solo()  # (a frame started beside a switch's frame on both cores slows it)
                if (taken := feeder.take()) is None:
                    break
                run_on(stream, taken)
        finally:
            done.put(stream)

    def start_worker(stream: int) -> None:
        threading.Thread(target=work, args=(stream,), name=f"sbrs-stream-{stream}", daemon=True).start()

    for stream in range(int(caller_runs), streams.count):
        start_worker(stream)
    running = streams.count - int(caller_runs)
    aways: list[float] = []  # the caller's time on each result of the window, while its thread runs stream 0
    arrived: dict[int, _Taken] = {}
    head = 0  # the first frame not yet given to the caller (frames after it may have been, by ``passed``)
    passed: set[int] = set()  # frames given before ``head``: a switch's new frame, in completion order

    def receive() -> None:
        """Wait for the next computed frame, or for a worker to end."""
        nonlocal running
        item = done.get()
        if isinstance(item, int):
            running -= 1
        else:
            arrived[item.index] = item

    def result_of(taken: _Taken) -> FrameResult:
        nonlocal head
        del arrived[taken.index]
        feeder.given(taken)
        if taken.index == head:
            head += 1
            while head in passed:
                passed.remove(head)
                head += 1
        else:
            passed.add(taken.index)
        if isinstance(taken.computed, BaseException):
            raise taken.computed
        outputs, begin, end = taken.computed  # type: ignore[misc]
        with runner.lock:
            result = runner.frame_result(taken.scenario, taken.index, outputs, begin, end, taken.request,
                                         taken.previous)
        if taken.request is not None:  # recorded with its result (``feeder.requests`` stays short)
            feeder.requests.remove(taken.request)
        return result

    try:
        while True:
            while caller_runs and not done.empty():  # what the other streams finished, without waiting
                receive()
            if head in arrived:
                left = time.perf_counter() if caller_runs else 0.0
                yield result_of(arrived[head])
                if caller_runs:
                    aways.append(time.perf_counter() - left)
                    if len(aways) == CALLER_WINDOW:  # a caller busy with each result: stream 0 gets a thread
                        if caller_busy(aways) and not feeder.stopped:
                            caller_runs = False
                            feeder.workers += 1  # before the thread exists: a later ``stop`` wakes it too
                            running += 1
                            start_worker(0)
                        aways.clear()
                continue
            if order == "completion" and head != feeder.next_index:
                # only a switch's new frames pass the frames before them (``Runtime.process``): frames of one
                # scenario come back in stream order even where a later one finished first (the second stream's,
                # or one run while a frame stopped for the switch waits to run again), so the switch's own frame
                # is the first of its scenario to come out
                taken_scenarios = feeder.scenarios
                passing = [t for t in arrived.values()
                           if all(taken_scenarios.get(k) != t.scenario for k in range(head, t.index))]
                if passing:
                    yield result_of(min(passing, key=lambda t: t.index))
                    continue
            if caller_runs and (taken := feeder.take(wait=False)) is not None:  # stream 0, on the caller's thread
                compute(0, taken, seen=False)
                arrived[taken.index] = taken
                continue
            if head == feeder.next_index and running == 0:  # nothing taken that the caller has not had
                if feeder.error is not None:
                    raise feeder.error
                return
            if not never_wait and done.empty():
                runner.settle_before_waiting()  # the streams may wait for the source (a camera's next frame)
            receive()
    finally:
        feeder.stop()
        while running:
            receive()
        for taken in sorted(arrived.values(), key=lambda t: t.index):  # finished in flight: counted
            if not isinstance(taken.computed, BaseException):  # a failed frame's error was the caller's, or none
                result_of(taken)
        with runner.lock:
            runner.settle()
            # a request taken by a frame with no result (it failed, or the caller's thread was interrupted between
            # taking it and its result) ends without one: else the node shows its switch under way for good
            runner.abandon_unanswered(feeder.requests)
