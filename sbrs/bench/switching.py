"""``sbrs bench --switching``: the switch response delay Δ as the caller sees it (thesis Figure 5.7, measured
from outside), for sbrs and for what a user would do without it. ``benchmarks/guard.py`` measures with it too.

How the switches are made:

- Frames stream back to back, as from a camera, in one stream per method and round that no switch restarts: a
  request finds the runtime as a running application has it (on band streams both streams busy, their frames
  staggered), never at the start of a stream.
- A thread asks for one switch at a time (``Requests``), each at a random moment 1-3 frames of the current
  scenario (ONNX Runtime's median frame time) after the previous switch settled: some point of some frame,
  from another thread, as a socket or policy request arrives.
- Δ runs from the moment that thread asks to the moment the caller holds the output of the frame that took the
  request: for sbrs the result carrying the switch's record (an older frame of the scenario asked for, still in
  flight, does not end it), for plain ONNX Runtime the first output of the new session. The next request waits
  until every frame taken before that one is out.
- A round walks every ordered pair of scenarios once (``switch_circuit``) on every method, the methods in a
  shuffled order and each with the same targets and moments (DESIGN.md, "Benchmarks": the alternatives in the
  same run, interleaved); ``repeats`` rounds give each ordered pair ``repeats`` samples per method.

Before this harness each sample started a fresh stream and asked within its first frame. On two streams both
frames then started together and the request always found two young frames; cifar10's Δ read 1.24-1.50x plain
ONNX Runtime's there, against 0.63-0.76x at random moments of a running stream (docs/MEASUREMENTS.md).
"""

from __future__ import annotations

import contextlib
import gc
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from sbrs.bench.bench import WARMUP_FRAMES, current_build
from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.runtime.open import runtime_for
from sbrs.runtime.switching import TERMINATED

#: How the switches are made in ``measure_switching``: sbrs under SBRS-TP and naive switching, plain ONNX
#: Runtime with every scenario's session loaded (switch at the frame boundary), and ONNX Runtime loading the
#: new scenario's session when the switch comes (the two things a user would do without sbrs); the default.
#: Besides, when the frame in flight may be given up: sbrs with ``on_switch: cancel`` and plain ONNX Runtime
#: stopping its call through ``RunOptions.terminate``, each running that frame again on the new scenario; and
#: sbrs with ``on_switch: resume`` (``resume``), continuing that frame on the new scenario from the layers both
#: share (beyond the thesis; its resumed outputs are checked against the new scenario's own model).
DEFAULT_SWITCH_METHODS: tuple[str, ...] = ("sbrs-tp", "sbrs-naive", "ort-all", "ort-load")
SWITCH_METHODS: tuple[str, ...] = (*DEFAULT_SWITCH_METHODS, "sbrs-cancel", "ort-cancel", "resume")
#: Seconds a switch may take, from its request to the moment every frame before it is out, before the bench
#: gives up on it.
MAX_SWITCH_S = 5.0
#: Each request comes this many frames of the current scenario (a uniform draw) after the previous one settled.
REQUEST_AFTER_FRAMES = (1.0, 3.0)
#: A block's first request waits this many frames of the first scenario, and at least ``BLOCK_WARM_UP_S``, besides
#: its own wait: a stream of frames just begun (worker threads starting, buffers first touched) is the moment a
#: running application does not have, and on frames of 0.1 ms 1-3 frames after the start is within it.
BLOCK_WARM_UP_FRAMES = 8
BLOCK_WARM_UP_S = 2e-3
#: With a time budget (``measure_switching(budget_s=...)``), at most this many switches per method.
MAX_SWITCHES = 300


def switch_circuit(scenarios: Sequence[str], start: str, rng: random.Random) -> list[str]:
    """The targets of one round: a walk from ``start`` that takes every ordered pair of ``scenarios`` once and
    ends at ``start``. Hierholzer's algorithm on the complete directed graph (every scenario has as many pairs in
    as out, so such a circuit exists), each scenario's next targets in a random order."""
    unused = {s: rng.sample([t for t in scenarios if t != s], len(scenarios) - 1) for s in scenarios}
    path, circuit = [start], []
    while path:
        here = path[-1]
        if unused[here]:
            path.append(unused[here].pop())
        else:
            circuit.append(path.pop())
    circuit.reverse()
    return circuit[1:]


class Requests:
    """The thread that asks for the switches of one block (module docstring) and what they took.

    The frame loop's driver sets ``ask(target)``, which makes a request, and reports what the caller holds:
    plain ONNX Runtime's every output (``held``), sbrs's every result (``out``). ``waits[i]``: how many frames
    of the current scenario the i-th request comes after the previous switch settled (the first, after the
    block's warm-up, ``BLOCK_WARM_UP_FRAMES``). ``switches``: (old, new,
    caller's Δ, the runtime's own record of Δ or None) per switch. ``failed``: the pair of a switch that did
    not end within ``MAX_SWITCH_S``, or None."""

    def __init__(self, start: str, targets: Sequence[str], waits: Sequence[float], frame_s: dict[str, float]) -> None:
        self.targets, self.waits, self.frame_s = list(targets), list(waits), frame_s
        self.ask: Callable[[str], None] = lambda target: None
        self.current = start
        self.target: str | None = None
        self.switches: list[tuple[str, str, float, float | None]] = []
        self.failed: str | None = None
        self.done = threading.Event()
        self._requested = 0.0
        self._switched = threading.Event()
        self._settled = threading.Event()
        self._stopped = threading.Event()
        self._first_not_out = 0  # sbrs's frames: every frame before it is out
        self._out: set[int] = set()  # frames out after ``_first_not_out``
        self._switch_frame: int | None = None  # the frame that took the request, until every frame before it is out
        self._thread = threading.Thread(target=self._run, name="sbrs-bench-requests", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the block now (the frame loop failed): the thread asks nothing more."""
        self._stopped.set()
        self._switched.set()
        self._settled.set()
        self.done.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            warm_up_s = max(BLOCK_WARM_UP_S, BLOCK_WARM_UP_FRAMES * self.frame_s[self.current])
            if self._stopped.wait(warm_up_s):
                return
            for target, wait in zip(self.targets, self.waits, strict=True):
                if self._stopped.wait(wait * self.frame_s[self.current]):
                    return
                self._switched.clear()
                self._settled.clear()
                self.target = target
                self._requested = time.perf_counter()
                self.ask(target)
                if not (self._switched.wait(MAX_SWITCH_S) and self._settled.wait(MAX_SWITCH_S)):
                    self.failed = f"{self.current}->{target}"
                    return
                if self._stopped.is_set():
                    return
                self.current = target
        finally:
            self.done.set()

    def held(self, scenario: str, *, settled: bool = True, record: float | None = None) -> bool:
        """The caller holds an output of ``scenario`` now (``settled``: nothing of the old scenario is in flight;
        ``record``: the runtime's own Δ of the switch this output ends). True: it ended the switch asked for."""
        ended = scenario == self.target and not self._switched.is_set()
        if ended:
            self.switches.append((self.current, scenario, time.perf_counter() - self._requested, record))
            self.target = None
            self._switched.set()
        if settled:
            self._settled.set()
        return ended

    def out(self, index: int, scenario: str, record: Any) -> bool:
        """sbrs's result of frame ``index`` on ``scenario`` is with the caller now; ``record``: its switch record
        (``SwitchRecord``: the frame took a request) or None. True: it ended the switch asked for."""
        self._out.add(index)
        while self._first_not_out in self._out:
            self._out.remove(self._first_not_out)
            self._first_not_out += 1
        ended = False
        if record is not None:
            ended = self.held(scenario, settled=False, record=record.response_delay_s)
            if ended:
                self._switch_frame = index
        if self._switch_frame is not None and self._first_not_out > self._switch_frame:
            self._switch_frame = None
            self._settled.set()
        return ended


def sbrs_switches(runtime: Any, frame: np.ndarray, requests: Requests, mode: str | None = None,
                  check: Callable[[Any], None] | None = None) -> None:
    """Stream ``frame`` through ``runtime`` (``process``, completion order, as ``sbrs run``) while ``requests``
    asks it to switch; ``check`` gets each result that ended a switch, after its
    Δ is taken. ``mode`` overrides the transition mode."""
    runtime.switch(requests.current, "bench")
    runtime.infer(frame)  # settled on the first scenario, nothing pending
    requests.ask = lambda name: runtime.switch(name, "bench")

    def frames() -> Iterator[np.ndarray]:
        while not requests.done.is_set():
            yield frame

    requests.start()
    results = runtime.process_with_hooks(frames(), mode=mode)
    try:
        for result in results:
            if requests.out(result.index, result.scenario, result.switch) and check is not None:
                check(result)
    except BaseException:
        requests.stop()
        raise
    finally:
        results.close()  # a transition's old frame still finishes (``sbrs.runtime.switching.Transition.deliver``)


def ort_switches(sessions: dict[str, Any], feed_name: str, frame: np.ndarray, requests: Requests,
                 load: Callable[[str], Any] | None = None, cancel: Any = None) -> None:
    """Plain ONNX Runtime's frame loop under the same requests: it changes session at the frame boundary. With
    ``load``, the new session is created then and the old one dropped (``sessions`` is not read), else every
    session is loaded. With ``cancel`` (an ``ort.RunOptions`` every call gets), a request also sets its
    ``terminate``: the call in flight stops, and the loop runs that frame again on the new session."""
    current = requests.current
    session = sessions[current] if load is None else load(current)
    wanted = [current]

    def ask(name: str) -> None:
        wanted[0] = name
        if cancel is not None:
            cancel.terminate = True

    requests.ask = ask
    if cancel is not None:
        cancel.terminate = False  # a request of the block before may have set it after its switch ended
    session.run(None, {feed_name: frame})
    requests.start()
    try:
        while not requests.done.is_set():
            if wanted[0] != current:
                current = wanted[0]  # the frame boundary: a request made during the frame takes effect here
                session = sessions[current] if load is None else load(current)  # (the old one dropped)
            try:
                session.run(None, {feed_name: frame}, cancel)
            except Exception as error:  # onnxruntime's ``Fail``: stopped by ``terminate`` (set only with ``cancel``)
                if cancel is None or TERMINATED not in str(error):
                    raise
                cancel.terminate = False
                continue
            requests.held(current)
    except BaseException:
        requests.stop()
        raise


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"mean_s": round(statistics.fmean(ordered), 7), "p95_s": round(p95, 7)}


def measure_switching(app_path: str, *, repeats: int = 10, granularity: str | None = None,
                      transition_arena: str | None = None, methods: tuple[str, ...] = DEFAULT_SWITCH_METHODS,
                      seed: int = 0, budget_s: float | None = None) -> dict[str, Any]:
    """Δ for every ordered pair o → n, seen from the caller, for each of ``methods`` (``SWITCH_METHODS``), made as
    the module docstring says. ``budget_s``: as many rounds as make about that many seconds of switches per
    method (at least ``repeats``, at most ``MAX_SWITCHES`` switches).

    Reported per pair and over all pairs: mean and p95 per method, the ratios of the means to ``ort-all`` (and
    of ``sbrs-cancel`` to ``ort-cancel``), and beside them the runtime's own record of Δ (``SwitchRecord``; from
    the request's arrival at the control node to the new output's copy-out, before the caller has it).
    ``resume``: also how many samples continued the frame in flight (``resumed``: the record's
    ``resumed_steps`` > 0), the mean of ``resumed_steps``, and ``mismatches``: first results of the new scenario
    whose outputs differ from its own model's on the frame (DESIGN.md invariant 1's tolerance; must be 0).
    """
    from sbrs.app import load_app
    from sbrs.model.input_size import plain_model_file
    from sbrs.ort_env import create_session

    unknown = [m for m in methods if m not in SWITCH_METHODS]
    if repeats < 1 or unknown or not methods:
        raise InputError(f"--repeats {repeats} must be >= 1 and methods among {', '.join(SWITCH_METHODS)}"
                         + (f" (got {', '.join(unknown)})" if unknown else ""))
    current_build(app_path)
    app = load_app(app_path)
    shape, dtype = app.config.input.shape, app.config.input.dtype
    frame = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    scratch = tempfile.TemporaryDirectory(prefix="sbrs-bench-")  # removed when the function returns
    paths = {s.name: plain_model_file(s.model_path, shape, s.input_size, scratch.name) for s in app.config.scenarios}
    runtime = runtime_for(app, granularity=granularity, transition="sbrs-tp", transition_arena=transition_arena)
    cancelling = runtime_for(app, granularity=granularity, on_switch="cancel") if "sbrs-cancel" in methods else None
    resuming = runtime_for(app, granularity=granularity, on_switch="resume") if "resume" in methods else None
    del app
    rng = random.Random(seed)
    with runtime, contextlib.nullcontext() if cancelling is None else cancelling, \
            contextlib.nullcontext() if resuming is None else resuming:
        providers = runtime.providers
        threads = runtime.thread_pool.count  # plain sessions whose idle pools stop spinning, as sbrs' do
        sessions = {name: create_session(path, providers, threads=threads) for name, path in paths.items()}
        feed_name = next(iter(sessions.values())).get_inputs()[0].name

        def load(name: str) -> Any:
            return create_session(paths[name], providers, threads=threads)

        frame_s: dict[str, float] = {}
        for name, session in sessions.items():
            for _ in range(WARMUP_FRAMES):
                session.run(None, {feed_name: frame})
                for warmed in (runtime, cancelling, resuming):
                    if warmed is not None:
                        warmed.switch(name, "bench")
                        warmed.infer(frame)
            times = []
            for _ in range(max(5, repeats)):
                start = time.perf_counter()
                session.run(None, {feed_name: frame})
                times.append(time.perf_counter() - start)
            frame_s[name] = statistics.median(times)
        import onnxruntime as ort

        terminate = ort.RunOptions()
        # the reference of every scenario on the frame, and what the resumed first results were
        references = {name: dict(zip([o.name for o in session.get_outputs()], session.run(None, {feed_name: frame}),
                                     strict=True)) for name, session in sessions.items()} if resuming else {}
        resumed: dict[str, list[int]] = {}
        mismatches = [0]

        def check_resumed(result: Any) -> None:
            record = result.switch
            resumed.setdefault(f"{record.old}->{record.new}", []).append(record.resumed_steps or 0)
            for name, want in references[result.scenario].items():
                if np.abs(result.outputs[name] - want).max() > 1e-5 * max(1.0, float(np.abs(want).max())):
                    mismatches[0] += 1
                    break

        run_method: dict[str, Callable[[Requests], None]] = {
            "sbrs-tp": lambda requests: sbrs_switches(runtime, frame, requests, "sbrs-tp"),
            "sbrs-naive": lambda requests: sbrs_switches(runtime, frame, requests, "naive"),
            "ort-all": lambda requests: ort_switches(sessions, feed_name, frame, requests),
            "ort-load": lambda requests: ort_switches(sessions, feed_name, frame, requests, load=load),
            "sbrs-cancel": lambda requests: sbrs_switches(cancelling, frame, requests, "sbrs-tp"),
            "ort-cancel": lambda requests: ort_switches(sessions, feed_name, frame, requests, cancel=terminate),
            "resume": lambda requests: sbrs_switches(resuming, frame, requests, "sbrs-tp", check_resumed),
        }
        scenarios = runtime.scenarios
        pairs_per_round = len(scenarios) * (len(scenarios) - 1)
        rounds = repeats
        if budget_s is not None:
            per_switch = statistics.fmean(frame_s.values()) * (sum(REQUEST_AFTER_FRAMES) / 2 + 1.5)
            wanted = min(MAX_SWITCHES, budget_s / per_switch)
            rounds = max(repeats, int(wanted // pairs_per_round))
        # Everything loaded so far stays: out of the cyclic collector's sight, its full collections (several ms
        # with the models' objects around) no longer land in a sample; both sides share this process.
        gc.collect()
        gc.freeze()
        samples: dict[str, dict[str, list[float]]] = {f"{o}->{n}": {m: [] for m in methods}
                                                      for o in scenarios for n in scenarios if o != n}
        internal: dict[str, dict[str, list[float]]] = {pair: {} for pair in samples}
        start = scenarios[0]
        try:
            for _ in range(rounds):
                targets = switch_circuit(scenarios, start, rng)
                waits = [rng.uniform(*REQUEST_AFTER_FRAMES) for _ in targets]
                for method in rng.sample(methods, len(methods)):
                    requests = Requests(start, targets, waits, frame_s)
                    run_method[method](requests)
                    requests.stop()
                    if requests.failed is not None:
                        raise SbrsRuntimeError(f"bench: the switch {requests.failed} ({method}) did not end within "
                                               f"{MAX_SWITCH_S} s")
                    for old, new, caller, recorded in requests.switches:
                        samples[f"{old}->{new}"][method].append(caller)
                        if recorded is not None:
                            internal[f"{old}->{new}"].setdefault(method, []).append(recorded)
        finally:
            gc.unfreeze()
        pairs: dict[str, Any] = {}
        for pair, by_method in samples.items():
            old, new = pair.split("->")
            row: dict[str, Any] = {"old_frame_s": round(frame_s[old], 7), "new_frame_s": round(frame_s[new], 7)}
            for method in methods:
                row[method] = _summary(by_method[method])
                if method in internal[pair]:
                    row[method]["internal_mean_s"] = round(statistics.fmean(internal[pair][method]), 7)
            if "resume" in methods:
                row["resume"].update(_resumed(resumed.get(pair, [])))
            row["ratios"] = _switching_ratios(row, methods)
            pairs[pair] = row
        overall: dict[str, Any] = {m: _summary([x for s in samples.values() for x in s[m]]) for m in methods}
        for method in methods:
            recorded = [x for by_method in internal.values() for x in by_method.get(method, [])]
            if recorded:
                overall[method]["internal_mean_s"] = round(statistics.fmean(recorded), 7)
        if "resume" in methods:
            overall["resume"].update(_resumed([r for values in resumed.values() for r in values]))
            overall["resume"]["mismatches"] = mismatches[0]
        overall["ratios"] = _switching_ratios(overall, methods)
        facts = runtime.facts()
        return {"app": facts["app"], "granularity": facts["granularity"], "repeats": rounds,
                "streams": runtime.memory_report().get("streams", 1),
                "transition_arena": runtime.transitions.arena, "schedule": runtime.transition_schedule,
                "arena_bytes": runtime.arena_bytes, "methods": list(methods), "overall": overall, "pairs": pairs}


def _resumed(steps: list[int]) -> dict[str, Any]:
    """How the ``resume`` samples went: how many continued the frame in flight, the mean steps taken over."""
    return {"resumed": sum(1 for r in steps if r > 0), "samples": len(steps),
            "resumed_steps_mean": round(statistics.fmean(steps), 3) if steps else None}


def _switching_ratios(row: dict[str, Any], methods: tuple[str, ...]) -> dict[str, float]:
    """Each method's mean Δ over plain ORT's with every session loaded, and sbrs cancelling over ORT cancelling
    (``sbrs-cancel/ort-cancel``): each against the alternative that keeps or gives up the frame in flight alike."""
    ratios = {}
    if "ort-all" in methods:
        ratios = {m: round(row[m]["mean_s"] / row["ort-all"]["mean_s"], 4) for m in methods if m != "ort-all"}
    if "sbrs-cancel" in methods and "ort-cancel" in methods:
        ratios["sbrs-cancel/ort-cancel"] = round(row["sbrs-cancel"]["mean_s"] / row["ort-cancel"]["mean_s"], 4)
    if "resume" in methods and "sbrs-cancel" in methods:
        ratios["resume/sbrs-cancel"] = round(row["resume"]["mean_s"] / row["sbrs-cancel"]["mean_s"], 4)
    return ratios


def format_switching(report: dict[str, Any]) -> str:
    """Δ per ordered pair as the caller sees it: mean (p95) per method in ms, the ratio to plain ORT."""
    methods = report["methods"]
    lines = [f"app {report['app']}: switch response delay Δ seen by the caller (request at a random moment of a "
             f"running stream → the caller holds the output of the frame that took it), ms, mean (p95) of "
             f"{report['repeats']} per pair; {report['streams']} stream(s), SBRS-TP arena "
             f"{report['transition_arena']}, schedule {report['schedule']}",
             f"{'pair':<26}" + "".join(f"{m:>20}" for m in methods) + "  sbrs-tp/ort-all"
             + ("  sbrs-cancel/ort-cancel" if "sbrs-cancel/ort-cancel" in report["overall"]["ratios"] else "")]

    def row(name: str, values: dict[str, Any]) -> str:
        cells = "".join(f"{values[m]['mean_s'] * 1e3:>11.3f} ({values[m]['p95_s'] * 1e3:>6.3f})" for m in methods)
        ratios = [values["ratios"].get(key) for key in ("sbrs-tp", "sbrs-cancel/ort-cancel")]
        return f"{name:<26}{cells}" + "".join(f"  {'' if r is None else f'{r:.3f}':>15}" for r in ratios)

    lines.extend(row(key, values) for key, values in report["pairs"].items())
    lines.append(row("all pairs", report["overall"]))
    recorded = [f"{m} {report['overall'][m]['internal_mean_s'] * 1e3:.3f} ms" for m in methods
                if "internal_mean_s" in report["overall"][m]]
    if recorded:
        lines.append("the runtime's own record of Δ (SwitchRecord, before the caller has the output), mean: "
                     + ", ".join(recorded))
    if "resume" in methods:
        resume = report["overall"]["resume"]
        ratios = report["overall"]["ratios"]
        lines.append(f"resume: {resume['resumed']} of {resume['samples']} frames continued on the new scenario "
                     f"(mean {resume['resumed_steps_mean']} new steps taken over), {resume['mismatches']} outputs "
                     f"differing from the new scenario's own model; Δ resume/ort-all "
                     f"{ratios.get('resume', float('nan')):.3f}"
                     + (f", resume/sbrs-cancel {ratios['resume/sbrs-cancel']:.3f}" if "resume/sbrs-cancel" in ratios
                        else ""))
    return "\n".join(lines)
