"""Package exports resolved on first use, so that ``import sbrs.x.y`` costs only what ``y`` itself needs.

A package's ``__init__`` that imports all of its modules makes every import of one of them pay for all: the
run path of a compiled build (``sbrs run``) would load the planners, pydantic and YAML just because it reads a
dataclass from ``sbrs.compile.units``. Packages therefore name their exports here and Python's module
``__getattr__`` (PEP 562) imports the defining module when an export is first read.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_exports(namespace: MutableMapping[str, Any],
                 exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for a package whose export ``name`` lives in module ``exports[name]``."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later reads are plain attribute lookups
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
