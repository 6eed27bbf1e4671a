"""The data flow runs one way (docs/DESIGN.md, "The house"): every import of every ``sbrs`` module, lazy ones inside
functions included, is read from the source, and a module may import only from its own stage or an earlier
one. An import that reaches into a later stage fails here instead of surfacing as an import cycle or as a run
path that loads too much."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sbrs"
#: The stages in data-flow order; a name is a module or a package (a prefix matches everything in it).
STAGES: tuple[tuple[str, ...], ...] = (
    # below every stage (sbrs.outputs: what outputs become, numpy only, read by the app, the runtime and run)
    ("sbrs.errors", "sbrs._lazy", "sbrs.digest", "sbrs.cache", "sbrs.ort_env", "sbrs.log", "sbrs.outputs"),
    ("sbrs.model", "sbrs.zoo"),
    ("sbrs.app",),
    ("sbrs.moc",),
    ("sbrs.memory",),
    ("sbrs.reduction",),
    ("sbrs.compile",),
    ("sbrs.artifact",),
    ("sbrs.runtime",),
    ("sbrs.run", "sbrs.control", "sbrs.server", "sbrs.metrics", "sbrs.bench", "sbrs.report", "sbrs.cli"),  # interfaces
)
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


def stage_of(name: str) -> int | None:
    """The stage of module ``name`` (None: the package itself, or a name of it such as ``sbrs.__version__``)."""
    found = [index for index, stage in enumerate(STAGES) for prefix in stage if within(name, prefix)]
    return found[0] if found else None


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if module_name(p) != "sbrs")


def test_every_module_belongs_to_a_stage() -> None:
    assert [module_name(p) for p in modules() if stage_of(module_name(p)) is None] == []


@pytest.mark.parametrize("stage", range(len(STAGES)), ids=[" ".join(s) for s in STAGES])
def test_no_stage_imports_a_later_one(stage: int) -> None:
    mine = [path for path in modules() if stage_of(module_name(path)) == stage]
    assert mine, f"no modules in {STAGES[stage]}"
    backward = sorted(f"{module_name(path)} imports {name}" for path in mine for name in sbrs_imports(path)
                      if (stage_of(name) or 0) > stage)
    assert backward == []


def test_the_checker_sees_lazy_imports(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text("def f():\n    from sbrs.runtime.device import ArenaMemory\n    import sbrs.cli\n")
    assert {"sbrs.runtime.device", "sbrs.cli"} <= sbrs_imports(source)
