"""Reading rule and workflow YAML safely, with the line of every value.

Rule files come from users, so they are read defensively:

- only plain YAML (mappings, sequences, scalars); a tag that would build a
  Python object (``!!python/object``) is refused;
- anchors and aliases are refused outright, which rules out "billion laughs"
  documents that expand to exponentially many nodes;
- the file size, nesting depth and node count are capped.

:func:`load_yaml` returns the data plus a :class:`LineMap` from each value's
path (``("tests", 0, "facts")``) to its line, so schema errors can say
``rules/my/slow_io.yaml:7: ...``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from advisor.errors import RuleError

# libyaml's parser when PyYAML was built with it (the wheels are): ten times faster, same events and marks
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

__all__ = ["LineMap", "load_yaml", "parse_yaml"]

MAX_BYTES = 256 * 1024
MAX_NODES = 20_000
MAX_DEPTH = 40


@dataclass
class LineMap:
    """Path of a value -> 1-based line where it starts."""

    lines: dict[tuple[Any, ...], int] = field(default_factory=dict)

    def line(self, path: tuple[Any, ...]) -> int | None:
        """The line of ``path``, or of its nearest ancestor that has one."""
        for cut in range(len(path), -1, -1):
            found = self.lines.get(tuple(path[:cut]))
            if found is not None:
                return found
        return None


def load_yaml(path: Path) -> tuple[Any, LineMap]:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise RuleError(path, None, "no such file") from None
    if size > MAX_BYTES:
        raise RuleError(path, None, f"file is {size:,} bytes; rule files are limited to {MAX_BYTES:,}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RuleError(path, None, "is not UTF-8 text") from None
    return parse_yaml(text, path)


def parse_yaml(text: str, path: Path | None = None) -> tuple[Any, LineMap]:
    _refuse_aliases(text, path)
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise RuleError(path, _mark_line(exc), f"is not valid YAML: {_problem(exc)}") from None
    if node is None:
        return None, LineMap()
    lines = LineMap()
    _walk(node, (), lines, [0], path)
    try:
        data = _Loader(text).get_single_data()
    except yaml.constructor.ConstructorError as exc:
        raise RuleError(path, _mark_line(exc), f"uses a YAML tag that is not allowed: {_problem(exc)}") from None
    except yaml.YAMLError as exc:
        raise RuleError(path, _mark_line(exc), f"is not valid YAML: {_problem(exc)}") from None
    return data, lines


def _refuse_aliases(text: str, path: Path | None) -> None:
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                line = event.start_mark.line + 1 if event.start_mark else None
                raise RuleError(path, line, "YAML anchors and aliases (&name / *name) are not allowed in rule files")
            tag = getattr(event, "tag", None)
            if tag and tag.startswith("tag:yaml.org,2002:python/"):
                line = event.start_mark.line + 1 if event.start_mark else None
                raise RuleError(path, line, f"YAML tag {tag!r} would build a Python object; it is not allowed")
            if tag and tag.startswith("!") and not tag.startswith("!!"):
                line = event.start_mark.line + 1 if event.start_mark else None
                raise RuleError(path, line, f"custom YAML tag {tag!r} is not allowed")
    except yaml.YAMLError as exc:
        raise RuleError(path, _mark_line(exc), f"is not valid YAML: {_problem(exc)}") from None


def _walk(node: yaml.Node, here: tuple[Any, ...], lines: LineMap, count: list[int], path: Path | None) -> None:
    count[0] += 1
    if count[0] > MAX_NODES:
        raise RuleError(path, node.start_mark.line + 1, f"has more than {MAX_NODES:,} YAML nodes")
    if len(here) > MAX_DEPTH:
        raise RuleError(path, node.start_mark.line + 1, f"nests deeper than {MAX_DEPTH} levels")
    lines.lines.setdefault(here, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else str(key.start_mark)
            lines.lines[(*here, name)] = key.start_mark.line + 1
            _walk(value, (*here, name), lines, count, path)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*here, i), lines, count, path)


def _mark_line(exc: Exception) -> int | None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return mark.line + 1 if mark is not None else None


def _problem(exc: Exception) -> str:
    return str(getattr(exc, "problem", None) or exc).strip()
