"""Knowledge entries: reading them, and checking that each one is complete.

An entry is ``knowledge/<id>.md``: YAML front matter between ``---`` lines
(``id``, ``title``, ``category``, ``summary``, optional ``tags``), then one
``## `` heading per section, in this order:

- *What it looks like*: how the problem shows in a profile;
- *Why it slows training*: the mechanism;
- *How to fix*: with at least one fenced code snippet;
- *Expected gain*: how much it gives back, and where that number comes from
  (a link to its source, or a bundled ``examples/`` script that measures it);
- *References*: links to primary documentation.

:func:`check_entry` returns what is missing, each problem with its line, so
``advisor rules lint`` can fail on an incomplete entry. Rules name entries
in their ``knowledge`` list; :func:`load_entry` finds one for a report, in
the rule's own folder first, then among the built-in entries.

An entry that no rule can detect yet says so in its front matter, with the
data a rule would need (words of :data:`NEEDS`), the rule that will use it,
and why the data at hand cannot show the problem::

    detection:
      needs: [gpu]
      rule: GPU011
      why: a CPU run has no kernel launches to count

``advisor rules lint`` fails on a built-in entry that no rule names and that
has no such marker, so a run with that problem is never silently called
healthy.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collections.abc import Iterable

from advisor.errors import InputError, RuleError
from advisor.resources import knowledge_dir
from advisor.yamlio.safe_yaml import parse_yaml_cached

__all__ = ["NEEDS", "REQUIRED_FIELDS", "SECTIONS", "Detection", "Entry", "check_entry", "entry_files",
           "find_entry", "load_entries", "load_entry", "parse_entry"]

SECTIONS = ("What it looks like", "Why it slows training", "How to fix", "Expected gain", "References")
REQUIRED_FIELDS = ("id", "title", "category", "summary")
#: the data a rule may need that a run does not always have: word -> what it is
NEEDS = {
    "gpu": "a trace of a run on a GPU (kernels, copies, CUDA runtime calls)",
    "nsys": "an Nsight Systems report of the run",
    "ncu": "Nsight Compute results for the run's kernels",
    "ranks": "traces of two or more ranks of one job",
    "shapes": "operator input shapes (record_shapes=True)",
    "memory": "allocation events (profile_memory=True, `advisor diagnose --memory`)",
    "stacks": "Python call stacks in the trace (with_stack=True)",
    "multi-socket": "a machine with two or more NUMA nodes, and the CPU and memory binding of each process",
    "worker-profile": "what DataLoader worker processes spend their time on (a profile of the workers)",
}
DETECTION_FIELDS = ("needs", "rule", "why")
_LINK = re.compile(r"https?://[^\s)>\]]+")
_FENCE = re.compile(r"^\s*```")


@dataclass(frozen=True)
class Detection:
    """An entry's ``detection`` marker: no rule detects it yet, and what a rule would need."""

    needs: tuple[str, ...]
    rule: str
    why: str

    @property
    def needs_text(self) -> str:
        """``a trace of a run on a GPU and traces of two or more ranks of one job``."""
        return " and ".join(NEEDS.get(n, n) for n in self.needs)


@dataclass
class Entry:
    """One knowledge entry: its front matter and its ``## `` sections (Markdown, in file order)."""

    id: str
    title: str
    summary: str
    category: str = ""
    tags: list[str] = field(default_factory=list)
    sections: dict[str, str] = field(default_factory=dict)
    path: Path | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    #: line of each section heading, and of the front matter's fields
    lines: dict[str, int] = field(default_factory=dict)

    def links(self, section: str) -> list[str]:
        return _LINK.findall(self.sections.get(section, ""))

    @property
    def detection(self) -> Detection | None:
        """The ``detection`` marker, read leniently (:func:`check_entry` says what is wrong with it)."""
        raw = self.meta.get("detection")
        if not isinstance(raw, dict):
            return None
        needs = raw.get("needs") or []
        needs = needs if isinstance(needs, list) else [needs]
        return Detection(tuple(str(n) for n in needs), " ".join(str(raw.get("rule") or "").split()),
                         " ".join(str(raw.get("why") or "").split()))


def parse_entry(text: str, path: Path | None = None) -> Entry:
    """An entry from the text of its file; a file without front matter is a :class:`RuleError`."""
    if not text.startswith("---\n"):
        raise RuleError(path, 1, "a knowledge entry starts with YAML front matter between `---` lines")
    end = text.find("\n---\n", 3)
    if end < 0:
        raise RuleError(path, 1, "the front matter has no closing `---` line")
    meta, line_map = parse_yaml_cached(text[4:end + 1], path)
    if not isinstance(meta, dict):
        raise RuleError(path, 2, "the front matter must be a mapping with id, title, category and summary")
    body_offset = text[:end + 5].count("\n")
    sections, heading_lines = _sections(text[end + 5:], body_offset)
    # "detection.needs" for the marker's fields; one line for the whole front matter offset
    lines = {".".join(str(p) for p in k): v + 1 for k, v in line_map.lines.items() if 1 <= len(k) <= 2}
    tags = meta.get("tags") or []
    return Entry(
        id=str(meta.get("id", "")), title=str(meta.get("title", "")),
        summary=" ".join(str(meta.get("summary", "")).split()), category=str(meta.get("category", "")),
        tags=[str(t) for t in tags] if isinstance(tags, list) else [str(tags)],
        sections=sections, path=path, meta=meta, lines={**lines, **heading_lines},
    )


def _sections(body: str, offset: int) -> tuple[dict[str, str], dict[str, int]]:
    """``## Heading`` -> the Markdown under it (headings inside fenced code do not count)."""
    sections: dict[str, str] = {}
    lines: dict[str, int] = {}
    current: str | None = None
    buffer: list[str] = []
    fenced = False
    for number, line in enumerate(body.splitlines(), start=offset + 1):
        if _FENCE.match(line):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            if current is not None:
                sections[current] = "\n".join(buffer).strip()
            current, buffer = line[3:].strip(), []
            lines[current] = number
        elif current is not None:
            buffer.append(line)
    if current is not None:
        sections[current] = "\n".join(buffer).strip()
    return sections, lines


def check_entry(entry: Entry) -> list[RuleError]:
    """Every way ``entry`` falls short of the entry format, each with its line."""
    path = entry.path
    problems = []
    for name in REQUIRED_FIELDS:
        if not str(entry.meta.get(name) or "").strip():
            problems.append(RuleError(path, 2, f"the front matter needs `{name}`"))
    if path is not None and entry.id and entry.id != path.stem:
        problems.append(RuleError(path, entry.lines.get("id", 2),
                                  f"`id: {entry.id}` must match the file name ({path.stem}.md)"))
    missing = [s for s in SECTIONS if not entry.sections.get(s)]
    for name in missing:
        problems.append(RuleError(path, None, f"section `## {name}` is missing or empty"))
    present = [s for s in entry.sections if s in SECTIONS]
    if not missing and present != list(SECTIONS):
        problems.append(RuleError(path, entry.lines.get(present[0]),
                                  f"sections must come in this order: {', '.join(SECTIONS)}"))
    fix = entry.sections.get("How to fix", "")
    if fix and "```" not in fix:
        problems.append(RuleError(path, entry.lines.get("How to fix"), "`## How to fix` needs a fenced code snippet"))
    gain = entry.sections.get("Expected gain", "")
    if gain and not (_LINK.search(gain) or "examples/" in gain):
        problems.append(RuleError(path, entry.lines.get("Expected gain"),
                                  "`## Expected gain` must say where its number comes from: link the source, "
                                  "or name the bundled examples/ script that measures it"))
    refs = entry.sections.get("References", "")
    if refs and not _LINK.search(refs):
        problems.append(RuleError(path, entry.lines.get("References"),
                                  "`## References` needs links to primary documentation"))
    if "detection" in entry.meta:
        problems += _detection_problems(entry)
    return problems


def _detection_problems(entry: Entry) -> list[RuleError]:
    """What is wrong with the ``detection`` marker: its shape, missing fields, words outside :data:`NEEDS`."""
    path, raw = entry.path, entry.meta["detection"]
    line = entry.lines.get("detection", 2)
    if not isinstance(raw, dict):
        return [RuleError(path, line, "`detection` must be a mapping with needs, rule and why")]
    problems = []
    for key in raw:
        if key not in DETECTION_FIELDS:
            problems.append(RuleError(path, entry.lines.get(f"detection.{key}", line),
                                      f"`detection.{key}` is not a field; the fields are {', '.join(DETECTION_FIELDS)}"))
    needs = raw.get("needs")
    if not isinstance(needs, list) or not needs:
        problems.append(RuleError(path, entry.lines.get("detection.needs", line),
                                  f"`detection.needs` must be a list of one or more of: {', '.join(NEEDS)}"))
    else:
        for word in needs:
            if word not in NEEDS:
                close = difflib.get_close_matches(str(word), list(NEEDS), n=1)
                hint = f"; did you mean `{close[0]}`?" if close else f" (known: {', '.join(NEEDS)})"
                problems.append(RuleError(path, entry.lines.get("detection.needs", line),
                                          f"`detection.needs`: unknown word `{word}`{hint}"))
    for key, meaning in (("rule", "the rule that will use the data (an id like GPU011, or a sentence)"),
                         ("why", "why the data at hand cannot show the problem")):
        value = raw.get(key)
        if not isinstance(value, str) or not value.strip():
            problems.append(RuleError(path, entry.lines.get(f"detection.{key}", line),
                                      f"`detection.{key}` must say {meaning}"))
    return problems


def entry_files(folder: Path | None = None) -> list[Path]:
    folder = folder or knowledge_dir()
    return sorted(p for p in folder.glob("*.md") if p.name.lower() != "readme.md")


def load_entries(folder: Path | None = None) -> dict[str, Entry]:
    """Every entry in ``folder`` (default: the built-in knowledge/), by id."""
    entries = {}
    for path in entry_files(folder):
        entry = parse_entry(path.read_text(encoding="utf-8"), path)
        entries[entry.id or path.stem] = entry
    return entries


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
    """Load entry ``entry_id``; an unknown id is an :class:`InputError` naming the file looked for."""
    path = find_entry(entry_id, extra_dirs)
    if path is None:
        raise InputError(knowledge_dir() / f"{entry_id}.md", "no such knowledge entry; check the rule's `knowledge` list")
    return parse_entry(path.read_text(encoding="utf-8"), path)
