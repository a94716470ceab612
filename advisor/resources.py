"""Where the built-in rules, knowledge entries and report templates live.

In a source checkout (or an editable install) they are the top-level folders
``rules/``, ``knowledge/`` and ``reports/templates/``. A wheel carries copies
inside the package under ``advisor/_data/`` (see pyproject.toml), so a plain
``pip install .`` finds them too. The installed copy wins when both exist.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

__all__ = ["knowledge_dir", "rules_dir", "templates_dir"]

_PACKAGE = Path(__file__).resolve().parent
_SOURCE_ROOT = _PACKAGE.parent


@cache
def _locate(installed: str, source: str) -> Path:
    for candidate in (_PACKAGE / "_data" / installed, _SOURCE_ROOT / source):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"advisor's built-in {installed}/ folder is missing from {_PACKAGE}; reinstall the package"
    )


def rules_dir() -> Path:
    """The built-in rule packs and the workflow graph."""
    return _locate("rules", "rules")


def knowledge_dir() -> Path:
    """The knowledge entries, one Markdown file per bottleneck pattern."""
    return _locate("knowledge", "knowledge")


def templates_dir() -> Path:
    """The jinja2 templates of the reports."""
    return _locate("templates", "reports/templates")
