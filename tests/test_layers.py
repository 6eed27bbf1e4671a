"""The data flow runs one way (README): model → MoC → plan → build → runtime → interfaces. Every ``sbrs`` import
of every module, lazy ones inside functions included, is read from the source, so an import that reaches back
into a later stage fails here instead of surfacing as an import cycle or a run path that loads too much."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sbrs"
INTERFACES = ("sbrs.run", "sbrs.control", "sbrs.server", "sbrs.metrics", "sbrs.cli")
#: stage → what it must never import (a prefix matches the package and everything in it).
BACKWARD: dict[str, tuple[str, ...]] = {
    "sbrs.model": ("sbrs.app", "sbrs.moc", "sbrs.plan", "sbrs.build", "sbrs.runtime", *INTERFACES),
    "sbrs.moc": ("sbrs.app", "sbrs.plan", "sbrs.build", "sbrs.runtime", *INTERFACES),
    "sbrs.memory": ("sbrs.app", "sbrs.plan", "sbrs.build", "sbrs.runtime", *INTERFACES),
    "sbrs.reduction": ("sbrs.app", "sbrs.plan", "sbrs.build", "sbrs.runtime", *INTERFACES),
    "sbrs.ort_env": ("sbrs.app", "sbrs.model", "sbrs.build", "sbrs.runtime", *INTERFACES),
    # What outputs become (post-processing, saved frames): numpy only, read by the app stage, runtime and run.
    "sbrs.outputs": ("sbrs.app", "sbrs.model", "sbrs.moc", "sbrs.plan", "sbrs.build", "sbrs.runtime", "sbrs.zoo",
                     *INTERFACES),
    "sbrs.app": ("sbrs.plan", "sbrs.build", "sbrs.runtime", *INTERFACES),
    "sbrs.plan": ("sbrs.build", "sbrs.runtime", *INTERFACES),
    # The build compiles (runtime.compile, the transition tables of runtime.switch); it does not execute. Its
    # one way to running code is the measured cost model of ``sbrs build --memory-limit`` (runtime.measure).
    "sbrs.build": ("sbrs.runtime.execute", *INTERFACES),
    # The runtime's planning rooms come before the build that stores their results and the rooms that run them.
    "sbrs.runtime.compile": ("sbrs.build", "sbrs.runtime.execute", "sbrs.runtime.measure", *INTERFACES),
    "sbrs.runtime.switch": ("sbrs.build", "sbrs.runtime.execute", "sbrs.runtime.measure", *INTERFACES),
    "sbrs.runtime": INTERFACES,
}


def sbrs_imports(path: Path) -> set[str]:
    """Every ``sbrs`` module ``path`` imports, at any depth of its code."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("sbrs"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # ``from sbrs import runtime``
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("sbrs"))
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("stage", sorted(BACKWARD))
def test_no_stage_imports_a_later_one(stage: str) -> None:
    modules = [p for p in sorted(PACKAGE.rglob("*.py")) if within(module_name(p), stage)]
    assert modules, f"no modules in {stage}"
    backward = sorted(f"{module_name(path)} imports {name}" for path in modules for name in sbrs_imports(path)
                      if any(within(name, later) for later in BACKWARD[stage]))
    assert backward == []


def test_the_checker_sees_lazy_imports(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text("def f():\n    from sbrs.runtime.execute.device import ArenaMemory\n    import sbrs.cli\n")
    assert {"sbrs.runtime.execute.device", "sbrs.cli"} <= sbrs_imports(source)
