"""One stream or two for an app's execution units (``runtime.streams: auto``), measured when the build is made.

One stream runs one frame at a time, each unit on its session's threads (``runtime.threads``, or one where the
build measured that faster: ``sbrs.compile.unit_threads``), and a switch under SBRS-TP starts the new scenario's
frame while the old one finishes (``sbrs.runtime.switching``). Two streams run two frames at once on one-thread
sessions (``sbrs.runtime.streams``): the setting of plain ONNX Runtime's "two frames at once", which wins where a
model's layers parallelise poorly (pamap2, detect, MobileNetV3 at 64×64: 1.2-1.7x the frames of two intra-op
threads on this 2-core machine), and loses nothing where they parallelise well only if the second frame keeps
the second core as busy as the pool did (ResNet-18: it does not). A switch on two streams waits for a free
stream (or, where both frames in flight have 0.2 ms or more left, stops the younger one: ``Streams.stop_for``),
without SBRS-TP's overlap, and its new frame runs on one thread.

The build times each scenario's frame both ways on the build's own unit files (interleaved blocks after an untimed
warm-up, the best of ``ROUNDS``; the units called in order on random inputs of their shapes; two streams with the
runtime's hand-offs, ``_two_streams``; plain ONNX Runtime's two frames at once as ``sbrs bench`` runs them,
``two_frames_at_once``), and ``choose_streams`` decides on those figures. The best block, not the median: on this 2-core
virtual machine a block of one stream ran 1.5-2x its usual time now and then (the scheduler placing the pool's
second thread beside the first for tens of ms), and the median of seven such blocks gave drone's ResNet-18
scenarios a gain of 1.3-2.0 on two streams that ``sbrs bench`` did not find (0.91-1.04 of plain ONNX Runtime on one
stream). Each block of one stream follows one untimed frame (the first after a block of two paid its pool's
wake-up), and plain ONNX Runtime's two frames start ``DEFAULT_SPIN_SETTLE_S`` after its threaded session's block,
whose threads spin on for some 30 ms and took a core from them (ShuffleNetV2 int8: a gain of 0.99 measured where
plain two frames run 1.7x its threads).

    two streams when they give at least ``MIN_GAIN`` (10 %) more frames per second over the app's scenarios
    (geometric mean), on frames of under ``CHECKED_FRAME_S`` (1 ms) on one thread only where plain ONNX Runtime's
    two frames at once also beat its intra-op threads on the scenarios' own models by that much (there the
    runtime's hand-offs of a frame between three threads cost about as much as the frame, which the units'
    measurement does not see) and only where two streams give ``LARGE_GAIN`` there (tiny: 1.12x measured, where
    ``sbrs bench`` found 0.76-0.93 of plain ONNX Runtime's best on two streams against 0.78-0.87 on one, and a
    switch waited 0.12 ms longer than plain ONNX Runtime's for a free stream), and a switch on them costs little:
    every scenario's frame on one thread takes at most
    ``MAX_SHORT_FRAME_S`` (5 ms: the new frame's wait for a free stream plus its one-thread run add less than
    such a frame), or, on frames of at most ``MAX_LONG_FRAME_S`` (50 ms) on one thread, the gain is large
    (``LARGE_GAIN``, 1.25: one stream would then run at most 0.8 of what plain ONNX Runtime's two frames at
    once reach); else one stream, whose SBRS-TP switch matters more on long frames (drone's ResNet-18 scenarios:
    0.73-0.80 of plain ONNX Runtime's Δ on one stream; detect on two streams 1.79x, 1.11-1.13x since a switch
    stops the younger frame in flight, 0.79-0.95x since it stops both and runs on both cores, against 0.71-0.79x
    on one stream; two streams also hold a second arena, and there a second set of sessions: detect's PSS went
    from 0.75 to 0.95-1.05 of plain ONNX Runtime's with every session loaded), and above all on the
    longest (multi-cnn's ResNet-50, 0.1-0.2 s a frame on one thread: a switch would wait for such a frame).
    Since a worker no longer waits for a slot while the caller's thread runs a frame (2026-11-29), two streams run
    drone, multi-cnn and detect at 0.92-1.00 of plain ONNX Runtime's better setting, where one stream runs them at
    0.69-0.96; but a switch on them took 1.03-1.04x plain ONNX Runtime's Δ on drone and multi-cnn (one stream:
    0.72-0.79x), and detect's process held as much as plain ONNX Runtime's (docs/MEASUREMENTS.md, "Two streams:
    a worker no longer waits"), so the rule stands.

The choice and its figures go in the build's manifest (``streams``); ``runtime.streams: 1`` or ``2`` is never
measured. Timing decides only what the build records, never a test (tests check ``choose_streams`` on figures).
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

#: Two streams must give this many times the frames per second of one stream (geometric mean over scenarios).
MIN_GAIN = 1.10
#: ... and where the longest frame on one thread is under this, plain ONNX Runtime's two frames at once must beat its
#: intra-op threads by as much on the scenarios' own models: on such frames the runtime's per-frame hand-offs between
#: the caller's thread and two workers cost about as much as the frame, which the units' measurement does not see
#: (tiny, 0.33-0.55 ms: measured 0.97-1.31x, ran 0.62x of one stream's frames on two, where plain ONNX Runtime's
#: two frames ran 0.7-0.9x its threads; MobileNetV3-Small at 64x64: 1.34-1.94x measured, plain two frames 1.3-2.5x
#: its threads, and sbrs on two streams 1.2-1.4x plain ONNX Runtime's better setting).
CHECKED_FRAME_S = 0.001
#: ... and every scenario's frame on one thread (two periods of two streams) must be at most this long,
MAX_SHORT_FRAME_S = 0.005
#: ... unless two streams give this much more, on frames of at most this long on one thread.
LARGE_GAIN = 1.25
MAX_LONG_FRAME_S = 0.05
#: Interleaved rounds per scenario, and the shortest timed block (seconds); blocks of two streams hold at least
#: two frames per stream.
ROUNDS = 5
MIN_BLOCK_S = 0.03
#: Each side runs untimed for this long (seconds) before the blocks: ONNX Runtime plans a session's memory on its
#: first calls (drone's ResNet-18 units: the first 5-10 frames 1.5-2x the later ones on this machine).
WARM_S = 0.05

@dataclass(frozen=True)
class ScenarioStreams:
    """A scenario's frame measured both ways: seconds per frame one at a time (``one_s``) and with two frames at
    once on one-thread sessions (``two_s``: the period, one over the frames per second of both streams)."""

    one_s: float
    two_s: float
    plain_threads_s: float | None = None
    plain_two_s: float | None = None

    @property
    def gain(self) -> float:
        return self.one_s / self.two_s

    @property
    def plain_gain(self) -> float | None:
        """Plain ONNX Runtime's two frames at once over its intra-op threads on the scenario's own model, where
        measured (frames under ``CHECKED_FRAME_S``)."""
        if self.plain_threads_s is None or self.plain_two_s is None:
            return None
        return self.plain_threads_s / self.plain_two_s

    @property
    def one_thread_frame_s(self) -> float:
        """A frame's time on one stream of two (each stream runs a frame while the other runs another)."""
        return 2 * self.two_s

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScenarioStreams:
        def seconds(key: str) -> float | None:
            return None if data.get(key) is None else float(data[key])

        return cls(float(data["one_stream_s"]), float(data["two_streams_s"]), seconds("plain_threads_s"),
                   seconds("plain_two_frames_s"))

    def to_dict(self) -> dict[str, float | None]:
        plain = self.plain_gain
        return {"one_stream_s": round(self.one_s, 7), "two_streams_s": round(self.two_s, 7),
                "gain": round(self.gain, 4),
                "plain_threads_s": None if self.plain_threads_s is None else round(self.plain_threads_s, 7),
                "plain_two_frames_s": None if self.plain_two_s is None else round(self.plain_two_s, 7),
                "plain_gain": None if plain is None else round(plain, 4)}


@dataclass(frozen=True)
class StreamsChoice:
    """How many streams a build of execution units runs and why: ``asked`` (app.yaml's ``runtime.streams``:
    ``auto``, 1 or 2), ``streams`` (the runtime's), ``reason`` (one sentence) and, where measured, ``figures``
    per scenario with their ``gain`` (geometric mean of the scenarios' gains) and the machine's ``load`` (its
    1-minute load average as the measuring began: above its cores, the figures are those of a busy machine,
    where intra-op threads wait for each other and two streams win far more than on a quiet one)."""

    streams: int
    asked: str
    reason: str
    figures: Mapping[str, ScenarioStreams] | None = None
    load: float | None = None

    def busy(self, cores: int) -> bool:
        """Whether the figures were measured on a machine busier than it has cores
        (``sbrs.compile.timing_cache.is_busy``)."""
        from sbrs.compile.timing_cache import is_busy

        return is_busy(self.load, cores)

    @property
    def gain(self) -> float | None:
        if not self.figures:
            return None
        return statistics.geometric_mean(f.gain for f in self.figures.values())

    def to_dict(self) -> dict[str, Any]:
        gain = self.gain
        return {"streams": self.streams, "asked": self.asked, "reason": self.reason,
                "gain": None if gain is None else round(gain, 4), "load": self.load,
                "figures": None if self.figures is None else {s: f.to_dict() for s, f in self.figures.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamsChoice:
        figures = data.get("figures")
        return cls(int(data["streams"]), str(data["asked"]), str(data["reason"]),
                   None if figures is None else {s: ScenarioStreams.from_dict(f) for s, f in figures.items()},
                   None if data.get("load") is None else float(data["load"]))


def choose_streams(figures: Mapping[str, ScenarioStreams], load: float | None = None) -> StreamsChoice:
    """The rule of the module docstring on measured ``figures`` (``load``: the machine's, recorded beside them):
    two streams or one, with the reason."""
    gain = StreamsChoice(1, "auto", "", figures).gain or 1.0
    longest = max(f.one_thread_frame_s for f in figures.values())
    plain = [f.plain_gain for f in figures.values() if f.plain_gain is not None]
    plain_gain = statistics.geometric_mean(plain) if plain else None
    said = f"two streams ran {gain:.2f}x the frames of one"
    if gain < MIN_GAIN:
        streams, reason = 1, f"{said}, under {MIN_GAIN:.2f}x: one stream"
    elif longest < CHECKED_FRAME_S and (plain_gain or 0.0) < MIN_GAIN:
        streams, reason = 1, (f"{said}, but on frames of at most {longest * 1e3:.2f} ms on one thread plain ONNX "
                              f"Runtime's two frames at once ran {plain_gain or 0:.2f}x its threads, under "
                              f"{MIN_GAIN:.2f}x: one stream (the streams' hand-offs cost about a frame)")
    elif longest < CHECKED_FRAME_S and gain < LARGE_GAIN:
        streams, reason = 1, (f"{said}, under {LARGE_GAIN:.2f}x on frames of at most {longest * 1e3:.2f} ms on one "
                              "thread: one stream (the streams' hand-offs take more of such frames than measured)")
    elif longest <= MAX_SHORT_FRAME_S:
        streams, reason = 2, (f"{said}, on frames of at most {longest * 1e3:.2f} ms on one thread: a switch waiting "
                              "for a free stream costs less than such a frame")
    elif longest > MAX_LONG_FRAME_S:
        streams, reason = 1, (f"{said}, on frames of up to {longest * 1e3:.0f} ms on one thread: a switch waiting for "
                              "such a frame costs more, one stream keeps SBRS-TP's faster switch")
    elif gain >= LARGE_GAIN:
        streams, reason = 2, (f"{said} (at least {LARGE_GAIN:.2f}x), on frames of up to {longest * 1e3:.1f} ms on "
                              "one thread")
    else:
        streams, reason = 1, (f"{said}, under {LARGE_GAIN:.2f}x on frames of up to {longest * 1e3:.1f} ms on one "
                              "thread: one stream keeps SBRS-TP's faster switch")
    return StreamsChoice(streams, "auto", reason, dict(figures), load)


def _frames(chain: Sequence[tuple[Any, dict[str, np.ndarray]]], frames: int) -> None:
    for _ in range(frames):
        for session, feed in chain:
            session.run(None, feed)


def seconds_per_frame(chain: Sequence[tuple[Any, dict[str, np.ndarray]]], frames: int) -> float:
    """Seconds per frame of ``chain`` (sessions and their feeds, called in order) run ``frames`` times, one frame
    at a time (``sbrs.compile.session_choice`` times units and the one graph with it too)."""
    start = time.perf_counter()
    _frames(chain, frames)
    return (time.perf_counter() - start) / frames


def _two_streams(chain: Sequence[tuple[Any, dict[str, np.ndarray]]], frames: int) -> float:
    """Seconds per frame with ``2 * frames`` frames on two worker threads at once, as the runtime's streams run
    them (``sbrs.runtime.streams``): each worker takes the next frame under a shared lock, runs it (the sessions
    shared; ONNX Runtime releases the GIL inside a call) and hands it over a queue to this thread, which takes
    every frame in turn. The hand-offs are what two streams pay per frame beside the calls: on frames of 0.1-0.3
    ms (tiny, pamap2) bare calls on two threads ran 1.5x one stream where the runtime's streams gained nothing.
    The workers are started before the clock (``_started``): the runtime's streams are started once."""
    from queue import SimpleQueue

    total = 2 * frames
    taken = [0]
    lock = threading.Lock()
    done: SimpleQueue[int] = SimpleQueue()

    def work() -> None:
        while True:
            with lock:
                if taken[0] >= total:
                    return
                taken[0] += 1
            for session, feed in chain:
                session.run(None, feed)
            done.put(1)

    with _started([work, work], "sbrs-build-stream") as start:
        for _ in range(total):
            done.get()
        seconds = time.perf_counter() - start
    return seconds / total


def two_frames_at_once(chain: Sequence[tuple[Any, dict[str, np.ndarray]]], frames: int) -> float:
    """Seconds per frame with ``2 * frames`` frames, half on this thread and half on another at the same time, no
    hand-offs: plain ONNX Runtime's "two frames at once", the setting a user would pick (``sbrs bench`` times it too).
    (Timed with the runtime's hand-offs instead, ``_two_streams``, MobileNetV3-Small's own model at 64x64 measured
    0.92x its intra-op threads where plain two frames ran 1.47x, and the check below kept it on one stream.)"""
    with _started([lambda: _frames(chain, frames)], "sbrs-plain-two-frames") as start:
        _frames(chain, frames)
    return (time.perf_counter() - start) / (2 * frames)


@contextmanager
def _started(works: Sequence[Callable[[], None]], name: str) -> Iterator[float]:
    """Threads running ``works``, each started and waiting, all let go at once with this thread: yields the
    moment they went (``time.perf_counter``), and joins them on leaving. A thread's start (some 0.1 ms) is not a
    frame's cost: the runtime's streams start once."""
    gate = threading.Barrier(len(works) + 1)

    def gated(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            gate.wait()
            work()
        return run

    threads = [threading.Thread(target=gated(work), name=f"{name}-{i}") for i, work in enumerate(works)]
    for thread in threads:
        thread.start()
    gate.wait()
    try:
        yield time.perf_counter()
    finally:
        for thread in threads:
            thread.join()


def measure_streams(paths: Mapping[str, str], sequences: Mapping[str, Sequence[str]], providers: tuple[str, ...],
                    threads: Callable[[str], int], *, optimized: bool, warm: frozenset[str],
                    plain: Mapping[str, str] | None = None) -> dict[str, ScenarioStreams]:
    """Each scenario of ``sequences`` (its unit ids in order; ``paths``: unit id → model file) timed one frame at
    a time on sessions of ``threads(unit)`` threads (the units in ``warm`` kept warm) and two frames at once on
    one-thread sessions: the best of ``ROUNDS`` interleaved blocks (module docstring). Where the scenarios' frames
    are short (``CHECKED_FRAME_S``) the scenarios' own model files in ``plain`` (scenario → file) are timed too, in
    plain ONNX Runtime sessions: with its default options (intra-op threads on every core), and two frames at once
    on one-thread sessions."""
    from sbrs.compile.unit_threads import numpy_type, random_feed
    from sbrs.ort_env import DEFAULT_SPIN_SETTLE_S, create_session

    rng = np.random.default_rng(0)
    pools: dict[str, Any] = {}
    singles: dict[str, Any] = {}
    feeds: dict[str, dict[str, np.ndarray]] = {}
    figures: dict[str, ScenarioStreams] = {}
    last_use = {unit: index for index, units in enumerate(sequences.values()) for unit in units}
    for index, (scenario, units) in enumerate(sequences.items()):
        for unit in units:
            if unit not in pools:
                pools[unit] = create_session(paths[unit], providers, threads=threads(unit), optimized=optimized,
                                             warm=unit in warm)
                singles[unit] = create_session(paths[unit], providers, threads=1, optimized=optimized)
                feeds[unit] = random_feed(pools[unit], rng)
        one_s, two_s = _interleaved([(pools[u], feeds[u]) for u in units], [(singles[u], feeds[u]) for u in units])
        figures[scenario] = ScenarioStreams(one_s, two_s)
        # sessions no later scenario runs go now: every unit's held at once took 60 scenarios' build to 2.8 GB
        for unit in {unit for unit in units if last_use[unit] == index}:
            del pools[unit], singles[unit], feeds[unit]
    if plain and max(f.one_thread_frame_s for f in figures.values()) < CHECKED_FRAME_S:
        import onnxruntime as ort

        one_thread = ort.SessionOptions()
        one_thread.intra_op_num_threads = 1
        for scenario, path in plain.items():
            threaded = ort.InferenceSession(path, providers=list(providers))  # ONNX Runtime's defaults, as a user's
            single = ort.InferenceSession(path, one_thread, providers=list(providers))
            feed = {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(
                numpy_type(i.type)) for i in threaded.get_inputs()}
            threads_s, two_s = _interleaved([(threaded, feed)], [(single, feed)], two_frames=two_frames_at_once,
                                            settle=DEFAULT_SPIN_SETTLE_S)
            figures[scenario] = replace(figures[scenario], plain_threads_s=threads_s, plain_two_s=two_s)
    return figures


def _interleaved(one_chain: Sequence[tuple[Any, dict[str, np.ndarray]]],
                 two_chain: Sequence[tuple[Any, dict[str, np.ndarray]]],
                 two_frames: Callable[[Sequence[tuple[Any, dict[str, np.ndarray]]], int], float] = _two_streams,
                 settle: float = 0.0) -> tuple[float, float]:
    """Seconds per frame of ``one_chain`` one frame at a time and of ``two_chain`` two at once (``two_frames``: as
    the runtime's streams run them, or plain ONNX Runtime's ``two_frames_at_once``): the best of ``ROUNDS`` interleaved
    blocks of at least ``MIN_BLOCK_S``, those of two after a pause of ``settle`` seconds (``DEFAULT_SPIN_SETTLE_S``
    where ``one_chain`` is a session of ONNX Runtime's default options, whose threads spin on after its block)."""
    _warm(lambda: seconds_per_frame(one_chain, 1))  # the sessions' first calls plan their memory
    frames = max(1, math.ceil(MIN_BLOCK_S / max(seconds_per_frame(one_chain, 2), 1e-6)))
    time.sleep(settle)
    _warm(lambda: two_frames(two_chain, 1))
    one_s, two_s = _best_blocks([
        # lead-in: the first frame after the other side's block pays its pools' wake-up
        (lambda: _frames(one_chain, 1), lambda: seconds_per_frame(one_chain, frames)),
        (lambda: time.sleep(settle), lambda: two_frames(two_chain, max(2, frames // 2)))])
    return one_s, two_s


def compare_chains(first: Sequence[tuple[Any, dict[str, np.ndarray]]],
                   second: Sequence[tuple[Any, dict[str, np.ndarray]]]) -> tuple[float, float]:
    """Seconds per frame of two chains (sessions and their feeds, called in order), each run one frame at a time,
    measured as the streams are: each warmed for ``WARM_S``, then the best of ``ROUNDS`` interleaved blocks of at
    least ``MIN_BLOCK_S`` (the block's frames counted on ``first``), each block after one untimed frame of its own
    chain (``sbrs.compile.session_choice`` times the units against the one graph with it)."""
    _warm(lambda: seconds_per_frame(first, 1))
    _warm(lambda: seconds_per_frame(second, 1))
    frames = max(1, math.ceil(MIN_BLOCK_S / max(seconds_per_frame(first, 2), 1e-6)))
    first_s, second_s = _best_blocks([(lambda: _frames(first, 1), lambda: seconds_per_frame(first, frames)),
                                      (lambda: _frames(second, 1), lambda: seconds_per_frame(second, frames))])
    return first_s, second_s


def _best_blocks(sides: Sequence[tuple[Callable[[], object], Callable[[], float]]]) -> list[float]:
    """Each side's untimed lead-in then its timed block (seconds per frame), the sides in turn, ``ROUNDS`` times:
    the best block of each side (module docstring: a block now and then runs at half speed on this machine)."""
    samples: list[list[float]] = [[] for _ in sides]
    for _ in range(ROUNDS):
        for sample, (lead_in, block) in zip(samples, sides, strict=True):
            lead_in()
            sample.append(block())
    return [min(sample) for sample in samples]


def _warm(frame: Callable[[], object]) -> None:
    """Run ``frame`` untimed until ``WARM_S`` have passed, at least twice."""
    end = time.perf_counter() + WARM_S
    frame()
    frame()
    while time.perf_counter() < end:
        frame()
