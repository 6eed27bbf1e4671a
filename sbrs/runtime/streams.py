"""Streams: frames in flight at once, one per core, each in an arena of its own (beyond the thesis).

A band call is too small for a pool of threads (its fork and join cost more than the second core gives,
``sbrs.ort_env``), so a runtime by parts runs every call on one thread. Where the build's search chose two
band streams (``sbrs.reduction.ga.with_streams``: the plan counts the buffers once per stream), the runtime
binds every call a second time, to an arena of its own, and ``Runtime.process`` keeps two frames in flight,
each on its own stream and worker thread; ONNX Runtime releases the GIL inside a call, and a session runs
calls of several threads at once. MobileNetV2 1.0@224 at 15.7 MB: 5.9-6.0 ms a frame on two streams against
10.3-10.9 ms on one (docs/MEASUREMENTS.md). Execution units do the same where the app asks for it
(``runtime.streams: 2``): their sessions then have one thread each, as plain ONNX Runtime's "two frames at
once" has, which beats a two-thread session on models whose layers parallelise poorly (detect, pamap2).

Switching needs no transition room: the frame a request is taken for starts on the stream that is free while
the other stream's frame finishes on the old scenario; their buffers never meet. Results come back one per
frame, in stream order (``completion``: a switch's new frame may pass the old one), as from the one-stream
loop. ``infer`` runs on stream 0 and waits for its frame in flight.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.runtime.binding import Bound
from sbrs.runtime.device import ArenaMemory

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from sbrs.runtime.control_node import SwitchRequest
    from sbrs.runtime.engine import Frame, FrameResult, Runtime

#: A frame's computed outputs, with the times its stream started and finished it.
Computed = tuple[dict[str, np.ndarray], float, float]


class Streams:
    """Every stream's arena and bound steps (stream 0 is the runtime's own), a lock per stream and the worker
    threads that run the frames. ``bind(arena)`` binds every step of the plan to another arena of the same
    size (``bind_parts``, or ``bind_units`` without shadow slots), on ``device`` as the first."""

    def __init__(self, count: int, first: Bound, first_arena: ArenaMemory, arena_bytes: int, alignment: int,
                 bind: Callable[[ArenaMemory], Bound], device: str) -> None:
        self.arenas = [first_arena]
        self.bounds = [first]
        for _ in range(1, count):
            arena = ArenaMemory(arena_bytes, device, alignment)
            self.arenas.append(arena)
            self.bounds.append(bind(arena))
        self.locks = [threading.Lock() for _ in self.bounds]
        self._pool: ThreadPoolExecutor | None = None

    @property
    def count(self) -> int:
        return len(self.bounds)

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arenas)

    def submit(self, stream: int, scenario: str, arrays: Mapping[str, np.ndarray]) -> Future[Computed]:
        if self._pool is None:  # started with the first frame: a runtime only ever used by ``infer`` has none
            from concurrent.futures import ThreadPoolExecutor  # only runs on streams import it

            self._pool = ThreadPoolExecutor(max_workers=self.count, thread_name_prefix="sbrs-stream")
        return self._pool.submit(self._run, stream, scenario, arrays)

    def _run(self, stream: int, scenario: str, arrays: Mapping[str, np.ndarray]) -> Computed:
        bound = self.bounds[stream]
        with self.locks[stream]:
            begin = time.perf_counter()
            for array in arrays.values():
                bound.copy_in[scenario](array)
            for call in bound.calls[scenario]:
                call()
            outputs = {name: copy() for name, copy in bound.copy_out[scenario].items()}
            return outputs, begin, time.perf_counter()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def process_in_streams(runtime: Runtime, streams: Streams, frames: Iterable[Frame],
                       order: str) -> Iterator[FrameResult]:
    """``Runtime.process`` on streams: up to one frame in flight per stream, each frame's scenario (and
    any switch request) taken when it starts, results yielded one per frame in ``order``. A malformed frame
    raises ``InputError`` after the frames before it were yielded; frames still in flight when the caller
    stops are finished and counted."""
    from concurrent.futures import FIRST_COMPLETED, wait

    source = iter(frames)
    in_flight: list[tuple[Future[Computed], int, int, str, SwitchRequest | None, str]] = []
    free = list(range(streams.count))
    index = 0
    ended = False
    error: InputError | None = None
    try:
        while True:
            while free and not ended and error is None:
                frame = next(source, None)
                if frame is None:
                    ended = True
                    break
                try:
                    arrays = runtime._checked_frame(frame)
                except InputError as bad:
                    error = bad
                    break
                with runtime._lock:
                    if runtime._closed:
                        raise SbrsRuntimeError("the runtime is closed")
                    previous, request, scenario = runtime._take_request()
                stream = free.pop(0)
                future = streams.submit(stream, scenario, arrays)
                if request is not None:
                    runtime.node.begin(request)
                in_flight.append((future, index, stream, scenario, request, previous))
                index += 1
            if not in_flight:
                if error is not None:
                    raise error
                return
            item = in_flight[0]
            if order == "completion" and not item[0].done():
                # only a switch's new frame passes the frame before it (``Runtime.process``): frames of one
                # scenario come back in stream order even where the second stream finished first
                done, _ = wait([f for f, *_ in in_flight], return_when=FIRST_COMPLETED)
                passing = [i for i in in_flight if i[0] in done and i[3] != item[3]]
                if passing:
                    item = min(passing, key=lambda i: i[1])
            in_flight.remove(item)
            future, frame_index, stream, scenario, request, previous = item
            outputs, begin, end = future.result()
            free.append(stream)
            with runtime._lock:
                result = runtime._frame_result(scenario, frame_index, outputs, begin, end, request, previous)
            yield result
    finally:
        for future, frame_index, _, scenario, request, previous in in_flight:
            outputs, begin, end = future.result()
            with runtime._lock:
                runtime._frame_result(scenario, frame_index, outputs, begin, end, request, previous)
        with runtime._lock:
            runtime._settle()
