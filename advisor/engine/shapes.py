"""Checking expressions against the facts that analyzers declare, before any run.

The evaluator only learns at run time that a name is missing, and then the
rule is quietly *not applicable*: a typo would make a rule that never fires.
This module walks an expression's tree with the fact declarations
(:class:`~advisor.analyze.findings.FactSpec`, from the analyzer registry)
and reports, with a suggestion of the closest known name:

- a name that no analyzer provides (``phases.dataloadr.share``);
- a column that a table's rows do not have (``k.shares`` for ``k`` in ``ops.top``);
- a field read from a table or a scalar (``ops.top.share``, ``trace.device.name``);
- an ``evidence`` expression that is not a list of records.

It also extracts every *threshold*: a comparison of a fact (or a table
column) with a number, such as ``phases.dataloader.share >= 0.15``, so lint
can check that the rule's test cases sit just either side of it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field

from advisor.analyze.findings import UNITS, FactSpec
from advisor.expr.tree import Call, Compare, Const, Field, Generator, Index, Node, Ref, Unary, children
from advisor.expr.values import is_number

__all__ = ["Catalog", "Kind", "Problem", "Threshold", "check_expression"]


@dataclass(frozen=True)
class Problem:
    message: str
    pos: int


@dataclass(frozen=True)
class Kind:
    """What an expression node holds, as far as the declarations tell."""

    what: str  # scalar | table | row | column | list (of columns or values) | unknown
    spec: FactSpec | None = None
    column: str | None = None

    @property
    def subject(self) -> str:
        if self.spec is None:
            return "?"
        return f"{self.spec.name}[].{self.column}" if self.column else self.spec.name

    @property
    def unit(self) -> str:
        if self.spec is None:
            return ""
        if self.column is None:
            return self.spec.unit
        unit = self.spec.columns.get(self.column, "").split(":", 1)[0].strip()
        return unit if unit in UNITS else ""


UNKNOWN = Kind("unknown")


@dataclass(frozen=True)
class Threshold:
    """``subject op value``: a fact or column compared with a number."""

    kind: Kind
    op: str
    value: float
    pos: int

    @property
    def text(self) -> str:
        return f"{self.kind.subject} {self.op} {self.value:g}"


_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


@dataclass
class Catalog:
    """The declared facts, by name, with lookups that suggest near misses."""

    specs: Mapping[str, FactSpec]

    def resolve(self, path: tuple[str, ...]) -> tuple[FactSpec, tuple[str, ...]] | None:
        """The fact that is the longest prefix of ``path``, and the rest of the path."""
        for cut in range(len(path), 0, -1):
            spec = self.specs.get(".".join(path[:cut]))
            if spec is not None:
                return spec, path[cut:]
        return None

    def suggest(self, name: str) -> str:
        close = difflib.get_close_matches(name, list(self.specs), n=1, cutoff=0.6)
        if not close:
            head = name.split(".")[0]
            family = sorted(n for n in self.specs if n.split(".")[0] == head)[:6]
            return f"; facts under `{head}.`: {', '.join(family)}" if family else "; `advisor facts` lists them all"
        return f"; did you mean `{close[0]}`?"


@dataclass
class _Walk:
    catalog: Catalog
    problems: list[Problem] = field(default_factory=list)
    thresholds: list[Threshold] = field(default_factory=list)

    def kind(self, node: Node, scope: dict[str, Kind]) -> Kind:  # noqa: C901 - one flat dispatch
        if isinstance(node, Ref):
            return self._ref(node, scope)
        if isinstance(node, Field):
            return self._field(self.kind(node.target, scope), node.key, node.pos)
        if isinstance(node, Index):
            target = self.kind(node.target, scope)
            self.kind(node.index, scope)
            if target.what == "table":
                return Kind("row", target.spec)
            if target.what == "row" and isinstance(node.index, Const) and isinstance(node.index.value, str):
                return self._field(target, node.index.value, node.pos)
            return UNKNOWN
        if isinstance(node, Generator):
            source = self.kind(node.source, scope)  # the source is read in the enclosing scope
            inner = {**scope, node.var: Kind("row", source.spec) if source.what == "table" else UNKNOWN}
            if node.cond is not None:
                self.kind(node.cond, inner)
            element = self.kind(node.element, inner)
            return Kind("table", element.spec) if element.what == "row" else Kind("list", element.spec, element.column)
        if isinstance(node, Compare):
            self._compare(node, scope)
            return UNKNOWN
        if isinstance(node, Call):
            kinds = [self.kind(arg, scope) for arg in node.args]
            return self._call(node, kinds)
        for child in children(node):
            self.kind(child, scope)
        return UNKNOWN

    def _ref(self, node: Ref, scope: dict[str, Kind]) -> Kind:
        head, *rest = node.path
        if head in scope:
            kind = scope[head]
        else:
            found = self.catalog.resolve(node.path)
            name = ".".join(node.path)
            if found is None:
                self.problems.append(Problem(f"unknown fact `{name}`{self.catalog.suggest(name)}", node.pos))
                return UNKNOWN
            spec, rest_t = found
            rest = list(rest_t)
            kind = Kind("table" if spec.is_table else "scalar", spec)
            if rest and kind.what == "scalar":
                self.problems.append(Problem(
                    f"unknown fact `{name}`{self.catalog.suggest(name)} (`{spec.name}` is a single value, "
                    f"it has no field `{rest[0]}`)", node.pos))
                return UNKNOWN
        for key in rest:
            kind = self._field(kind, key, node.pos)
        return kind

    def _field(self, kind: Kind, key: str, pos: int) -> Kind:
        if kind.what == "row" and kind.spec is not None:
            if key in kind.spec.columns:
                return Kind("column", kind.spec, key)
            close = difflib.get_close_matches(key, list(kind.spec.columns), n=1)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            self.problems.append(Problem(
                f"rows of `{kind.spec.name}` have no column `{key}`{hint} "
                f"(columns: {', '.join(kind.spec.columns)})", pos))
        elif kind.what == "table" and kind.spec is not None:
            self.problems.append(Problem(
                f"`{kind.spec.name}` is a table (a list of rows), so it has no field `{key}`; take one row "
                f"(`{kind.spec.name}[0].{key}`) or loop (`any(r.{key} ... for r in {kind.spec.name})`)", pos))
        elif kind.what in ("scalar", "column") and kind.spec is not None:
            self.problems.append(Problem(f"`{kind.subject}` is a single value ({kind.unit}); it has no field `{key}`",
                                         pos))
        return UNKNOWN

    def _call(self, node: Call, kinds: list[Kind]) -> Kind:
        if node.func == "first" and kinds and kinds[0].what == "table":
            return Kind("row", kinds[0].spec)
        if node.func in ("max", "min", "first") and len(kinds) == 1 and kinds[0].what == "list" and kinds[0].column:
            return Kind("column", kinds[0].spec, kinds[0].column)
        if node.func == "coalesce" and kinds and kinds[0].what in ("scalar", "column"):
            return kinds[0]
        return UNKNOWN

    def _compare(self, node: Compare, scope: dict[str, Kind]) -> None:
        left_node, left = node.first, self.kind(node.first, scope)
        for op, right_node in node.rest:
            right = self.kind(right_node, scope)
            if op in _FLIP:  # only orderings are thresholds; `in` and `not in` are not
                self._threshold(left, op, right_node, node.pos)
                self._threshold(right, _FLIP[op], left_node, node.pos)
            left_node, left = right_node, right

    def _threshold(self, subject: Kind, op: str, other: Node, pos: int) -> None:
        if subject.what not in ("scalar", "column") or op in ("==", "!=", "in", "not in"):
            return
        value = _number(other)
        if value is not None:
            self.thresholds.append(Threshold(subject, op, value, pos))


def _number(node: Node) -> float | None:
    if isinstance(node, Const) and is_number(node.value):
        return float(node.value)
    if isinstance(node, Unary) and node.op in ("-", "+"):
        inner = _number(node.operand)
        return None if inner is None else (-inner if node.op == "-" else inner)
    return None


def check_expression(tree: Node, catalog: Catalog, *, evidence: bool = False
                     ) -> tuple[list[Problem], list[Threshold]]:
    """The problems of one expression tree against the declared facts, and its thresholds."""
    walk = _Walk(catalog)
    kind = walk.kind(tree, {})
    if evidence and kind.what in ("scalar", "column"):
        walk.problems.append(Problem(
            f"evidence must be a list of records (a table fact, or a filter of one), not the single value "
            f"`{kind.subject}`", tree.pos))
    return walk.problems, walk.thresholds
