"""Execution: ``Runtime`` (``executor``: sessions, one arena, bindings, the frame loop), ``ReducedRuntime``
(``reduced``: the same engine on band calls), ``device`` (providers, thread pool, arena memory) and ``open``
(``runtime_for``, the runtime of a build, what ``sbrs run`` opens)."""
