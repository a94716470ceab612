"""Knowledge entries: the long explanation of one bottleneck pattern.

A knowledge entry is ``knowledge/<id>.md``: YAML front matter (``id``,
``title``, ``summary``, and optionally ``category``), then Markdown with one
``## `` heading per section (*What it looks like*, *Why it slows training*,
*How to fix*, *Expected gain*, *References*). Rules name entries in their
``knowledge`` list; reports show the summary and the sections.

    >>> entry = load_entry("dataloader-starvation")
    >>> entry.sections["Why it slows training"][:9]
    'With `num'
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from advisor.engine.safe_yaml import parse_yaml
from advisor.errors import InputError, RuleError
from advisor.resources import knowledge_dir

__all__ = ["SECTIONS", "Entry", "find_entry", "load_entry", "parse_entry"]

#: the sections every entry has, in order
SECTIONS = ("What it looks like", "Why it slows training", "How to fix", "Expected gain", "References")


@dataclass(frozen=True)
class Entry:
    """One knowledge entry: front matter plus its ``## `` sections (Markdown text, in file order)."""

    id: str
    title: str
    summary: str
    sections: dict[str, str] = field(default_factory=dict)
    category: str = ""
    path: Path | None = None


def parse_entry(text: str, path: Path | None = None) -> Entry:
    """An entry from the text of its file; a missing front matter or id is an :class:`InputError`."""
    where = path or Path("<knowledge>")
    if not text.startswith("---"):
        raise InputError(where, "a knowledge entry must start with YAML front matter between '---' lines")
    head, sep, body = text[3:].partition("\n---")
    if not sep:
        raise InputError(where, "the front matter has no closing '---' line")
    try:
        meta, _ = parse_yaml(head, path)
    except RuleError as exc:
        raise InputError(where, f"front matter: {exc.message}") from None
    if not isinstance(meta, dict) or not meta.get("id"):
        raise InputError(where, "the front matter needs at least `id`, `title` and `summary`")
    return Entry(
        id=str(meta["id"]), title=str(meta.get("title", meta["id"])), summary=" ".join(str(meta.get("summary", "")).split()),
        sections=_sections(body.split("\n", 1)[1] if "\n" in body else ""), category=str(meta.get("category", "")),
        path=path,
    )


def _sections(body: str) -> dict[str, str]:
    """``## Heading`` -> the Markdown under it (outside fenced code blocks only)."""
    sections: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    fenced = False
    for line in body.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            if current is not None:
                sections[current] = "\n".join(lines).strip()
            current, lines = line[3:].strip(), []
        elif current is not None:
            lines.append(line)
    if current is not None:
        sections[current] = "\n".join(lines).strip()
    return sections


def find_entry(entry_id: str, extra_dirs: Iterable[Path] = ()) -> Path | None:
    """The file of entry ``entry_id``: the user's folders first, then the built-in ones."""
    if not entry_id or "/" in entry_id or "\\" in entry_id or entry_id.startswith("."):
        return None
    for folder in (*extra_dirs, knowledge_dir()):
        path = Path(folder) / f"{entry_id}.md"
        if path.is_file():
            return path
    return None


def load_entry(entry_id: str, extra_dirs: Iterable[Path] = ()) -> Entry:
    """Load entry ``entry_id``; an unknown id is an :class:`InputError` naming the folders searched."""
    path = find_entry(entry_id, extra_dirs)
    if path is None:
        raise InputError(knowledge_dir() / f"{entry_id}.md", "no such knowledge entry; check the rule's `knowledge` list")
    return parse_entry(path.read_text(encoding="utf-8"), path)
