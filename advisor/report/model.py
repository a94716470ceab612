"""The serialized data every report renders from.

``build_report_data`` gathers, from a run directory's own files
(``run.json``, ``findings.json``, ``diagnoses.json``), one plain dict; the
Markdown, HTML and terminal renderers all read that dict, so they say the
same thing. ``advisor report RUN_DIR`` rebuilds it without profiling again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from advisor import __version__
from advisor.rundir import RunDir

__all__ = ["build_report_data", "source_context"]

CONTEXT_LINES = 2


def _find_source(file: str, roots: list[Path]) -> Path | None:
    candidate = Path(file)
    if candidate.is_absolute():
        return candidate if candidate.is_file() else None
    for root in roots:
        path = root / file
        if path.is_file():
            return path
    return None


def source_context(file: str, line: int, roots: list[Path], around: int = CONTEXT_LINES) -> dict[str, Any] | None:
    """A few lines of the user's file around ``line``, for the report."""
    if not file or line is None or line < 1:
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
        "file": file,
        "line": line,
        "lines": [{"number": n, "text": text[n - 1], "hit": n == line} for n in range(lo, hi + 1)],
    }


def _locations(diag: dict[str, Any]) -> list[tuple[str, int]]:
    """file:line pairs a diagnosis points at: its facts first, then its evidence rows."""
    found: list[tuple[str, int]] = []
    facts = diag.get("facts", {})
    for key, value in facts.items():
        if key.endswith(".file") and isinstance(value, str):
            line = facts.get(key[: -len("file")] + "line")
            if isinstance(line, int):
                found.append((value, line))
    for row in diag.get("evidence", []):
        if isinstance(row.get("file"), str) and isinstance(row.get("line"), int) and row["line"] > 0:
            found.append((row["file"], row["line"]))
    unique = []
    for item in found:
        if item not in unique:
            unique.append(item)
    return unique[:3]


def build_report_data(run: RunDir) -> dict[str, Any]:
    meta = run.read_metadata()
    findings = run.read_json("findings.json")
    diagnosed = run.read_json("diagnoses.json")
    facts = {f["name"]: f["value"] for f in findings.get("facts", [])}
    roots = [Path(p) for p in meta.get("source_roots", [])]
    diagnoses = diagnosed.get("diagnoses", [])
    for diag in diagnoses:
        diag["sources"] = [c for c in (source_context(f, ln, roots) for f, ln in _locations(diag)) if c]
    artifacts = [
        {"path": run.relative(p), "bytes": p.stat().st_size}
        for p in sorted(run.path.rglob("*")) if p.is_file() and not p.name.endswith(".tmp")
    ]
    return {
        "advisor_version": __version__,
        "generated_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "run": meta,
        "verdict": diagnosed.get("verdict", {}),
        "diagnoses": diagnoses,
        "outcomes": diagnosed.get("outcomes", []),
        "facts": facts,
        "findings": findings,
        "trail": meta.get("trail", []),
        "artifacts": artifacts,
    }
