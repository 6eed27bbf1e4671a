"""Binding: a compiled plan and its sessions turned into the steps the engine calls, once, at load.

One function per kind of plan, one value type for both: :func:`bind_units` binds every (scenario, unit) of a
``UnitPlan`` to its arena slots with IOBinding, :func:`bind_parts` every band call (and feed) of a
``PartsPlan`` to its line buffers' rows; either returns :class:`Bound`, whose steps are plain callables
(``run_with_iobinding`` without the Python wrapper, ``sbrs.runtime.device.iobinding_runner``, or the line-buffer
moves before it), so a frame is a copy in, a loop of calls and copies out, with nothing else per step.
``Bound`` also records the arena bytes every step really touches, which the transition tables are checked
against (``Runtime.bound_accesses``, ``sbrs.compile.transitions.check_schedule``).

Frame input and output: copying the frame in belongs to step 1 (it writes the input slot), copying the outputs
out to the last step (it reads them). On the CPU provider both are numpy copies into and out of arena views;
on a GPU provider ``cudaMemcpy`` does it (``sbrs.runtime.device.device_copy``; units only).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sbrs.errors import InputError
from sbrs.runtime.device import ArenaMemory, device_copy, iobinding_runner

if TYPE_CHECKING:
    import onnxruntime as ort

    from sbrs.compile.parts_plan import LineBuffer, PartsPlan
    from sbrs.compile.tables import StepAccess
    from sbrs.compile.units import UnitPlan

#: One arena byte range: (tensor, start, end) relative to the arena's base, end exclusive.
Range = tuple[str, int, int]
Step = Callable[[], Any]


@dataclass
class Bound:
    """A plan bound to one arena: per scenario, its steps in order (``calls``), the frame's copy-in and the
    outputs' copy-outs; what each step runs (``steps``: unit ids or call keys); and the bytes really bound:
    ``accesses[(scenario, step)]`` (reads, writes; step 1-based), ``copy_out_reads[scenario]``, ``ranges``
    (every range bound, in binding order). ``operands``: the small int64 arrays edge calls are bound to
    (``sbrs.compile.parts_plan.edge_operands``). ``frame_owners[scenario]``, by parts where the frame is streamed:
    the last step that reads the caller's array (its last feed) and what makes the frame in flight the runtime's
    own (``own_frame``)."""

    calls: dict[str, tuple[Step, ...]] = field(default_factory=dict)
    copy_in: dict[str, Callable[[np.ndarray], None]] = field(default_factory=dict)
    copy_out: dict[str, dict[str, Callable[[], np.ndarray]]] = field(default_factory=dict)
    steps: dict[str, tuple[str, ...]] = field(default_factory=dict)
    accesses: dict[tuple[str, int], tuple[list[Range], list[Range]]] = field(default_factory=dict)
    copy_out_reads: dict[str, list[Range]] = field(default_factory=dict)
    ranges: list[Range] = field(default_factory=list)
    operands: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict)
    frame_owners: dict[str, tuple[int, Callable[[], None]]] = field(default_factory=dict)

    def own_frame(self, scenario: str, step: int) -> None:
        """After step ``step`` of ``scenario``'s frame: where feeds still to run read the caller's array, copy it and
        let them read the copy. A switch takes the next frame from the caller while this one's feeds read the
        caller's array (``sbrs.runtime.switching.start_transition``): a source that refills one buffer, as a capture
        loop does, would refill it under them."""
        owner = self.frame_owners.get(scenario)
        if owner is not None and step < owner[0]:
            owner[1]()

    def step_accesses(self) -> dict[str, tuple[StepAccess, ...]]:
        """Each scenario's steps as the bytes really bound (``StepAccess``, offsets from the arena's base)."""
        from sbrs.compile.tables import StepAccess

        return {scenario: tuple(StepAccess(name, tuple(self.accesses[(scenario, step)][0]),
                                           tuple(self.accesses[(scenario, step)][1]))
                                for step, name in enumerate(names, 1))
                for scenario, names in self.steps.items()}

    def release(self) -> None:
        """Drop the steps and copies: the IO bindings in them hold their sessions (and the weights those hold)."""
        self.calls.clear()
        self.copy_in.clear()
        self.copy_out.clear()
        self.frame_owners.clear()

    def _touch(self, scenario: str, step: int) -> tuple[list[Range], list[Range]]:
        return self.accesses.setdefault((scenario, step), ([], []))


class _Slots:
    """Where a plan's tensors are bound in ``arena`` (``offsets`` in place of the plan's, as ``bind_units``'s):
    called with a tensor id, the address, shape and dtype to bind it to, and the range recorded for it in
    ``bound``."""

    def __init__(self, plan: UnitPlan, arena: ArenaMemory, bound: Bound, offsets: Mapping[str, int] | None) -> None:
        self.tensors = {t.id: t for t in plan.tensors}
        self.arena, self.bound, self.offsets = arena, bound, offsets

    def offset_of(self, tensor_id: str) -> int:
        return self.tensors[tensor_id].offset if self.offsets is None else self.offsets[tensor_id]

    def __call__(self, tensor_id: str) -> tuple[int, tuple[int, ...], np.dtype, Range]:
        tensor = self.tensors[tensor_id]
        pointer = self.arena.pointer(self.offset_of(tensor_id))
        span = (tensor_id, pointer - self.arena.base, pointer - self.arena.base + tensor.nbytes)
        self.bound.ranges.append(span)
        return pointer, tensor.shape, np.dtype(tensor.dtype), span


def bind_units(plan: UnitPlan, sessions: Mapping[str, ort.InferenceSession], arena: ArenaMemory, device: str,
               input_name: str, run_options: ort.RunOptions,
               offsets: Mapping[str, int] | None = None) -> Bound:
    """Every (scenario, unit) of ``plan`` bound once to its arena slots, and the frame I/O.

    ``offsets`` replaces the plan's tensor offsets (the shadow slots a transition's new frame runs in,
    ``sbrs.compile.transitions.plan_shadow``)."""
    bound = Bound()
    units = {u.id: u for u in plan.units}
    slot = _Slots(plan, arena, bound, offsets)

    for scenario, sequence in plan.sequences.items():
        calls = []
        for step, unit_id in enumerate(sequence, 1):
            session = sessions[unit_id]
            unit = units[unit_id]
            binding = session.io_binding()
            reads, writes = bound._touch(scenario, step)
            for name, tensor in zip(unit.inputs, unit.input_tensors[scenario], strict=True):
                pointer, shape, dtype, span = slot(tensor)
                binding.bind_input(name, device, 0, dtype, list(shape), pointer)
                reads.append(span)
            for name in unit.outputs:
                pointer, shape, dtype, span = slot(name)
                binding.bind_output(name, device, 0, dtype, list(shape), pointer)
                writes.append(span)
            calls.append(iobinding_runner(session, binding, run_options))
        bound.calls[scenario] = tuple(calls)
        bound.steps[scenario] = tuple(sequence)
    bind_frame_io(plan, bound, arena, device, input_name, offsets)
    return bound


def bind_frame_io(plan: UnitPlan, bound: Bound, arena: ArenaMemory, device: str, input_name: str,
                  offsets: Mapping[str, int] | None = None) -> None:
    """Every scenario's frame copy-in (part of its step 1) and output copy-outs (part of its last step) of a plan
    of units, into ``bound`` (``offsets``: as ``bind_units``'s)."""
    slot = _Slots(plan, arena, bound, offsets)
    tensors, offset_of = slot.tensors, slot.offset_of

    for scenario in plan.scenarios:
        tensor = tensors[plan.inputs[scenario][input_name]]
        last = len(plan.sequences[scenario])
        if device == "cpu":
            *_, span = slot(tensor.id)
            bound._touch(scenario, 1)[1].append(span)
            input_view = arena.view(offset_of(tensor.id), tensor.shape, tensor.dtype)
            # ``view[...] = array``, bound: 0.2 µs less than ``np.copyto`` per frame (the frame's dtype is checked)
            bound.copy_in[scenario] = functools.partial(input_view.__setitem__, Ellipsis)
            bound.copy_out[scenario] = {}
            for name, tensor_id in plan.outputs[scenario].items():
                *_, span = slot(tensor_id)
                bound._touch(scenario, last)[0].append(span)
                bound.copy_out_reads.setdefault(scenario, []).append(span)
                output = tensors[tensor_id]
                bound.copy_out[scenario][name] = arena.view(offset_of(tensor_id), output.shape, output.dtype).copy
        else:
            def copy(tensor_id: str, to_device: bool) -> Callable[..., Any]:
                pointer, shape, dtype, _ = slot(tensor_id)
                return device_copy(pointer, shape, dtype, to_device=to_device)

            bound.copy_in[scenario] = copy(tensor.id, True)
            bound.copy_out[scenario] = {name: copy(tensor_id, False)
                                        for name, tensor_id in plan.outputs[scenario].items()}


def bind_parts(plan: PartsPlan, sessions: Mapping[str, ort.InferenceSession], arena: ArenaMemory,
               run_options: ort.RunOptions, *, record_accesses: bool = True) -> Bound:
    """Every call and feed of every scenario of ``plan`` bound once to its line buffers' rows (CPU arena),
    and the frame I/O: the one runtime by parts (``sbrs.compile.parts``, "Line buffers"; a streamed frame's
    feeds, ``sbrs.compile.parts_plan``, "Streamed input").

    ``record_accesses=False`` leaves ``accesses`` and ``ranges`` empty: a second band stream's arena
    (``sbrs.runtime.streams``) is checked by nobody, and its records were 0.3 MB for MobileNetV2 at 14.9 MB."""
    from sbrs.compile.parts_plan import ROWS, TO_NCHW, TO_ROWS, edge_operands  # only a runtime by parts loads it

    bound = Bound()
    names: dict[tuple[str, str], str] = {}  # one span name per tensor, not one per range bound
    operands = bound.operands  # an edge call's int64 inputs, one array per distinct value, alive with the bindings

    def view(buffer: LineBuffer, slot: int = 0, rows: int | None = None) -> np.ndarray:
        """Rows ``[slot, slot + rows)`` of ``buffer`` (rows layout), or the whole buffer (NCHW), in the arena."""
        if buffer.layout != ROWS:
            return arena.view(buffer.offset, buffer.shape, buffer.dtype)
        n, c, _, w = buffer.shape
        rows = buffer.capacity - slot if rows is None else rows
        return arena.view(buffer.offset + slot * buffer.row_bytes, (rows, n, c, w), buffer.dtype)

    def record(scenario: str, tensor: str, array: np.ndarray) -> Range:
        name = names.get((scenario, tensor))
        if name is None:
            name = names[(scenario, tensor)] = f"{scenario}/{tensor}"
        start = int(array.ctypes.data) - arena.base
        span = (name, start, start + array.nbytes)
        if record_accesses:
            bound.ranges.append(span)
        return span

    for scenario, parts in plan.scenarios.items():
        buffers = {b.tensor: b for b in parts.buffers}
        steps: list[Step] = []
        frame: list[np.ndarray] = [np.empty(0)]  # a streamed scenario's frame: the caller's array, for its feeds
        for step, call in enumerate(parts.calls, 1):
            reads, writes = bound._touch(scenario, step) if record_accesses else ([], [])
            moves = []
            for t, src, dst, rows in call.moves:
                source, target = view(buffers[t], src, rows), view(buffers[t], dst, rows)
                reads.append(record(scenario, t, source))
                writes.append(record(scenario, t, target))
                moves.append((target, source))
            if call.feed:
                if call.inputs or [o[0] for o in call.outputs] != [parts.input] or buffers[parts.input].layout != ROWS:
                    raise InputError(f"scenario {scenario}: step {step} is a feed that does not write rows of the "
                                     f"input '{parts.input}' alone, in the rows layout (a damaged plan)",
                                     field="parts")
                t, lo, hi, slot = call.outputs[0]
                rows_view = view(buffers[t], slot, hi - lo)
                writes.append(record(scenario, t, rows_view))
                steps.append(_feed_step(frame, rows_view, lo, hi, tuple(moves), TO_ROWS))
                continue
            session = sessions[call.key]
            binding = session.io_binding()
            for ranges, bind, spans in ((call.inputs, binding.bind_input, reads),
                                        (call.outputs, binding.bind_output, writes)):
                for t, lo, hi, slot in ranges:
                    buffer = buffers[t]
                    rows_view = view(buffer, slot, hi - lo)
                    name = f"{t}::rows" if buffer.layout == ROWS else t
                    bind(name, "cpu", 0, rows_view.dtype, list(rows_view.shape), rows_view.ctypes.data)
                    spans.append(record(scenario, t, rows_view))
            for name, values in (edge_operands(call) if call.edge else ()):  # the band's pads and slice rows
                operand = operands.get(values)
                if operand is None:
                    operand = operands[values] = np.array(values, np.int64)
                binding.bind_input(name, "cpu", 0, operand.dtype, list(operand.shape), operand.ctypes.data)
            steps.append(_call_step(iobinding_runner(session, binding, run_options), tuple(moves)))
        bound.calls[scenario] = tuple(steps)
        bound.steps[scenario] = tuple(call.key for call in parts.calls)
        source = buffers[parts.input]
        if parts.streamed:  # the feeds copy the frame's rows; the copy-in only hands them the caller's array
            bound.copy_in[scenario] = functools.partial(frame.__setitem__, 0)
            last_feed = max(step for step, call in enumerate(parts.calls, 1) if call.feed)
            bound.frame_owners[scenario] = (last_feed, functools.partial(_own_frame, frame))
        else:
            frame_view = view(source)
            span = record(scenario, parts.input, frame_view)
            if record_accesses:
                bound._touch(scenario, 1)[1].append(span)
            if source.layout == ROWS:
                bound.copy_in[scenario] = lambda array, v=frame_view: np.copyto(v, array.transpose(TO_ROWS))
            else:
                bound.copy_in[scenario] = lambda array, v=frame_view: np.copyto(v, array)
        outputs: dict[str, Callable[[], np.ndarray]] = {}
        for t in parts.outputs:
            output_view = view(buffers[t])
            span = record(scenario, t, output_view)
            if record_accesses:
                bound._touch(scenario, len(parts.calls))[0].append(span)
                bound.copy_out_reads.setdefault(scenario, []).append(span)
            if buffers[t].layout == ROWS:
                # always a copy: ``np.ascontiguousarray`` hands back the arena's own bytes wherever the transposed
                # view is already contiguous (one channel, or one row), which the next frame then overwrites
                outputs[t] = lambda v=output_view: v.transpose(TO_NCHW).copy()
            else:
                outputs[t] = output_view.copy
        bound.copy_out[scenario] = outputs
    return bound


def _own_frame(frame: list[np.ndarray]) -> None:
    """The frame a streamed scenario's feeds read (``frame[0]``) replaced by a copy of it (``Bound.own_frame``)."""
    frame[0] = frame[0].copy()


def _feed_step(frame: list[np.ndarray], view: np.ndarray, lo: int, hi: int,
               moves: tuple[tuple[np.ndarray, np.ndarray], ...], to_rows: tuple[int, ...]) -> Step:
    """One feed as a step of the engine: the input line buffer's moves, then rows ``[lo, hi)`` of the frame
    the scenario's copy-in took (``frame[0]``, the caller's NCHW array), transposed to the rows layout, into
    ``view``."""
    copyto = np.copyto

    def feed() -> None:
        for target, source in moves:
            copyto(target, source)
        copyto(view, frame[0][:, :, lo:hi, :].transpose(to_rows))

    return feed


def _call_step(run: Step, moves: tuple[tuple[np.ndarray, np.ndarray], ...]) -> Step:
    """One band call as a step of the engine: the line-buffer moves, then ``run`` (``iobinding_runner``)."""
    if not moves:
        return run
    copyto = np.copyto

    def step() -> None:
        for target, source in moves:
            copyto(target, source)
        run()

    return step
