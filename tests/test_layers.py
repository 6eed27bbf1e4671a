"""The data flow runs one way (docs/DESIGN.md, "The house"): every import of every ``sbrs`` module, lazy ones inside
functions included, is read from the source, and a module may import only from its own stage or an earlier
one. An import that reaches into a later stage fails here instead of surfacing as an import cycle or as a run
path that loads too much. Inside a package the files import one way too (no circle, lazy and ``TYPE_CHECKING``
imports included), and no file takes another file's underscore names."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sbrs"
#: The stages in data-flow order; a name is a module or a package (a prefix matches everything in it).
STAGES: tuple[tuple[str, ...], ...] = (
    # below every stage (sbrs.outputs: what outputs become, numpy only, read by the app, the runtime and run)
    ("sbrs.errors", "sbrs._lazy", "sbrs.digest", "sbrs.cache", "sbrs.folder_lock", "sbrs.ort_env", "sbrs.log",
     "sbrs.outputs"),
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


# -- no circles inside a package, no underscore names taken across files (docs/DESIGN.md, "The house") ----------


def package_of(name: str, root: Path = PACKAGE) -> str:
    """The package module ``name`` lies in (a package's ``__init__`` lies in the package itself)."""
    return name if (root.parent / name.replace(".", "/") / "__init__.py").is_file() else name.rpartition(".")[0]


def sources(root: Path = PACKAGE) -> dict[str, ast.Module]:
    """Every module under ``root`` (the ``sbrs`` folder, or a copy of one), parsed, by module name."""
    return {module_name_under(path, root): ast.parse(path.read_text(encoding="utf-8"), str(path))
            for path in sorted(root.rglob("*.py"))}


def module_name_under(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def lazy_exports_of(tree: ast.Module) -> dict[str, str]:
    """A package's exports resolved on first use (``sbrs._lazy.lazy_exports(globals(), {name: module})``)."""
    return {key.value: value.value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "lazy_exports"
            for argument in node.args if isinstance(argument, ast.Dict)
            for key, value in zip(argument.keys, argument.values, strict=True)
            if isinstance(key, ast.Constant) and isinstance(value, ast.Constant)}


def imported_modules(tree: ast.Module, modules: dict[str, ast.Module],
                     exports: dict[str, dict[str, str]] | None = None) -> dict[str, int]:
    """Every module of ``modules`` that ``tree`` imports, at any depth of its code (``TYPE_CHECKING`` and lazy
    imports inside functions included), with the line of its first import. ``from p import n`` imports the module
    ``p.n`` when there is one, else ``p`` and, where ``p`` is a package exporting ``n`` lazily, the module
    defining ``n`` (``exports``: each package's, when already read)."""
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in modules:
                    found.setdefault(f"{node.module}.{alias.name}", node.lineno)
                    continue
                found.setdefault(node.module, node.lineno)
                if node.module in modules:
                    package = (exports.get(node.module, {}) if exports is not None
                               else lazy_exports_of(modules[node.module]))
                    lazy = package.get(alias.name)
                    if lazy is not None:
                        found.setdefault(lazy, node.lineno)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found.setdefault(alias.name, node.lineno)
    return {name: line for name, line in found.items() if name in modules}


def circles(root: Path = PACKAGE) -> list[str]:
    """Each circle of imports between the files of one package, as ``a:LINE -> b:LINE -> a``: every strongly
    connected component of the package's import graph (Tarjan's algorithm), walked once around."""
    modules = sources(root)
    packages = {name: package_of(name, root) for name in modules}
    exports = {name: lazy_exports_of(tree) for name, tree in modules.items() if packages[name] == name}
    graph = {name: {target: line for target, line in imported_modules(tree, modules, exports).items()
                    if target != name and packages[target] == packages[name]}
             for name, tree in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for target in graph[name]:
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            component = []
            while not component or component[-1] != name:
                component.append(stack.pop())
            if len(component) > 1:
                components.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    found = []
    for component in components:  # the shortest way around from its first module (breadth first)
        start, members = component[0], set(component)
        came_from: dict[str, str] = {}
        frontier = [start]
        while start not in came_from:
            following = []
            for here in frontier:
                for target in sorted(graph[here]):
                    if target in members and target not in came_from:
                        came_from[target] = here
                        following.append(target)
            frontier = following
        path = [start, came_from[start]]
        while path[-1] != start:
            path.append(came_from[path[-1]])
        path.reverse()
        found.append(" -> ".join(f"{name}:{graph[name][after]}" for name, after in itertools.pairwise(path))
                     + f" -> {start}")
    return sorted(found)


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_names_defined(tree: ast.Module) -> set[str]:
    """The underscore attributes a file defines on its own objects: methods and attributes of its classes
    (``def _x``, ``_x = ...`` in a class body, ``self._x = ...`` or ``cls._x = ...`` anywhere)."""
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    defined.add(item.name)
                elif isinstance(item, ast.Assign):
                    defined.update(t.id for t in item.targets if isinstance(t, ast.Name))
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    defined.add(item.target.id)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                defined.update(sub.attr for sub in ast.walk(target) if isinstance(sub, ast.Attribute)
                               and isinstance(sub.value, ast.Name) and sub.value.id in ("self", "cls"))
    return {name for name in defined if private(name)}


def private_names_taken(root: Path = PACKAGE) -> list[str]:
    """Every place a file takes another file's underscore name: ``from sbrs.x.y import _name``, ``module._name``
    on a module it imported, or ``obj._attr`` where ``_attr`` is an attribute another file defines on its own
    objects and this file does not (``private_names_defined``: a runtime's ``_lock`` read by another file)."""
    modules = sources(root)
    defined = {name: private_names_defined(tree) for name, tree in modules.items()}
    owners: dict[str, set[str]] = {}
    for name, attributes in defined.items():
        for attribute in attributes:
            owners.setdefault(attribute, set()).add(name)
    found = []
    for name, tree in modules.items():
        bound: set[str] = set()  # names this file binds to modules of the package
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in modules:
                        bound.add(alias.asname or alias.name)
                    elif private(alias.name):
                        found.append(f"{name}:{node.lineno} imports {node.module}.{alias.name}")
            elif isinstance(node, ast.Import):
                bound.update(alias.asname or alias.name for alias in node.names if alias.name in modules)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not private(node.attr):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in bound:
                found.append(f"{name}:{node.lineno} takes {node.value.id}.{node.attr}")
            elif node.attr not in defined[name] and node.attr in owners:
                found.append(f"{name}:{node.lineno} takes {ast.unparse(node)} (defined in "
                             f"{', '.join(sorted(owners[node.attr]))})")
    return sorted(set(found))


def test_no_import_circle_inside_a_package() -> None:
    assert circles() == []


def test_no_file_takes_another_files_underscore_names() -> None:
    assert private_names_taken() == []


def test_the_circle_checker_sees_what_it_looks_for(tmp_path: Path) -> None:
    package = tmp_path / "sbrs"
    (package / "stage").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "stage" / "__init__.py").write_text(
        "from sbrs._lazy import lazy_exports\n__getattr__, __dir__ = lazy_exports(globals(), {'C': 'sbrs.stage.c'})\n")
    (package / "stage" / "a.py").write_text("from sbrs.stage.b import thing\n")
    (package / "stage" / "b.py").write_text("def f():\n    from sbrs.stage import a\n    return a._hidden\n")
    (package / "stage" / "c.py").write_text("class C:\n    def __init__(self):\n        self._own = 1\n")
    (package / "stage" / "d.py").write_text("from sbrs.stage import C\nfrom sbrs.stage.a import _x\n"
                                            "def g(c):\n    return c._own\n")
    (package / "stage" / "e.py").write_text("import sbrs.stage.d\n")
    assert circles(package) == ["sbrs.stage.a:1 -> sbrs.stage.b:2 -> sbrs.stage.a"]
    assert private_names_taken(package) == ["sbrs.stage.b:3 takes a._hidden",
                                            "sbrs.stage.d:2 imports sbrs.stage.a._x",
                                            "sbrs.stage.d:4 takes c._own (defined in sbrs.stage.c)"]
    (package / "stage" / "c.py").write_text("from sbrs.stage.d import g\n")  # c -> d -> c (the lazy export C)
    assert "sbrs.stage.c:1 -> sbrs.stage.d:1 -> sbrs.stage.c" in circles(package)
