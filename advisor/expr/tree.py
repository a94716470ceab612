"""The syntax tree of the expression language: plain frozen dataclasses.

:mod:`advisor.expr.syntax` builds it, :mod:`advisor.expr.expression` evaluates
it, and :mod:`advisor.engine.shapes` checks it against the declared facts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Binary", "BoolOp", "Call", "Compare", "Const", "Field", "Generator", "IfElse", "Index", "ListLit", "Node",
    "Ref", "Unary", "children", "walk",
]


@dataclass(frozen=True)
class Node:
    pos: int


@dataclass(frozen=True)
class Const(Node):
    value: Any


@dataclass(frozen=True)
class Ref(Node):
    """A dotted name: a fact, a local variable, or a fact followed by record keys."""

    path: tuple[str, ...]


@dataclass(frozen=True)
class Field(Node):
    """``x.key`` where x is not a plain dotted name, e.g. ``kernels.top[0].share``."""

    target: Node
    key: str


@dataclass(frozen=True)
class Index(Node):
    target: Node
    index: Node


@dataclass(frozen=True)
class ListLit(Node):
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Unary(Node):
    op: str
    operand: Node


@dataclass(frozen=True)
class Binary(Node):
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Compare(Node):
    first: Node
    rest: tuple[tuple[str, Node], ...]


@dataclass(frozen=True)
class BoolOp(Node):
    op: str  # and / or
    values: tuple[Node, ...]


@dataclass(frozen=True)
class IfElse(Node):
    cond: Node
    then: Node
    other: Node


@dataclass(frozen=True)
class Generator(Node):
    """``element for var in source if cond``: inside a call or brackets."""

    element: Node
    var: str
    source: Node
    cond: Node | None


@dataclass(frozen=True)
class Call(Node):
    func: str
    args: tuple[Node, ...]


def children(node: Node) -> Iterable[Node]:
    """The direct sub-expressions of ``node``, in source order."""
    if isinstance(node, Field):
        yield node.target
    elif isinstance(node, Index):
        yield node.target
        yield node.index
    elif isinstance(node, ListLit):
        yield from node.items
    elif isinstance(node, Unary):
        yield node.operand
    elif isinstance(node, Binary):
        yield node.left
        yield node.right
    elif isinstance(node, Compare):
        yield node.first
        for _, right in node.rest:
            yield right
    elif isinstance(node, BoolOp):
        yield from node.values
    elif isinstance(node, IfElse):
        yield node.then
        yield node.cond
        yield node.other
    elif isinstance(node, Call):
        yield from node.args
    elif isinstance(node, Generator):
        yield node.element
        yield node.source
        if node.cond is not None:
            yield node.cond


def walk(node: Node) -> Iterable[Node]:
    """``node`` and every node below it."""
    yield node
    for child in children(node):
        yield from walk(child)
