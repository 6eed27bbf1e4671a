"""The SBRS transition protocol on execution units: analysis (Algorithm 6), schedules (Algorithm 7), hazard proof.

Steps
    A *step* here is one unit call of a scenario's frame (``UnitPlan.sequences[s][i - 1]`` is step φ^s_i,
    1-based as in the thesis). Two pieces of frame I/O belong to steps: copying the frame into the arena
    belongs to step 1 (it writes the input slot), copying the outputs out belongs to the last step (it reads
    the output slots). A step's *accesses* are the byte ranges of the arena it reads and writes, taken from
    the plan's offsets: its unit's inputs as bound for that scenario (``Unit.input_tensors[s]``), its unit's
    outputs, plus the frame I/O above.

Hazards, and where this deviates from the thesis
    Algorithm 6 (lines 4-8) delays a new step φ^n_i only until the last old step that uses the *same layer*
    has finished: in the thesis a layer is a platform resource that cannot serve two scenarios at once. On
    ONNX Runtime that is not the hazard: every (scenario, unit) has its own IOBinding, and a session may run
    concurrently. The hazard is the *arena*: the old frame and the new frame live in one arena whose offsets
    were planned for one scenario at a time, the frame input slot is one tensor for every scenario, a shared
    unit writes the same supergraph tensor for every user, and "a tensor may hold different values in
    different scenarios" (``sbrs.compile.units``). So the analysis here is Algorithm 6 with line 6 replaced by
    a byte test::

        x_i = max(x_{i-1} + 1, max{ j : accesses(φ^o_j) and accesses(φ^n_i) overlap, one of them writing })

    (x_0 = -1 so that x_1 may be 0: a new step that touches nothing of the old frame may start at once). Steps
    sharing a unit always overlap (both write the unit's outputs), so the thesis' layer condition is implied.
    ``thesis_x`` keeps Algorithm 6 verbatim (same unit ⇒ delay) for comparison; the checker shows it is unsafe
    on most apps (``check_schedule`` with ``thesis_x``).

Schedules (Algorithm 7) and the event-driven refinement
    Algorithm 7 runs in lock-step: at control step q it starts one old step and at most one new step whose
    x allows it, then waits for both. The runtime runs the same constraints event-driven (``wait``): the old
    steps run in order on the loop thread; the new frame's steps run in order on a worker thread and step
    φ^n_i starts once φ^n_{i-1} has finished and the old steps 1..wait_i have finished, where::

        wait_i = max{ j : φ^o_j and φ^n_i conflict }   (0 when none)

    ``wait_i <= x_i`` always: the ``+1`` of Algorithm 6, line 10 only encodes the lock-step pacing (one new
    step per control step), which the new chain already orders; dropping it lets a run of cheap new steps go
    ahead without waiting for one old step each. Every hazard constraint of X is kept. A switch request that
    arrives during old step s is acted on when step s has finished (Algorithm 7, line 2), so new steps start
    after old steps 1..max(wait_i, s).

What ``check_schedule`` proves
    For one plan, every ordered pair o ≠ n, every SSR step s ∈ [1, |φ^o|] and a table of waits (``wait``,
    ``x`` or ``thesis_x``): in the happens-before order of the schedule (old chain, new chain, old step
    max(wait_i, s) before new step i, nothing orders old steps after new ones), every old step j > s that is
    not ordered before new step i touches no arena byte that new step i touches, unless both only read. Old
    steps 1..s are finished before any new step starts. Accesses are recomputed from the plan's offsets by
    ``step_accesses`` (or taken from a live runtime's bindings, ``Runtime.bound_accesses``), not from the
    analysis, so the check covers the analysis, the arena plan and the bindings together.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from sbrs.compile.tables import (  # the tables as data: a run reads them without this module
    PairTable,
    Range,
    ResumeTable,
    StepAccess,
    TransitionPlan,
)
from sbrs.compile.units import BoundaryTensor, UnitLayout, UnitPlan
from sbrs.errors import SbrsRuntimeError

if TYPE_CHECKING:  # planning (sbrs.memory) happens when an app is compiled, not when a build is run
    from sbrs.compile.parts_plan import ScenarioParts
    from sbrs.memory import Live


def _overlap(a: Range, b: Range) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def accesses_conflict(a: StepAccess, b: StepAccess) -> bool:
    """True when ``a`` and ``b`` touch an overlapping byte and at least one of them writes it (RAW, WAR, WAW)."""
    for write in a.writes:
        if any(_overlap(write, other) for other in (*b.reads, *b.writes)):
            return True
    return any(_overlap(write, read) for write in b.writes for read in a.reads)


def step_accesses(plan: UnitPlan, scenario: str, offsets: Mapping[str, int] | None = None) -> tuple[StepAccess, ...]:
    """Each step's arena accesses for ``scenario`` from the plan's offsets (module docstring, "Steps");
    ``offsets`` replaces them (the shadow slots of ``plan_shadow``)."""
    tensors = {t.id: t for t in plan.tensors}
    units = {u.id: u for u in plan.units}

    def span(tensor_id: str) -> Range:
        tensor: BoundaryTensor = tensors[tensor_id]
        offset = tensor.offset if offsets is None else offsets[tensor_id]
        return (tensor_id, offset, offset + tensor.nbytes)

    calls = plan.sequences[scenario]
    result: list[StepAccess] = []
    for index, unit_id in enumerate(calls):
        unit = units[unit_id]
        reads = [span(t) for t in unit.input_tensors[scenario]]
        writes = [span(t) for t in unit.outputs]
        if index == 0:  # copying the frame in belongs to step 1
            writes.extend(span(t) for t in plan.inputs[scenario].values())
        if index == len(calls) - 1:  # copying the outputs out belongs to the last step
            reads.extend(span(t) for t in plan.outputs[scenario].values())
        result.append(StepAccess(unit_id, tuple(reads), tuple(writes)))
    return tuple(result)


def hazard_waits(old: Sequence[StepAccess], new: Sequence[StepAccess]) -> tuple[int, ...]:
    """``wait_i`` = the last old step (1-based) whose accesses conflict with new step i's (``accesses_conflict``:
    a byte both touch, one of them writing), 0 when none. The one hazard analysis of units and parts alike,
    vectorised over the old steps' ranges: plans by parts have hundreds of calls per frame."""
    return _OldFrame(old).waits(new)


class _OldFrame:
    """An old frame's byte ranges as arrays, made once for every new scenario it is paired with."""

    def __init__(self, old: Sequence[StepAccess]) -> None:
        rows = [(j, r[1], r[2], write) for j, step in enumerate(old, 1)
                for write, ranges in ((False, step.reads), (True, step.writes)) for r in ranges]
        table = np.array(rows or [(0, 0, 0, 0)], dtype=np.int64)
        self.empty = not rows
        self.steps, self.starts, self.ends = table[:, 0], table[:, 1], table[:, 2]
        self.writes = table[:, 3].astype(bool)
        self.low, self.high = int(self.starts.min()), int(self.ends.max())  # the bytes the old frame touches

    def waits(self, new: Sequence[StepAccess]) -> tuple[int, ...]:
        """``hazard_waits(old, new)``."""
        if self.empty:
            return (0,) * len(new)
        steps, starts, ends, writes = self.steps, self.starts, self.ends, self.writes
        result = []
        for target in new:
            wait = 0
            for write, ranges in ((False, target.reads), (True, target.writes)):
                for _, start, end in ranges:
                    if end <= self.low or self.high <= start:
                        continue  # outside every byte the old frame touches (shadow slots, mostly)
                    mask = (starts < end) & (start < ends)
                    if not write:
                        mask &= writes
                    if mask.any():
                        wait = max(wait, int(steps[mask].max()))
            result.append(wait)
        return tuple(result)


def algorithm6(old: Sequence[StepAccess], new: Sequence[StepAccess], *, bytes_hazards: bool = True) -> tuple[int, ...]:
    """Algorithm 6 (lines 1-11) over unit calls: the minimum delays X^{o→n} of the new steps, 1-based old steps.

    Lines 4-8 delay step i past every old step j that "shares a reused layer" with it: here the same unit
    (``bytes_hazards=False``, the thesis verbatim) or, by default, overlapping arena bytes with a write (module
    docstring). Line 1 starts ``x`` at 0, so the thesis' x_1 ≥ 0; line 10 adds the lock-step ``+1``.
    """
    table: list[int] = []
    x = 0
    for target in new:
        for j, step in enumerate(old, 1):
            clash = accesses_conflict(step, target) if bytes_hazards else step.unit == target.unit
            if clash and j >= x:
                x = j
        table.append(x)
        x += 1
    return tuple(table)


def pair_table(old_name: str, new_name: str, old: Sequence[StepAccess], new: Sequence[StepAccess],
               frame: _OldFrame | None = None) -> PairTable:
    """The ``PairTable`` of ``old_name`` → ``new_name`` from both frames' step accesses.

    Algorithm 6 in linear time: lines 4-10 give x_i = max(x_{i-1} + 1, the last old step that clashes with new
    step i) with x_1 = that step, which is ``_paced`` of the hazard waits (``x``) or of the last old step calling
    new step i's unit (``thesis_x``); ``algorithm6`` is the line-by-line form these equal (a property test).
    ``frame``: ``old``'s ranges when the caller pairs it with several new frames."""
    waits = (frame or _OldFrame(old)).waits(new)
    last_call: dict[str, int] = {}
    for j, step in enumerate(old, 1):
        last_call[step.unit] = j
    return PairTable(old_name, new_name, len(old), _paced(waits), waits,
                     _paced([last_call.get(step.unit, 0) for step in new]))


def build_transition_plan(plan: UnitPlan, *, arena: str = "shared",
                          shadow: Mapping[str, int] | None = None) -> TransitionPlan:
    """Algorithm 6 for every ordered pair o ≠ n of ``plan`` (design/build time; run-time only looks tables up).

    With ``shadow`` (``plan_shadow``) the new frame's accesses are those of the shadow slots.
    """
    accesses = {s: step_accesses(plan, s) for s in plan.scenarios}
    new_accesses = accesses if shadow is None else {s: step_accesses(plan, s, shadow) for s in plan.scenarios}
    pairs: dict[str, PairTable] = {}
    for old in plan.scenarios:
        frame = _OldFrame(accesses[old])
        for new in plan.scenarios:
            if old != new:
                pairs[f"{old}->{new}"] = pair_table(old, new, accesses[old], new_accesses[new], frame)
    return TransitionPlan(plan.app, plan.granularity, arena, plan.arena_bytes, pairs,
                          None if shadow is None else dict(shadow))


# -- processing by parts ------------------------------------------------------------------------------


def _paced(waits: Sequence[int]) -> tuple[int, ...]:
    """Algorithm 6's X from hazard waits: x_1 = wait_1, x_i = max(x_{i-1} + 1, wait_i) (line 10's ``+1``)."""
    result: list[int] = []
    for wait in waits:
        result.append(max(wait, result[-1] + 1) if result else wait)
    return tuple(result)


def parts_transitions(scenarios: Mapping[str, ScenarioParts], arena_bytes: int, app: str) -> TransitionPlan:
    """Algorithm 6 for every ordered pair o ≠ n of a parts plan, with arena-byte hazards (module docstring).

    ``thesis_x`` is Algorithm 6 verbatim with "the same layer" read as "the same call model" (session); a
    feed runs no model, so it shares no layer (its bytes still count in the hazard waits).
    """
    from sbrs.compile.parts_plan import GRANULARITY, parts_accesses

    accesses = {s: parts_accesses(p) for s, p in scenarios.items()}
    pairs: dict[str, PairTable] = {}
    for old, a in accesses.items():
        frame = _OldFrame(a)
        last_use: dict[str, int] = {}
        for j, (step, call) in enumerate(zip(a, scenarios[old].calls, strict=True), 1):
            if not call.feed:
                last_use[step.unit] = j
        for new, b in accesses.items():
            if old == new:
                continue
            waits = frame.waits(b)
            layers = [0 if call.feed else last_use.get(step.unit, 0)
                      for step, call in zip(b, scenarios[new].calls, strict=True)]
            pairs[f"{old}->{new}"] = PairTable(old, new, len(a), _paced(waits), waits, _paced(layers))
    return TransitionPlan(app, GRANULARITY, "shared", arena_bytes, pairs)


# -- the checker ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hazard:
    """A pair of steps the schedule may run at once (or new before old) that touch the same bytes."""

    old: str
    new: str
    ssr_step: int
    old_step: int
    new_step: int
    detail: str


def check_schedule(accesses: Mapping[str, Sequence[StepAccess]], waits: Mapping[str, Sequence[int]],
                   *, new_accesses: Mapping[str, Sequence[StepAccess]] | None = None, limit: int = 20) -> list[Hazard]:
    """Prove a transition table safe (module docstring, "What check_schedule proves"); the hazards found.

    ``accesses[s]`` are scenario s's steps, ``waits["o->n"]`` the old step each new step waits for,
    ``new_accesses`` the steps of a transition's new frame when they differ (shadow slots). Enumerates every
    ordered pair and every SSR step; at most ``limit`` hazards are reported.

    Whether old step j and new step i conflict does not depend on the SSR step, so each pair's conflicts are
    decided once, by ``accesses_conflict`` on every (j, i) that some SSR step leaves unordered
    (``conflict_matrix``), and every SSR step is then checked against them: at most |φ^o| · |φ^n| conflict
    tests a pair instead of that times |φ^o|.
    """
    hazards: list[Hazard] = []
    new_accesses = accesses if new_accesses is None else new_accesses
    for old, old_steps in accesses.items():
        for new, new_steps in new_accesses.items():
            if old == new:
                continue
            table = waits[f"{old}->{new}"]
            if len(table) != len(new_steps):
                raise SbrsRuntimeError(f"transition table {old}->{new} has {len(table)} entries for "
                                       f"{len(new_steps)} steps")
            if not new_steps:
                continue
            # happens-before: new step i starts after old steps 1..after[i]; the new chain is ordered, so new
            # step i is also after everything new steps 1..i-1 waited for
            waited = np.maximum.accumulate(np.asarray(table, dtype=np.int64))
            conflicts = conflict_matrix(old_steps, new_steps, ordered=np.maximum(waited, 1))  # [j - 1, i - 1]
            # the last old step each new step conflicts with (0: none)
            last = np.where(conflicts.any(axis=0), len(old_steps) - np.argmax(conflicts[::-1], axis=0), 0)
            for ssr in range(1, len(old_steps) + 1):
                after = np.maximum(waited, ssr)
                for i in np.flatnonzero(last > after) + 1:  # new steps with an unordered conflicting old step
                    for j in np.flatnonzero(conflicts[after[i - 1]:, i - 1]) + after[i - 1] + 1:
                        hazards.append(Hazard(old, new, ssr, int(j), int(i),
                                              _describe(old_steps[j - 1], new_steps[i - 1])))
                        if len(hazards) >= limit:
                            return hazards
    return hazards


def conflict_matrix(old: Sequence[StepAccess], new: Sequence[StepAccess],
                    ordered: Sequence[int] | None = None) -> np.ndarray:
    """``[j - 1, i - 1]``: whether old step j and new step i conflict (``accesses_conflict``, the plain
    definition). ``ordered[i - 1]``: old steps 1..ordered[i - 1] are known to finish before new step i starts,
    so those pairs are not tested and read False."""
    matrix = np.zeros((len(old), len(new)), dtype=bool)
    for i, new_step in enumerate(new):
        for j in range(0 if ordered is None else int(ordered[i]), len(old)):
            matrix[j, i] = accesses_conflict(old[j], new_step)
    return matrix


def _describe(a: StepAccess, b: StepAccess) -> str:
    for ra in (*a.reads, *a.writes):
        for rb in (*b.reads, *b.writes):
            if _overlap(ra, rb):
                return (f"old {a.unit} touches {ra[0]} [{ra[1]}, {ra[2]}), "
                        f"new {b.unit} touches {rb[0]} [{rb[1]}, {rb[2]})")
    return "conflict"


def plan_accesses(transitions: TransitionPlan, plan: UnitPlan) -> tuple[dict[str, tuple[StepAccess, ...]],
                                                                        dict[str, tuple[StepAccess, ...]]]:
    """(old-frame accesses, new-frame accesses) per scenario of ``plan``: the new frame of a transition runs in
    the shadow slots when ``transitions``' arena is ``shadow``."""
    old = {s: step_accesses(plan, s) for s in plan.scenarios}
    new = old if transitions.shadow is None else {s: step_accesses(plan, s, transitions.shadow) for s in plan.scenarios}
    return old, new


def check_plan_transitions(plan: UnitPlan, transitions: TransitionPlan, *, table: str = "wait") -> list[Hazard]:
    """``check_schedule`` for ``plan``'s own accesses and ``transitions``' ``table`` (``wait``, ``x``, ``thesis_x``)."""
    old, new = plan_accesses(transitions, plan)
    waits = {key: getattr(t, table) for key, t in transitions.pairs.items()}
    return check_schedule(old, waits, new_accesses=new)


# -- planning transition-overlapping tensors apart ---------------------------------------------------------


def plan_shadow(plan: UnitPlan) -> tuple[UnitPlan, dict[str, int]]:
    """Shadow slots: the new frame of a transition runs in its own copy of its tensors, placed apart.

    Tensors that *are* the same for both frames (the frame-input slot every scenario shares, the outputs of a
    unit both scenarios call) make hazards no offset can remove: with them the new frame's first and last
    steps wait for the old frame almost always. So every boundary tensor t gets a shadow block ``~t``; the
    new frame of a transition is bound to the shadows (its own IOBindings, the same sessions), later frames
    to the normal slots. The arena problem gets, per scenario n, a timeline ``n~`` with the shadows' lives as
    on n, and per ordered pair o → n a timeline ``o->n:old`` with the lives of the tensors old steps 2..|φ^o|
    touch and of o's outputs (read by the copy-out after step |φ^o|); ``{o->n:old, n~}`` is a concurrent
    set (the thesis' J, Algorithm 8 lines 9-11), so no shadow of n shares a byte with an old tensor still to
    be touched after an SSR at old step 1 or later. Shadows may
    share bytes with n's own normal tensors (never live at once) and with each other as on n.

    Returns the plan with the new offsets and arena size, and the shadow offsets. Cost: measured by
    ``sbrs bench --switching`` (about the sum of two scenarios' peaks instead of the largest one).
    """
    from sbrs.compile.arena import arena_problem
    from sbrs.memory import Block, Live, Problem, place

    layout = UnitLayout(plan.units, plan.sequences, plan.inputs, plan.outputs, {t.id: t.spec for t in plan.tensors})
    base = arena_problem(layout, plan.alignment, resume=plan.arena_strategy.endswith("+resume"))
    accesses = {s: step_accesses(plan, s) for s in plan.scenarios}
    extra: dict[str, list[Live]] = {}
    shadow_lives: dict[str, list[Live]] = {}
    concurrent: set[frozenset[str]] = set(base.concurrent)
    for block in base.blocks:
        for live in block.lives:
            if live.timeline in plan.sequences:
                shadow_lives.setdefault(block.id, []).append(Live(f"{live.timeline}~", live.first, live.last))
    for old in plan.scenarios:
        touched = _tensor_times(accesses[old][1:], lambda k: k + 1)  # the same for every new scenario
        for new in plan.scenarios:
            if old == new:
                continue
            old_timeline = f"{old}->{new}:old"
            concurrent.add(frozenset({old_timeline, f"{new}~"}))
            for tensor, (first, last) in touched.items():
                extra.setdefault(tensor, []).append(Live(old_timeline, first, last))
            # The old outputs until their copy-out, which follows the last old step: a request seen after that
            # step lets the new frame run before it (``sbrs.runtime.switching.new_first``), also when the old frame
            # is one step. A time after every other life on this timeline: they need not move apart.
            after = len(accesses[old])
            for tensor in dict.fromkeys(plan.outputs[old].values()):
                extra.setdefault(tensor, []).append(Live(old_timeline, after, after))
    blocks = [Block(b.id, b.size, (*b.lives, *extra.get(b.id, ()))) for b in base.blocks]
    blocks.extend(Block(f"~{b.id}", b.size, tuple(shadow_lives[b.id])) for b in base.blocks)
    problem = Problem(tuple(blocks), frozenset(concurrent), base.alignment)
    arena = place(problem, what=f"the shadow slots of app '{plan.app}'")
    offsets = arena.as_dict()
    tensors = tuple(BoundaryTensor(t.id, t.shape, t.dtype, offsets[t.id]) for t in plan.tensors)
    shadow = {t.id: offsets[f"~{t.id}"] for t in plan.tensors}
    resume = "+resume" if plan.arena_strategy.endswith("+resume") else ""
    shadowed = replace(plan, tensors=tensors, arena_bytes=arena.arena_bytes,
                       arena_lower_bound=int(arena.lower_bound_bytes or 0),
                       arena_strategy=f"{arena.strategy}+shadow{resume}")
    return shadowed, shadow


def _tensor_times(steps: Sequence[StepAccess], time_of: Any) -> dict[str, tuple[int, int]]:
    """tensor id → (first, last) time any of ``steps`` touches it, step k (0-based) at ``time_of(k)``."""
    spans: dict[str, tuple[int, int]] = {}
    for k, step in enumerate(steps):
        t = time_of(k)
        for tensor, _, _ in (*step.reads, *step.writes):
            first, last = spans.get(tensor, (t, t))
            spans[tensor] = (min(first, t), max(last, t))
    return spans


# -- resuming the frame in flight on the new scenario (beyond the thesis) -------------------------------------


def common_prefix(old: Sequence[StepAccess], new: Sequence[StepAccess]) -> int:
    """How many leading steps ``old`` and ``new`` have in common: the same unit reading and writing the same
    arena bytes (hence the same tensors: the same computation on the same values, by induction from the frame's
    copy-in, which belongs to step 1). A last step's copy-out reads count, so a step that ends one scenario's
    frame and not the other's is not common (conservative)."""
    count = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        count += 1
    return count


def _live_in(new: Sequence[StepAccess], r: int) -> list[Range]:
    """The byte ranges ``new``'s steps r+1.. (their copy-out included) read from tensors its steps 1..r wrote:
    what must still hold their values when the frame continues at new step r + 1."""
    written = {tensor for step in new[:r] for tensor, _, _ in step.writes}
    return [span for step in new[r:] for span in step.reads if span[0] in written]


def resume_table(old_name: str, new_name: str, old: Sequence[StepAccess], new: Sequence[StepAccess]) -> ResumeTable:
    """The ``ResumeTable`` of ``old_name`` → ``new_name`` from both scenarios' step accesses (``step_accesses``):
    r is valid after old steps 1..t touched the arena when r ≤ the shared prefix, r ≤ the old steps finished, and
    no write of old steps r+1..t overlaps a live-in range of ``new`` at r (``_live_in``); the deepest valid r."""
    prefix = common_prefix(old, new)
    live = [_live_in(new, r) for r in range(prefix + 1)]

    def deepest(finished: int, touched: int) -> int:
        for r in range(min(finished, prefix), 0, -1):
            writes = [w for step in old[r:touched] for w in step.writes]
            if not any(_overlap(w, span) for w in writes for span in live[r]):
                return r
        return 0

    steps = len(old)
    return ResumeTable(old_name, new_name, prefix, tuple(deepest(c, c) for c in range(steps + 1)),
                       tuple(deepest(c, c + 1) for c in range(steps)))


def resume_tables(plan: UnitPlan) -> dict[tuple[str, str], ResumeTable]:
    """``resume_table`` of every ordered pair o ≠ n of ``plan``, from the plan's own offsets (the normal slots:
    a resumed frame runs on them, never on shadow slots). Cheap (run-time, at load)."""
    accesses = {s: step_accesses(plan, s) for s in plan.scenarios}
    return {(o, n): resume_table(o, n, accesses[o], accesses[n])
            for o in plan.scenarios for n in plan.scenarios if o != n}


@dataclass(frozen=True)
class ResumeHazard:
    """A resume point whose continuation would read a byte not holding what the new scenario's own frame
    would hold there."""

    old: str
    new: str
    finished: int
    partial: bool
    resume: int
    new_step: int
    detail: str


def check_resume(accesses: Mapping[str, Sequence[StepAccess]],
                 tables: Mapping[tuple[str, str], ResumeTable], *, limit: int = 20) -> list[ResumeHazard]:
    """Prove resume points safe by simulating the arena symbolically, byte range by byte range.

    Independent of ``resume_table``'s reasoning: every byte carries the *value* last written there, a value
    being (tensor, unit, the values the unit read) with the frame as the root; a step partly run (stopped by
    ``terminate``) leaves garbage in what it writes. For each ordered pair, each stop (c finished steps, between
    or inside step c + 1) and the table's resume point r: run ``old``'s steps, then ``new``'s steps r+1..|φ^n|
    (from scratch with its copy-in when r = 0), and compare every read — its copy-out included — with what
    ``new``'s own frame, run alone, reads there. ``accesses`` as ``step_accesses`` gives them (the normal slots).
    The old frame's arena after c steps is kept from one stop to the next (step c + 1 runs on a copy of it).
    """
    hazards: list[ResumeHazard] = []
    values: dict[Any, int] = {"frame": 0, "garbage": 1}  # symbolic values interned: equal values, equal ids
    for (old, new), table in tables.items():
        reference = _reads_of_run(_SymbolicArena(), accesses[new], 0, values)
        old_frame = _SymbolicArena()  # the arena after the old frame's first `finished` steps
        for finished in range(len(accesses[old]) + 1):
            if finished:
                old_frame.run(accesses[old][finished - 1], finished == 1, values)
            stops = [(False, table.after[finished])]
            if finished < len(table.during):
                stops.append((True, table.during[finished]))
            for partial, resume in stops:
                arena = old_frame.copy()
                if partial:  # stopped inside step finished + 1: what it writes is garbage
                    arena.run(accesses[old][finished], finished == 0, values, broken=True)
                got = _reads_of_run(arena, accesses[new], resume, values)
                want_reads = [*reference[resume:-1], reference[-1]]  # the new steps left, then the outputs
                for step, (want, seen) in enumerate(zip(want_reads, got, strict=True), resume + 1):
                    if want != seen:
                        hazards.append(ResumeHazard(old, new, finished, partial, resume, step,
                                                    _describe_reads(want, seen, values)))
                        if len(hazards) >= limit:
                            return hazards
                        break
    return hazards


#: What a step reads, range by range: (tensor, ((start, end, value id), ...)) per read.
_Reads = list[tuple[str, tuple[tuple[int, int, int], ...]]]


class _SymbolicArena:
    """The arena as disjoint (start, end, value id) segments sorted by start (``check_resume``'s memory)."""

    def __init__(self, segments: list[tuple[int, int, int]] | None = None) -> None:
        self.segments = segments if segments is not None else []
        self.starts = [a for a, _, _ in self.segments]

    def copy(self) -> _SymbolicArena:
        return _SymbolicArena(list(self.segments))

    def _first_touching(self, start: int) -> int:
        """Index of the first segment that ends after ``start``."""
        index = bisect.bisect_right(self.starts, start) - 1
        return index if index >= 0 and self.segments[index][1] > start else index + 1

    def write(self, start: int, end: int, value: int) -> None:
        first = last = self._first_touching(start)
        while last < len(self.segments) and self.segments[last][0] < end:
            last += 1
        pieces = [(start, end, value)]
        if first < last:
            a, _, v = self.segments[first]
            if a < start:
                pieces.insert(0, (a, start, v))
            _, b, v = self.segments[last - 1]
            if end < b:
                pieces.append((end, b, v))
        self.segments[first:last] = pieces
        self.starts[first:last] = [a for a, _, _ in pieces]

    def read(self, start: int, end: int) -> tuple[tuple[int, int, int], ...]:
        out = []
        index = self._first_touching(start)
        while index < len(self.segments) and self.segments[index][0] < end:
            a, b, v = self.segments[index]
            out.append((max(a, start), min(b, end), v))
            index += 1
        return tuple(out)

    def run(self, step: StepAccess, first: bool, values: dict[Any, int], broken: bool = False) -> _Reads:
        """Run ``step`` symbolically (``first``: it is step 1, which copies the frame in; ``broken``: it stopped
        part way, leaving garbage where it writes); the values it read, its copy-out included."""
        read_tensors = {tensor for tensor, _, _ in step.reads}
        written_tensors = {tensor for tensor, _, _ in step.writes}
        # the frame's copy-in belongs to step 1: it writes the input slot, which step 1's unit then reads; the
        # outputs' copy-out belongs to the last step: it reads what the unit wrote (a unit never reads its output)
        copied_in = {tensor for tensor in written_tensors if first and tensor in read_tensors}
        for tensor, start, end in step.writes:
            if tensor in copied_in:
                self.write(start, end, 0)
        reads = [(tensor, self.read(start, end)) for tensor, start, end in step.reads
                 if tensor not in written_tensors or tensor in copied_in]
        for tensor, start, end in step.writes:
            if tensor not in copied_in:
                self.write(start, end,
                           1 if broken else values.setdefault((tensor, step.unit, tuple(reads)), len(values)))
        copied_out = [(tensor, self.read(start, end)) for tensor, start, end in step.reads
                      if tensor in written_tensors and tensor not in copied_in]
        return reads + copied_out


def _reads_of_run(arena: _SymbolicArena, new: Sequence[StepAccess], resume: int,
                  values: dict[Any, int]) -> list[_Reads]:
    """Run ``new``'s steps resume+1.. symbolically on ``arena`` (what the old frame left there); the values each
    new step reads, range by range, then those of the outputs the caller gets (``check_resume``). A value is
    interned in ``values``: the frame (0), garbage (1), or (tensor, unit, the value ids it read)."""
    reads = [arena.run(step, k == 0, values) for k, step in enumerate(new) if k >= resume]
    # what the caller gets: the outputs' copy-out at the end, also when no new step was left to run
    outputs = [(tensor, arena.read(start, end)) for tensor, start, end in new[-1].reads
               if tensor in {t for t, _, _ in new[-1].writes}]
    return [*reads, outputs]


def _describe_reads(want: _Reads, seen: _Reads, values: dict[Any, int]) -> str:
    names = {v: k[0] if isinstance(k, tuple) else k for k, v in values.items()}  # a value by its tensor
    for (tensor, a), (_, b) in zip(want, seen, strict=True):
        if a != b:
            return (f"{tensor} holds {[names[v] for *_, v in b]}, its own frame would hold "
                    f"{[names[v] for *_, v in a]}")
    return "reads differ"
