"""Reading rule and workflow YAML safely, with the line of every value.

Rule files come from users, so they are read defensively:

- only plain YAML (mappings, sequences, scalars); a tag that would build a
  Python object (``!!python/object``) is refused before anything is built;
- anchors and aliases are refused outright, which rules out "billion laughs"
  documents that expand to exponentially many nodes;
- only the core tags (str, int, float, bool, null, seq, map) may be written;
- the file size, nesting depth and node count are capped, before anything
  recursive runs;
- a key given twice in one mapping is an error (YAML would silently keep the
  last one).

:func:`load_yaml` returns the data plus a :class:`LineMap` from each value's
path (``("tests", 0, "facts")``) to its line, so schema errors can say
``rules/my/slow_io.yaml:7: ...``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor.errors import RuleError
from advisor.yamlio.yaml_cache import shared_cache

if TYPE_CHECKING:
    import yaml

__all__ = ["LineMap", "load_yaml", "parse_yaml", "parse_yaml_cached", "read_yaml_text"]

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
    """The data and line map of a rule or workflow file; a file parsed before comes from the cache."""
    return parse_yaml_cached(read_yaml_text(path), path)


def read_yaml_text(path: Path) -> str:
    """The text of a rule or workflow file; a missing, oversized or non-UTF-8 file is a RuleError."""
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
    return text


def parse_yaml_cached(text: str, path: Path | None = None) -> tuple[Any, LineMap]:
    """:func:`parse_yaml`, through the cache of texts parsed cleanly before."""
    data, lines = shared_cache().get_or_parse(text, lambda: _parse_with_lines(text, path))
    return data, LineMap(lines)


def _parse_with_lines(text: str, path: Path) -> tuple[Any, dict[tuple[Any, ...], int]]:
    data, lines = parse_yaml(text, path)
    return data, lines.lines


def parse_yaml(text: str, path: Path | None = None) -> tuple[Any, LineMap]:
    """The data of one YAML document, and the line of each value; every problem is a :class:`RuleError`."""
    import yaml  # here, not at the top: a run whose rule files all come from the cache never imports PyYAML

    if len(text) > MAX_BYTES:
        raise RuleError(path, None, f"text is {len(text):,} characters; rule files are limited to {MAX_BYTES:,}")
    _check_events(text, path)
    try:
        node = yaml.compose(text, Loader=_loader())
    except yaml.YAMLError as exc:
        raise RuleError(path, _mark_line(exc), f"is not valid YAML: {_problem(exc)}") from None
    if node is None:
        return None, LineMap()
    lines = LineMap()
    _walk(node, (), lines, [0], path)
    try:
        data = _loader()("").construct_document(node)  # the very node checked above
    except yaml.constructor.ConstructorError as exc:
        raise RuleError(path, _mark_line(exc), f"uses a YAML tag that is not allowed: {_problem(exc)}") from None
    except yaml.YAMLError as exc:
        raise RuleError(path, _mark_line(exc), f"is not valid YAML: {_problem(exc)}") from None
    return data, lines


def _loader() -> type:
    """libyaml's parser when PyYAML was built with it (the wheels are): ten times faster, same events and marks."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


#: the only explicit tags a rule file may use (the YAML core schema)
ALLOWED_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map")}


def _check_events(text: str, path: Path | None) -> None:
    """Refuse what must never reach the composer: aliases, foreign tags, too deep or too many nodes.

    PyYAML's event parser is a state machine, not a recursion, so this pass is
    safe on any input; the composer that runs afterwards recurses per level.
    """
    import yaml

    depth = nodes = 0
    try:
        for event in yaml.parse(text, Loader=_loader()):
            line = event.start_mark.line + 1 if event.start_mark else None
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise RuleError(path, line, "YAML anchors and aliases (&name / *name) are not allowed in rule files")
            tag = getattr(event, "tag", None)
            if tag and tag != "!" and tag not in ALLOWED_TAGS:
                what = "would build a Python object" if "python/" in tag else "is not allowed"
                raise RuleError(path, line, f"YAML tag {tag!r} {what}; rule files use plain YAML only")
            if isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
                nodes += 1
                if nodes > MAX_NODES:
                    raise RuleError(path, line, f"has more than {MAX_NODES:,} YAML nodes")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise RuleError(path, line, f"nests deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as exc:
        if "nesting depth" in _problem(exc):  # libyaml's own cap, met before ours on very deep input
            raise RuleError(path, _mark_line(exc), f"nests deeper than {MAX_DEPTH} levels") from None
        raise RuleError(path, _mark_line(exc), f"is not valid YAML: {_problem(exc)}") from None


def _walk(node: yaml.Node, here: tuple[Any, ...], lines: LineMap, count: list[int], path: Path | None) -> None:
    import yaml

    count[0] += 1
    if count[0] > MAX_NODES:
        raise RuleError(path, node.start_mark.line + 1, f"has more than {MAX_NODES:,} YAML nodes")
    if len(here) > MAX_DEPTH:
        raise RuleError(path, node.start_mark.line + 1, f"nests deeper than {MAX_DEPTH} levels")
    lines.lines.setdefault(here, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            line = key.start_mark.line + 1
            if not isinstance(key, yaml.ScalarNode):
                raise RuleError(path, line, "a mapping key must be a plain name, not a list or mapping")
            name = key.value
            if name in seen:
                raise RuleError(path, line, f"`{'.'.join(map(str, (*here, name)))}` is given twice "
                                            f"(lines {seen[name]} and {line}); keep one")
            seen[name] = line
            lines.lines[(*here, name)] = line
            _walk(value, (*here, name), lines, count, path)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*here, i), lines, count, path)


def _mark_line(exc: Exception) -> int | None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return mark.line + 1 if mark is not None else None


def _problem(exc: Exception) -> str:
    return str(getattr(exc, "problem", None) or exc).strip()
