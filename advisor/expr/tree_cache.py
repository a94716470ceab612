"""Parsed expressions kept between runs, so that a process does not parse and check the same rule texts again.

The built-in rules hold some 500 distinct expressions (conditions, impacts,
the holes of their texts); parsing them and evaluating their constant parts
took about 25 ms of every command that loads the rules. A tree that passed
those checks is stored, as nested tuples of plain values (one marshal file in
advisor's cache folder, see :mod:`advisor.yamlio.yaml_cache`), keyed by its
source text together with the source of the modules that parse and check it,
so a changed parser or check parses everything afresh. Only trees that
passed are stored: a broken expression is always parsed, and fails, again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from advisor.expr import tree as tree_module
from advisor.expr.tree import Node
from advisor.yamlio.yaml_cache import named_cache

__all__ = ["cached_tree", "parser_key"]

#: the modules whose code decides what a source parses to and whether it passes
_CHECKED_BY = ("syntax.py", "tree.py", "expression.py", "functions.py", "values.py", "tree_cache.py")
_NODES = {cls.__name__: cls for cls in vars(tree_module).values()
          if isinstance(cls, type) and issubclass(cls, Node) and cls is not Node}
_key: list[bytes] = []


def cached_tree(source: str, build: Callable[[], Node]) -> Node:
    """The checked tree of ``source``: from the cache, else ``build()`` (whose errors propagate), stored."""
    data, _ = named_cache("expressions", parser_key()).get_or_parse(source, lambda: (_encode(build()), {}))
    return _decode(data)


def parser_key() -> bytes:
    """A digest of the code that parses and checks expressions (what keys a checked result)."""
    if not _key:
        digest = hashlib.sha256()
        for name in _CHECKED_BY:
            digest.update((Path(__file__).with_name(name)).read_bytes())
        _key.append(digest.digest())
    return _key[0]


def _encode(value: Any) -> Any:
    """A tree as nested tuples: ``("N", class, field...)`` for a node, ``("T", ...)`` / ``("L", ...)`` for a
    tuple or a list; other values as they are (marshal refuses anything it cannot store: then no entry)."""
    if isinstance(value, Node):
        return ("N", type(value).__name__, *(_encode(getattr(value, f.name)) for f in fields(value)))
    if isinstance(value, tuple):
        return ("T", *(_encode(v) for v in value))
    if isinstance(value, list):
        return ("L", *(_encode(v) for v in value))
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, tuple):
        tag, *items = value
        if tag == "N":
            return _NODES[items[0]](*(_decode(v) for v in items[1:]))
        decoded = [_decode(v) for v in items]
        return tuple(decoded) if tag == "T" else decoded
    return value
