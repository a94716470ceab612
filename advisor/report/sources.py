"""Where a diagnosis points in the user's code: file:line pairs, the lines around them, the module path.

Locations come, in this order, from the diagnosis's ``where`` text
(``train.py:62 (main)``), from the facts it used (``x.file`` with ``x.line``),
and from its evidence rows (``file`` and ``line`` columns). The lines are read
from the user's file at report time, found through the run's source roots.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CONTEXT_LINES", "locations", "module_path", "source_context"]

CONTEXT_LINES = 3
MAX_LOCATIONS = 3
_SITE = re.compile(r"([^\s:;,()'\"]+\.py):(\d+)")


def _find_source(file: str, roots: Sequence[Path]) -> Path | None:
    candidate = Path(file)
    if candidate.is_absolute():
        return candidate if candidate.is_file() else None
    for root in roots:
        path = root / file
        if path.is_file():
            return path
    return None


def source_context(file: str, line: int, roots: Sequence[Path], around: int = CONTEXT_LINES) -> dict[str, Any] | None:
    """A few lines of the user's file around ``line``, or None when the file cannot be read."""
    if not file or not isinstance(line, int) or line < 1:
        return None
    path = _find_source(file, roots)
    if path is None:
        return None
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    if line > len(text):
        return None
    lo, hi = max(line - around, 1), min(line + around, len(text))
    return {
        "file": file, "path": str(path), "line": line,
        "lines": [{"number": n, "text": text[n - 1], "hit": n == line} for n in range(lo, hi + 1)],
    }


def locations(diag: Mapping[str, Any]) -> list[tuple[str, int]]:
    """file:line pairs a diagnosis points at, without repeats, at most three."""
    found = [(m.group(1), int(m.group(2))) for m in _SITE.finditer(str(diag.get("where") or ""))]
    facts = diag.get("facts") or {}
    for key, value in facts.items():
        if key.endswith(".file") and isinstance(value, str):
            line = facts.get(key[: -len("file")] + "line")
            if isinstance(line, int):
                found.append((value, line))
    for row in diag.get("evidence") or []:
        if isinstance(row, Mapping) and isinstance(row.get("file"), str) and isinstance(row.get("line"), int):
            found.append((row["file"], row["line"]))
    unique: list[tuple[str, int]] = []
    for item in found:
        if item not in unique and item[1] > 0:
            unique.append(item)
    return unique[:MAX_LOCATIONS]


def module_path(diag: Mapping[str, Any]) -> str:
    """The nn.Module path a diagnosis points at, from its own facts (``x.module``) or evidence rows
    (``module`` column); '' when it names none. Not guessed from other ops at the same line: a line
    can call into several modules, or none."""
    for key, value in (diag.get("facts") or {}).items():
        if key.endswith(".module") and isinstance(value, str) and value:
            return value
    for row in diag.get("evidence") or []:
        if isinstance(row, Mapping) and isinstance(row.get("module"), str) and row["module"]:
            return row["module"]
    return ""
