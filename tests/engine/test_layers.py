"""The expression language and YAML reading sit below the engine: they, and the knowledge base, never import it."""

from __future__ import annotations

import ast
from pathlib import Path

import advisor

ROOT = Path(advisor.__file__).parent


def _imported(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def _importers_of(prefixes: tuple[str, ...], files: list[Path]) -> list[str]:
    return sorted(f"{p.relative_to(ROOT)} imports {m}" for p in files for m in _imported(p)
                  if m.startswith(prefixes))


def test_expression_language_and_yaml_reading_import_no_stage() -> None:
    files = [*(ROOT / "expr").rglob("*.py"), *(ROOT / "yamlio").rglob("*.py")]
    assert len(files) >= 8
    stages = ("advisor.engine", "advisor.workflow", "advisor.report", "advisor.analyze", "advisor.load",
              "advisor.collect", "advisor.cli", "advisor.knowledge")
    assert _importers_of(stages, files) == []


def test_yaml_reading_does_not_need_the_expression_language() -> None:
    assert _importers_of(("advisor.expr",), [*(ROOT / "yamlio").rglob("*.py")]) == []


def test_the_knowledge_base_does_not_import_the_engine() -> None:
    assert _importers_of(("advisor.engine",), [ROOT / "knowledge.py"]) == []
