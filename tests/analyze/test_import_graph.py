"""The import graph inside advisor/analyze/: no cycles, and each tool's package reads only shared code.

Imports are read from the source with :mod:`ast`: at module level, inside functions and under
``if TYPE_CHECKING:`` alike, since an import for type hints ties two modules as much as one that runs. The one
import allowed to point back up is the registry's late import of :mod:`advisor.analyze.builtin` (it loads the
built-in analyzers on first use).
"""

from __future__ import annotations

import ast
from pathlib import Path

import advisor.analyze

ROOT = Path(advisor.analyze.__file__).parent
PACKAGE = "advisor.analyze"
#: (importer, imported): the registry loads the built-in analyzers on first use, after every module is defined
LATE_LOAD = {("advisor.analyze.registry", "advisor.analyze.builtin")}
#: tool package -> the tool packages it may import besides the shared modules at the root of analyze/
MAY_IMPORT = {"framework": set(), "system": set(), "kernel": set(), "trial": set(), "ranks": {"framework"}}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join((PACKAGE, *parts[:-1])) if parts[-1] == "__init__" else ".".join((PACKAGE, *parts))


def _imports(tree: ast.AST, modules: set[str]) -> set[str]:
    """The modules of analyze/ that this tree imports."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:  # `from advisor.analyze import intervals` imports a module
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in modules else node.module)
    return {m for m in out if m in modules}


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in ROOT.rglob("*.py")}
    modules = set(files)
    graph = {}
    for name, path in files.items():
        deps = _imports(ast.parse(path.read_text(), str(path)), modules) - {name}
        # importing a submodule runs its package's __init__, which holds only a docstring here
        graph[name] = {d for d in deps if (name, d) not in LATE_LOAD and d != PACKAGE}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle, as the modules along it; [] when there is none."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_no_import_cycle_inside_analyze() -> None:
    graph = _graph()
    assert "advisor.analyze.framework.view" in graph and graph["advisor.analyze.framework.view"], "graph not read"
    assert _cycle(graph) == []


def test_a_cycle_is_found_when_there_is_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_tool_packages_import_only_shared_code_and_what_they_build_on() -> None:
    wrong = []
    for name, deps in _graph().items():
        parts = name.split(".")
        if len(parts) < 4 or parts[2] not in MAY_IMPORT:
            continue
        for dep in deps:
            other = dep.split(".")
            if len(other) >= 4 and other[2] != parts[2] and other[2] not in MAY_IMPORT[parts[2]]:
                wrong.append(f"{name} imports {dep}")
    assert wrong == []


def test_every_subpackage_of_analyze_is_a_tool_package() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages == set(MAY_IMPORT)
