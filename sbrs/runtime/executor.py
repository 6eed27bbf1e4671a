"""The runtime: one session per execution unit, one arena, bindings made once, a frame is a list of calls.

    >>> with load_app("apps/tiny.yaml").runtime() as rt:          # doctest: +SKIP
    ...     outputs = rt.infer(frame)                             # {"output": array of shape (1, 10)}
    ...     rt.switch("skip")

Building (``Runtime.__init__``): derive the MoC (Algorithm 5) with the app's adaptive set A, cut it into
execution units (``sbrs.runtime.units``), plan the boundary tensors into one arena and check the plan
(``sbrs.runtime.arena``), then load every unit once, whatever the number of scenarios using it, and bind its
inputs and outputs to their arena slots once per (scenario, unit). The app's models are not kept: after
building, the runtime holds only sessions, bindings, the arena and the (small) ``UnitPlan``. Drop the
``App`` afterwards and call ``sbrs.runtime.device.release_free_memory()`` to give the parsed weights' memory
back to the system (``sbrs run`` and ``sbrs bench`` do).

Per frame (``infer``): check the frame, copy it into the arena, call ``run_with_iobinding`` for each unit of
the current scenario, copy the graph outputs out (the caller owns the copies). A rejected frame or switch
raises ``InputError`` before anything is touched, so the runtime stays usable. ``infer`` and ``switch`` take
one lock: a switch requested from another thread takes effect between frames, the frame in flight finishes on
the old scenario.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.moc import Moc, derive_moc
from sbrs.runtime.arena import plan_layout
from sbrs.runtime.device import (
    ArenaMemory,
    ThreadPool,
    copy_model,
    create_session,
    device_of,
    resolve_providers,
    use_global_thread_pool,
)
from sbrs.runtime.units import UnitPlan, layout_units, unit_model

if TYPE_CHECKING:
    import onnxruntime as ort

    from sbrs.app.app import App

Frame = np.ndarray | Mapping[str, np.ndarray]


def build_unit_plan(app: App, granularity: str | None = None, moc: Moc | None = None) -> UnitPlan:
    """The ``UnitPlan`` of ``app`` (units, sequences, arena offsets), checked, without loading anything."""
    moc = moc or derive_moc(app.models, app.config.adaptive)
    chosen = granularity or app.config.runtime.granularity
    layout = layout_units(app.models, moc, chosen)
    return plan_layout(layout, app=app.name, granularity=chosen, adaptive=tuple(app.config.adaptive))


class Runtime:
    """An app's scenarios, ready to run frames (Python API of DESIGN.md, "Interfaces").

    ``granularity`` overrides app.yaml's ``runtime.granularity`` (``auto`` or ``layer``).
    """

    def __init__(self, app: App, *, granularity: str | None = None) -> None:
        config = app.config
        self.providers = resolve_providers(tuple(config.runtime.providers), where=config.path)
        self.device = device_of(self.providers)
        self.thread_pool: ThreadPool = use_global_thread_pool(config.runtime.threads)
        moc = derive_moc(app.models, config.adaptive)
        self.plan = build_unit_plan(app, granularity, moc)
        self.input_specs = {config.input.name: (tuple(config.input.shape), np.dtype(config.input.dtype))}
        self._lock = threading.Lock()
        self._closed = False
        self._scenario = config.initial

        specs = {t.id: t.spec for t in self.plan.tensors}
        self._bound_ranges: list[tuple[str, int, int]] = []  # (tensor, start, end) of every binding, from base
        self._sessions: dict[str, ort.InferenceSession] = {}
        for unit in self.plan.units:
            self._sessions[unit.id] = create_session(unit_model(app.models, moc, unit, specs, app.name), self.providers)
        self._arena = ArenaMemory(self.plan.arena_bytes, self.device, self.plan.alignment)
        self._calls: dict[str, tuple[Callable[[], Any], ...]] = {
            scenario: tuple(self._bound_call(scenario, unit_id) for unit_id in calls)
            for scenario, calls in self.plan.sequences.items()}
        self._copy_in: dict[str, Callable[[np.ndarray], None]] = {}
        self._copy_out: dict[str, dict[str, Callable[[], np.ndarray]]] = {}
        self._bind_frame_io(config.input.name)

    # -- building ---------------------------------------------------------------------------------------

    def _slot(self, tensor_id: str) -> tuple[int, tuple[int, ...], np.dtype]:
        """The address, shape and dtype to bind ``tensor_id`` to (recorded for ``arena_view_bounds``)."""
        tensor = self.plan.tensor(tensor_id)
        pointer = self._arena.pointer(tensor.offset)
        self._bound_ranges.append((tensor_id, pointer - self._arena.base, pointer - self._arena.base + tensor.nbytes))
        return pointer, tensor.shape, np.dtype(tensor.dtype)

    def _bound_call(self, scenario: str, unit_id: str) -> Callable[[], Any]:
        """``run_with_iobinding`` of one unit with its inputs and outputs bound to ``scenario``'s arena slots."""
        session = self._sessions[unit_id]
        unit = self.plan.unit(unit_id)
        binding = session.io_binding()
        for name, tensor in zip(unit.inputs, unit.input_tensors[scenario], strict=True):
            pointer, shape, dtype = self._slot(tensor)
            binding.bind_input(name, self.device, 0, dtype, list(shape), pointer)
        for name in unit.outputs:
            pointer, shape, dtype = self._slot(name)
            binding.bind_output(name, self.device, 0, dtype, list(shape), pointer)

        def call() -> None:
            session.run_with_iobinding(binding)

        return call

    def _bind_frame_io(self, input_name: str) -> None:
        """How a frame gets into the arena and the outputs out of it: numpy copies (CPU) or copy sessions (GPU)."""
        for scenario in self.plan.scenarios:
            tensor = self.plan.tensor(self.plan.inputs[scenario][input_name])
            if self.device == "cpu":
                self._slot(tensor.id)
                input_view = self._arena.view(tensor.offset, tensor.shape, tensor.dtype)
                self._copy_in[scenario] = lambda array, view=input_view: np.copyto(view, array)
                self._copy_out[scenario] = {}
                for name, tensor_id in self.plan.outputs[scenario].items():
                    self._slot(tensor_id)
                    output = self.plan.tensor(tensor_id)
                    self._copy_out[scenario][name] = self._arena.view(output.offset, output.shape, output.dtype).copy
            else:
                self._copy_in[scenario] = self._device_copy(tensor.id, to_device=True)
                self._copy_out[scenario] = {name: self._device_copy(tensor_id, to_device=False)
                                            for name, tensor_id in self.plan.outputs[scenario].items()}

    def _device_copy(self, tensor_id: str, *, to_device: bool) -> Callable[..., Any]:
        """GPU arena only (untested here): an Identity session copying between a host buffer and a slot."""
        pointer, shape, dtype = self._slot(tensor_id)
        session = create_session(copy_model(shape, dtype.name), self.providers)
        self._sessions[f"copy:{tensor_id}:{'in' if to_device else 'out'}"] = session
        host = np.zeros(shape, dtype)
        binding = session.io_binding()
        host_side, device_side = ("x", "y") if to_device else ("y", "x")
        bind_host = binding.bind_input if to_device else binding.bind_output
        bind_device = binding.bind_output if to_device else binding.bind_input
        bind_host(host_side, "cpu", 0, dtype, list(shape), host.ctypes.data)
        bind_device(device_side, self.device, 0, dtype, list(shape), pointer)

        def copy_in(array: np.ndarray) -> None:
            np.copyto(host, array)
            session.run_with_iobinding(binding)

        def copy_out() -> np.ndarray:
            session.run_with_iobinding(binding)
            return host.copy()

        return copy_in if to_device else copy_out

    # -- the API ----------------------------------------------------------------------------------------

    @property
    def scenario(self) -> str:
        """The current scenario: the one the next frame runs on."""
        return self._scenario

    @property
    def scenarios(self) -> tuple[str, ...]:
        return self.plan.scenarios

    @property
    def arena_bytes(self) -> int:
        """Bytes of the arena of boundary tensors (tensors inside units are ONNX Runtime's own memory)."""
        return self.plan.arena_bytes

    @property
    def session_count(self) -> int:
        """Sessions loaded for units (each unit once, however many scenarios use it)."""
        return sum(1 for unit in self.plan.units if unit.id in self._sessions)

    def arena_view_bounds(self) -> list[tuple[str, int, int]]:
        """(tensor, start, end) of every address bound to a unit or copied in/out, relative to the arena's base."""
        return list(self._bound_ranges)

    def switch(self, scenario: str) -> None:
        """Run the next frame on ``scenario``; an unknown name is an ``InputError`` and changes nothing."""
        if scenario not in self.plan.sequences:
            raise InputError(f"unknown scenario '{scenario}' (scenarios: {', '.join(self.plan.scenarios)})",
                             field="switch")
        with self._lock:
            self._scenario = scenario

    def infer(self, frame: Frame) -> dict[str, np.ndarray]:
        """Run one frame on the current scenario: output name → array (copies owned by the caller)."""
        arrays = self._checked_frame(frame)
        with self._lock:
            if self._closed:
                raise SbrsRuntimeError("the runtime is closed")
            scenario = self._scenario
            for array in arrays.values():  # one app input (checked at load); a dict keeps the contract general
                self._copy_in[scenario](array)
            for call in self._calls[scenario]:
                call()
            return {name: copy() for name, copy in self._copy_out[scenario].items()}

    def _checked_frame(self, frame: Frame) -> dict[str, np.ndarray]:
        names = tuple(self.input_specs)
        if isinstance(frame, Mapping):
            if set(frame) != set(names):
                raise InputError(f"expected inputs {list(names)}, got {sorted(map(str, frame))}",
                                 field="frame")
            arrays = dict(frame)
        else:
            arrays = {names[0]: frame}
        for name, array in arrays.items():
            shape, dtype = self.input_specs[name]
            if not isinstance(array, np.ndarray):
                raise InputError(f"input '{name}': expected a numpy array, got {type(array).__name__}", field="frame")
            if array.shape != shape or array.dtype != dtype:
                raise InputError(f"input '{name}': got shape {list(array.shape)} {array.dtype}, the app's input is "
                                 f"{list(shape)} {dtype}", field="frame")
        return arrays

    def close(self) -> None:
        """Release the sessions, bindings and arena; later ``infer`` calls raise ``SbrsRuntimeError``."""
        with self._lock:
            self._closed = True
            self._calls.clear()
            self._copy_in.clear()
            self._copy_out.clear()
            self._sessions.clear()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Runtime(app={self.plan.app!r}, scenario={self._scenario!r}, units={len(self.plan.units)}, "
                f"granularity={self.plan.granularity!r}, arena_bytes={self.plan.arena_bytes})")
