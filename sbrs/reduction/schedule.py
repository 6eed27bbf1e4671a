"""Buffer sizing without SDF3: simulate the CSDF graph with a memory-minimising firing rule.

Thesis Algorithm 10, line 5, hands each partition's CSDF graph to SDF3 for minimum buffer sizes and a
schedule. Here the graph is simulated directly, one frame (one CSDF iteration), with the rule

    fire the most downstream actor that can fire (largest topological index whose next phase has its
    input rows), and nothing else;

(with the consumers of a *cut* tensor waiting until its producer has fired its last phase: the CNN's
partitions, :class:`~sbrs.reduction.csdf.CsdfGraph`) so rows are produced only when no consumer further
down can make progress: the depth-first / demand-driven
order of Binas & Bengio (seed 003) and the order of thesis Table 4.1, Column 7 (Ex4: ``l_1(1-17), l_21,
l_1(18-22), l_2(2-6), l_31, ...`` with a phase of ``l_1`` followed by a phase of ``l_2``). It is a
heuristic, not a proven minimum: on a chain it fires every consumer as soon as its rows exist, so a
tensor holds its consumer's next window (plus the rows a last phase takes unused); on forks it lets a
branch run ahead only as far as the rows already available allow. The firing is CSDF's: an actor
claims its output rows when it starts and frees the input rows it consumes when it ends.

Sizes reported (Algorithm 10, line 5: each buffer the maximum it ever holds):

- per channel (:class:`ChannelSize`): the maximum tokens (rows) of the FIFO channel ``c_ij`` alone and of
  each self-loop ``c_ii`` alone, i.e. what SDF3 would size;
- per tensor (:class:`BufferSize`): the *line buffer* an executor allocates: the rows of the tensor that
  some consumer still needs or has not read yet. A consumer's overlap rows stay in the same buffer (thesis
  Section 4.4, Ex3: "if the overlapping part is stored in buffer B_1, only new data should be produced"),
  so for one consumer it is ``max(c_ij + c_jj)`` over time, and for several consumers (a residual fork) the
  maximum over time of the largest of them (their windows all end at the newest row). This is what Table
  4.1 counts: ``B_2 = 6`` rows ``= 384`` bytes in Ex4, where ``c_23`` alone peaks at 6 and ``c_33`` at 2.

Rows are stored in a ring of ``rows`` slots: row ``r`` of a tensor lives in slot ``r mod rows``.
:func:`check_schedule` replays a schedule against the per-phase row ranges and proves that no row is
overwritten while a consumer still needs it and that every row is written before it is read.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sbrs.errors import SbrsRuntimeError
from sbrs.memory import Block, Live, Problem
from sbrs.reduction.csdf import CsdfGraph
from sbrs.reduction.phases import LayerPhases

__all__ = [
    "RULE",
    "BufferSize",
    "ChannelSize",
    "Schedule",
    "check_schedule",
    "reduced_problem",
    "schedule_csdf",
]

#: The firing rule of :func:`schedule_csdf`, recorded in every :class:`Schedule`.
RULE = "most-downstream-fireable"


@dataclass(frozen=True)
class ChannelSize:
    """Maximum occupancy of one CSDF channel over the schedule, in rows and bytes.

    ``rows``: the channel alone (what SDF3 sizes). ``edge_rows``: for a FIFO channel ``c_ij``, the maximum of
    ``c_ij + c_jj`` (the rows of the edge's line buffer, overlap included); for a self-loop, ``rows``.
    """

    id: str
    src: str
    dst: str
    tensor: str
    self_loop: bool
    rows: int
    edge_rows: int
    row_bytes: int

    @property
    def bytes(self) -> int:
        """Maximum bytes held by the channel alone."""
        return self.rows * self.row_bytes


@dataclass(frozen=True)
class BufferSize:
    """The line buffer of one tensor: ``rows`` of ``full_rows`` kept at most; live over steps ``[first, last]``."""

    tensor: str
    producer: str
    consumers: tuple[str, ...]
    rows: int
    full_rows: int
    row_bytes: int
    first_step: int
    last_step: int

    @property
    def bytes(self) -> int:
        """Bytes of the reduced buffer."""
        return self.rows * self.row_bytes

    @property
    def full_bytes(self) -> int:
        """Bytes of the whole tensor (the unreduced buffer)."""
        return self.full_rows * self.row_bytes


@dataclass(frozen=True)
class Schedule:
    """One frame of a CSDF graph: the firings in order and the buffer sizes they need.

    ``firings[step] = (actor, phase)`` with phases counted from 1 (Table 4.1, Column 7: ``l_ik``).
    ``transients``: ``(step, bytes)`` of the internal tensors of a tiled group's firing
    (:mod:`sbrs.reduction.tiles`), live during that step only.
    """

    name: str
    rule: str
    firings: tuple[tuple[str, int], ...]
    channels: tuple[ChannelSize, ...]
    buffers: tuple[BufferSize, ...]
    transients: tuple[tuple[int, int], ...] = ()

    @property
    def buffer_bytes(self) -> int:
        """Sum of the reduced tensor buffers (thesis Eq. 2.7 with one buffer per tensor, no reuse)."""
        return sum(b.bytes for b in self.buffers)

    @property
    def full_bytes(self) -> int:
        """Sum of the whole tensors."""
        return sum(b.full_bytes for b in self.buffers)

    def buffer(self, tensor: str) -> BufferSize:
        """The buffer of ``tensor``."""
        for buffer in self.buffers:
            if buffer.tensor == tensor:
                return buffer
        raise KeyError(tensor)

    def channel(self, channel_id: str) -> ChannelSize:
        """The size of channel ``channel_id``."""
        for channel in self.channels:
            if channel.id == channel_id:
                return channel
        raise KeyError(channel_id)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dictionary."""
        return {
            "name": self.name,
            "rule": self.rule,
            "firings": [[actor, phase] for actor, phase in self.firings],
            "channels": [asdict(c) | {"bytes": c.bytes} for c in self.channels],
            "buffers": [asdict(b) | {"bytes": b.bytes, "full_bytes": b.full_bytes} for b in self.buffers],
            "buffer_bytes": self.buffer_bytes,
            "full_bytes": self.full_bytes,
            "transients": [list(t) for t in self.transients],
        }

    def to_json(self) -> str:
        """JSON text of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), sort_keys=True)


def schedule_csdf(graph: CsdfGraph) -> Schedule:
    """Simulate one frame of ``graph`` with the most-downstream-first rule; sizes are maxima (Alg. 10, line 5).

    Raises ``SbrsRuntimeError`` on deadlock (some actor can never fire) or an unbalanced channel; neither
    happens for graphs made by :func:`~sbrs.reduction.csdf.cnn_to_csdf`.
    """
    names = [a.name for a in graph.actors]
    index = {name: i for i, name in enumerate(names)}
    phases = [a.phases for a in graph.actors]
    fifo = [c for c in graph.channels if not c.self_loop]
    loops = [c for c in graph.channels if c.self_loop]
    for channel in graph.channels:
        if not channel.consistent:
            raise SbrsRuntimeError(f"csdf {graph.name}: channel {channel.id} produces {sum(channel.production)} "
                                   f"rows per frame but consumes {sum(channel.consumption)}")
    loop_of = {(c.dst, c.tensor): j for j, c in enumerate(loops)}
    fifo_loop = [loop_of.get((c.dst, c.tensor), -1) for c in fifo]
    inputs: list[list[int]] = [[] for _ in names]
    outputs: list[list[int]] = [[] for _ in names]
    own_loops: list[list[int]] = [[] for _ in names]
    for j, c in enumerate(fifo):
        inputs[index[c.dst]].append(j)
        outputs[index[c.src]].append(j)
    for j, c in enumerate(loops):
        own_loops[index[c.dst]].append(j)
    tensor_order: dict[str, None] = {}
    tensor_producer: dict[str, str] = {}
    tensor_consumers: dict[str, list[int]] = {}
    for j, c in enumerate(fifo):
        tensor_order.setdefault(c.tensor, None)
        tensor_producer[c.tensor] = c.src
        tensor_consumers.setdefault(c.tensor, []).append(j)

    tokens = [0] * len(fifo)
    loop_tokens = [0] * len(loops)
    fifo_peak = [0] * len(fifo)
    edge_peak = [0] * len(fifo)
    loop_peak = [0] * len(loops)
    tensor_peak = dict.fromkeys(tensor_order, 0)
    first_step: dict[str, int] = {}
    last_step: dict[str, int] = {}
    phase = [0] * len(names)
    firings: list[tuple[str, int]] = []

    cut = set(graph.cuts)
    barrier = [index[c.src] if c.tensor in cut else -1 for c in fifo]  # the producer a cut consumer waits for

    def can_fire(i: int) -> bool:
        k = phase[i]
        return k < phases[i] and all(tokens[j] >= fifo[j].consumption[k] and
                                     (barrier[j] < 0 or phase[barrier[j]] == phases[barrier[j]])
                                     for j in inputs[i])

    queued = [False] * len(names)
    heap: list[int] = []
    for i in range(len(names)):
        if can_fire(i):
            heapq.heappush(heap, -i)
            queued[i] = True
    step = 0
    while heap:
        i = -heapq.heappop(heap)
        queued[i] = False
        k = phase[i]
        touched: dict[str, None] = {}
        for j in outputs[i]:  # claim output rows at the start of the firing
            tokens[j] += fifo[j].production[k]
            fifo_peak[j] = max(fifo_peak[j], tokens[j])
            touched.setdefault(fifo[j].tensor, None)
        for tensor in touched:
            first_step.setdefault(tensor, step)
            held = 0
            for j in tensor_consumers[tensor]:
                edge = tokens[j] + (loop_tokens[fifo_loop[j]] if fifo_loop[j] >= 0 else 0)
                edge_peak[j] = max(edge_peak[j], edge)
                held = max(held, edge)
            tensor_peak[tensor] = max(tensor_peak[tensor], held)
        for j in inputs[i]:  # free consumed rows at the end of the firing
            tokens[j] -= fifo[j].consumption[k]
            last_step[fifo[j].tensor] = step
        for j in own_loops[i]:  # rows kept for the next phase (self-loop c_ii)
            loop_tokens[j] += loops[j].production[k] - loops[j].consumption[k]
            loop_peak[j] = max(loop_peak[j], loop_tokens[j])
        firings.append((names[i], k + 1))
        phase[i] = k + 1
        step += 1
        for candidate in (i, *(index[fifo[j].dst] for j in outputs[i])):
            if not queued[candidate] and can_fire(candidate):
                heapq.heappush(heap, -candidate)
                queued[candidate] = True
    stuck = [names[i] for i in range(len(names)) if phase[i] < phases[i]]
    if stuck:
        raise SbrsRuntimeError(f"csdf {graph.name}: deadlock, actors that cannot finish: {', '.join(stuck[:5])}")
    leftover = [c.id for j, c in enumerate(fifo) if tokens[j]] + [c.id for j, c in enumerate(loops) if loop_tokens[j]]
    if leftover:
        raise SbrsRuntimeError(f"csdf {graph.name}: rows left in channels after one frame: {', '.join(leftover[:5])}")

    channels = tuple(ChannelSize(c.id, c.src, c.dst, c.tensor, False, fifo_peak[j], edge_peak[j], c.row_bytes)
                     for j, c in enumerate(fifo)) + tuple(
        ChannelSize(c.id, c.src, c.dst, c.tensor, True, loop_peak[j], loop_peak[j], c.row_bytes)
        for j, c in enumerate(loops))
    buffers: list[BufferSize] = []
    row_bytes = {c.tensor: (c.rows, c.row_bytes) for c in graph.channels}
    for tensor in tensor_order:
        rows, nbytes = row_bytes[tensor]
        consumers = tuple(fifo[j].dst for j in tensor_consumers[tensor])
        buffers.append(BufferSize(tensor, tensor_producer[tensor], consumers, tensor_peak[tensor], rows, nbytes,
                                  first_step[tensor], last_step[tensor]))
    transients = []
    for step, (actor, k) in enumerate(firings):
        tile = graph.tile(actor) if graph.tiles else None
        if tile is not None and tile.transient[k - 1]:
            transients.append((step, tile.transient[k - 1]))
    return Schedule(graph.name, RULE, tuple(firings), channels, tuple(buffers), tuple(transients))


def check_schedule(graph: CsdfGraph, schedule: Schedule) -> list[str]:
    """Replay ``schedule`` on ring buffers of the reported sizes; return every problem found (empty: safe).

    Independent of the token counting of :func:`schedule_csdf`: it uses only the per-phase row ranges of
    :class:`~sbrs.reduction.phases.LayerPhases`. Checks that every actor fires each phase once and in order;
    that a band reads only rows already written; and that writing row ``r`` into slot ``r mod rows`` never
    overwrites a row ``r - rows`` that some consumer still needs (its next phase reads from that row or lower).
    """
    problems: list[str] = []
    plans = {plan.layer: plan for plan in graph.layers}
    capacity = {b.tensor: b.rows for b in schedule.buffers}
    producer_of: dict[str, str] = {}
    readers: dict[str, list[str]] = {}
    for channel in graph.channels:
        if not channel.self_loop:
            producer_of[channel.tensor] = channel.src
            readers.setdefault(channel.tensor, []).append(channel.dst)
    written = dict.fromkeys(producer_of, 0)
    next_phase = dict.fromkeys(plans, 0)
    cuts = set(graph.cuts)
    for step, (actor, phase) in enumerate(schedule.firings):
        plan = plans.get(actor)
        if plan is None:
            problems.append(f"step {step}: unknown actor {actor}")
            continue
        if phase != next_phase[actor] + 1:
            problems.append(f"step {step}: {actor} fires phase {phase}, expected {next_phase[actor] + 1}")
            continue
        k = phase - 1
        for item in plan.inputs:
            lo, hi = item.rows[k]
            if item.tensor in cuts and next_phase[producer_of[item.tensor]] < plans[producer_of[item.tensor]].phases:
                problems.append(f"step {step}: {actor} phase {phase} reads cut tensor {item.tensor} before "
                                f"{producer_of[item.tensor]} has finished")
            if item.tensor in written and hi > written[item.tensor]:
                problems.append(f"step {step}: {actor} phase {phase} reads rows [{lo}, {hi}) of {item.tensor}, "
                                f"only {written[item.tensor]} written")
        o0, o1 = plan.out_rows[k]
        for tensor in _outputs_of(actor, producer_of):
            cap = capacity.get(tensor, 0)
            rows_out = (o0, o1) if plan.phases > 1 else (0, _tensor_rows(graph, tensor))
            need = min((_next_low(plans[r], next_phase[r], tensor) for r in readers[tensor]), default=None)
            if need is not None and rows_out[1] - cap > need:
                problems.append(f"step {step}: {actor} phase {phase} writes row {rows_out[1] - 1} of {tensor} over "
                                f"row {rows_out[1] - 1 - cap} still needed (ring of {cap} rows)")
            written[tensor] = rows_out[1]
        next_phase[actor] = phase
    for actor, plan in plans.items():
        if next_phase[actor] != plan.phases:
            problems.append(f"{actor}: fired {next_phase[actor]} of {plan.phases} phases")
    return problems


def _outputs_of(actor: str, producer_of: Mapping[str, str]) -> list[str]:
    return [tensor for tensor, src in producer_of.items() if src == actor]


def _tensor_rows(graph: CsdfGraph, tensor: str) -> int:
    for channel in graph.channels:
        if channel.tensor == tensor:
            return channel.rows
    return 0


def _next_low(plan: LayerPhases, done: int, tensor: str) -> int:
    """Lowest row of ``tensor`` that ``plan``'s remaining phases read (a large number when none remain)."""
    if done >= plan.phases:
        return 1 << 62
    return int(plan.input(tensor).rows[done][0])


def reduced_problem(schedules: Schedule | Iterable[Schedule], *, alignment: int = 64,
                    per_edge: bool = False) -> Problem:
    """The memory problem of the reduced buffers (Algorithm 10, lines 8-9): one block per tensor buffer.

    Each schedule is one timeline (named by :attr:`Schedule.name`, e.g. the scenario); a block is live from
    the step its producer first fires to the step its last consumer last fires, with the reduced size in
    bytes. Feed the result to :func:`sbrs.memory.place` (or ``buffers_reuse``, Algorithm 8) for the
    reduced arena; a tiled group's firing adds a block of its internal tensors, live at that step only.
    ``per_edge=True`` gives one block per FIFO channel instead, sized ``max(c_ij + c_jj)`` (the thesis'
    one-buffer-per-edge view; a tensor with several consumers is then stored several times).
    """
    items = [schedules] if isinstance(schedules, Schedule) else list(schedules)
    names = [s.name for s in items]
    if len(set(names)) != len(names):
        raise SbrsRuntimeError(f"reduced problem: schedule names must be unique, got {names}")
    blocks: list[Block] = []
    for sched in items:
        for step, nbytes in sched.transients:  # a tiled group's internal tensors, during its firing
            blocks.append(Block(f"{sched.name}/tile@{step}", nbytes, (Live(sched.name, step, step),)))
        if not per_edge:
            for buffer in sched.buffers:
                blocks.append(Block(f"{sched.name}/{buffer.tensor}", buffer.bytes,
                                    (Live(sched.name, buffer.first_step, buffer.last_step),)))
            continue
        steps = _actor_steps(sched.firings)
        for channel in sched.channels:
            if channel.self_loop:
                continue
            first = steps[channel.src][0]
            last = steps[channel.dst][1]
            blocks.append(Block(f"{sched.name}/{channel.id}", channel.edge_rows * channel.row_bytes,
                                (Live(sched.name, min(first, last), last),)))
    return Problem(tuple(blocks), frozenset(), alignment)


def _actor_steps(firings: Sequence[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    steps: dict[str, tuple[int, int]] = {}
    for step, (actor, _) in enumerate(firings):
        first = steps.get(actor, (step, step))[0]
        steps[actor] = (first, step)
    return steps

