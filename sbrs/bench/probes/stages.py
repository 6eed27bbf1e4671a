"""The probes' side of the stage protocol (``sbrs.bench.probes``): imported by path-run probes as a sibling file."""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def stage(name: str, facts: dict[str, Any] | None = None) -> None:
    """Tell the parent that stage ``name`` is reached and wait until it has read this process's memory."""
    print("STAGE", name, json.dumps(facts or {}), flush=True)
    if not sys.stdin.readline():
        raise SystemExit(0)  # the parent is gone or done


def malloc_trim() -> bool:
    """glibc's ``malloc_trim(0)``: hand freed heap back to the system (Linux with glibc only)."""
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True


def compiled_here(package: str) -> list[str]:
    """The modules of ``package`` this process compiled from source: no cached bytecode on disk (the
    interpreter runs with ``PYTHONDONTWRITEBYTECODE`` or its cache is not writable). Compiling costs the process
    heap it keeps; an installed package runs from cached bytecode."""
    return sorted(name for name, module in list(sys.modules.items())
                  if (name == package or name.startswith(package + "."))
                  and getattr(module, "__cached__", None) and not os.path.exists(module.__cached__))
