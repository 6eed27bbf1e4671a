"""Stage 7 of the data flow: the runtime, one engine executing one compiled plan.

    >>> rt = runtime_for("apps/tiny.yaml")           # doctest: +SKIP
    >>> outputs = rt.infer(frame); rt.switch("skip")  # doctest: +SKIP

``engine``: ``Runtime`` (execution units or processing by parts), ``program`` (what it executes), ``runner``
(what every frame does on the bound plan: ``FrameRunner``, ``FrameResult``), ``binding`` (plans bound to the
arena), ``switching`` (SBRS-TP, new-first, cancel, resume), ``streams`` (frames in flight at once),
``reports`` (facts, memory), ``device`` (arena memory, bound calls),
``control_node`` (the SBRS control node), ``events`` (what a run reports), ``open`` (``runtime_for``, the
runtime of a build, what ``sbrs run`` opens). The ``sbrs run`` loop and its frame sources are an interface
(``sbrs.run``); building is ``sbrs.artifact``'s.
"""

from typing import TYPE_CHECKING

from sbrs._lazy import lazy_exports

if TYPE_CHECKING:
    from sbrs.runtime.engine import Runtime
    from sbrs.runtime.open import runtime_for
    from sbrs.runtime.runner import Frame, FrameResult

__all__ = ["Frame", "FrameResult", "Runtime", "runtime_for"]

__getattr__, __dir__ = lazy_exports(globals(), {
    "Frame": "sbrs.runtime.runner",
    "FrameResult": "sbrs.runtime.runner",
    "Runtime": "sbrs.runtime.engine",
    "runtime_for": "sbrs.runtime.open",
})
