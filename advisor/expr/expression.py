"""The expression language of rule conditions, impact estimates and texts.

It reads like a small, safe subset of Python::

    gpu.idle_fraction > 0.3 and steps.count >= 3
    dataloader.wait_ms_per_step * 0.9
    any(k.share > 0.5 for k in kernels.top)
    count(s for s in syncs.sites if matches(s.name, "item|_local_scalar_dense")) > 0

Safety is by construction, not by sandboxing Python: the source is tokenized
and parsed (:mod:`advisor.expr.syntax`) into a tiny tree
(:mod:`advisor.expr.tree`), and that tree is walked here by an evaluator
that knows only numbers, strings, booleans, null, lists and records (dicts).
Nothing is ever handed to Python's ``eval``. There is no attribute access on
Python objects: ``a.b`` is a fact name or a record key, nothing else. Names
starting with ``__`` do not even tokenize. Work is bounded: the source
length, nesting depth and node count are capped at parse time; constant
parts are evaluated once at compile time, so ``2 ** 100000`` or
``'a' * 10 ** 9`` fail at lint time; evaluation counts its steps; numbers
stay finite and below 1e300; strings and lists cannot be multiplied; regular
expressions run with a timeout.

A fact that the run does not have raises :class:`Absent`; the rule engine
treats that as "not applicable", never as a crash.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from advisor.expr.functions import FUNCTIONS, compile_pattern
from advisor.expr.syntax import parse
from advisor.expr.tree_cache import cached_tree
from advisor.expr.tree import (
    Binary, BoolOp, Call, Compare, Const, Field, Generator, IfElse, Index, ListLit, Node, Ref, Unary, children,
)
from advisor.expr.values import (
    MAX_EXPONENT, MAX_LIST, MAX_STEPS, MAX_STRING, Absent, check_number, is_number, truthy, type_name,
)
from advisor.errors import ExpressionError

__all__ = ["FUNCTIONS", "Absent", "Environment", "Expression", "compile_expression"]


class Environment:
    """The names an expression can read: facts by dotted name.

    ``values`` maps full dotted names (``"gpu.idle_fraction"``, ``"kernels.top"``)
    to plain data. A reference ``a.b.c.d`` resolves to the longest prefix that
    is a known name; the rest of the path indexes into records.
    """

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = values

    def resolve(self, path: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
        for cut in range(len(path), 0, -1):
            name = ".".join(path[:cut])
            if name in self.values:
                return self.values[name], path[cut:]
        raise Absent(".".join(path))


@dataclass
class State:
    """One evaluation: the environment, the loop variables in scope, and the work done so far."""

    env: Environment
    locals: dict[str, Any] = field(default_factory=dict)
    steps: int = 0


_BINARY = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b if b else None,
    "//": lambda a, b: a // b if b else None,
    "%": lambda a, b: a % b if b else None,
}
_ORDER = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


class Expression:
    """A parsed expression, ready to evaluate many times."""

    def __init__(self, source: str, tree: Node | None = None) -> None:
        """Parse and check ``source``; or take ``tree``, its tree already checked (from the cache)."""
        self.source = source
        if tree is None:
            self.tree = parse(source)
            self._check_constants(self.tree)
        else:
            self.tree = tree

    def __repr__(self) -> str:
        return f"Expression({self.source!r})"

    # static analysis ------------------------------------------------------
    def references(self) -> set[str]:
        """The dotted names this expression reads from the environment (loop variables excluded)."""
        found: set[str] = set()
        _collect_refs(self.tree, frozenset(), found)
        return found

    def patterns(self) -> list[tuple[str, int]]:
        """Regex literals passed to ``matches()``, with their column, so lint can compile them early."""
        return [(p.value, p.pos) for p in _pattern_literals(self.tree)]

    def _check_constants(self, node: Node) -> bool:
        """Evaluate every constant part once, so impossible work fails now, not on a user's run.

        Returns whether ``node`` is constant (reads no name).
        """
        flags = [self._check_constants(child) for child in children(node)]
        constant = not isinstance(node, (Ref, Generator)) and all(flags)
        if isinstance(node, Binary) and node.op == "**" and flags[1]:
            exponent = self._constant_value(node.right)
            if is_number(exponent) and abs(exponent) > MAX_EXPONENT:
                raise ExpressionError(f"exponent larger than {MAX_EXPONENT}", self.source, node.pos)
        if not constant:
            for child, flag in zip(children(node), flags):
                if flag and not isinstance(child, Const):
                    self._constant_value(child)
        elif node is self.tree:
            self._constant_value(node)
        return constant

    def _constant_value(self, node: Node) -> Any:
        try:
            return self.eval_node(node, State(Environment({})))
        except Absent:
            return None

    # evaluation -----------------------------------------------------------
    def evaluate(self, env: Environment | Mapping[str, Any]) -> Any:
        if not isinstance(env, Environment):
            env = Environment(env)
        return self.eval_node(self.tree, State(env))

    def eval_node(self, node: Node, st: State) -> Any:  # noqa: C901 - one flat dispatch
        st.steps += 1
        if st.steps > MAX_STEPS:
            raise ExpressionError(f"expression does too much work (more than {MAX_STEPS:,} steps)",
                                  self.source, node.pos)
        if isinstance(node, Const):
            return node.value
        if isinstance(node, Ref):
            return self._ref(node, st)
        if isinstance(node, Field):
            return self._key(self.eval_node(node.target, st), node.key, node.pos)
        if isinstance(node, Index):
            return self._index(self.eval_node(node.target, st), self.eval_node(node.index, st), node.pos)
        if isinstance(node, ListLit):
            return [self.eval_node(item, st) for item in node.items]
        if isinstance(node, Unary):
            return self._unary(node, st)
        if isinstance(node, Binary):
            return self._binary(node.op, self.eval_node(node.left, st), self.eval_node(node.right, st), node.pos)
        if isinstance(node, Compare):
            return self._compare(node, st)
        if isinstance(node, BoolOp):
            if node.op == "and":
                return all(truthy(self.eval_node(v, st)) for v in node.values)
            return any(truthy(self.eval_node(v, st)) for v in node.values)
        if isinstance(node, IfElse):
            return self.eval_node(node.then if truthy(self.eval_node(node.cond, st)) else node.other, st)
        if isinstance(node, Call):
            return FUNCTIONS[node.func].call(self, node, st)
        if isinstance(node, Generator):
            return list(self._iterate(node, st))
        raise ExpressionError(f"cannot evaluate {type(node).__name__}", self.source, node.pos)

    def _ref(self, node: Ref, st: State) -> Any:
        head = node.path[0]
        if head in st.locals:
            value, rest = st.locals[head], node.path[1:]
        else:
            value, rest = st.env.resolve(node.path)
        for key in rest:
            value = self._key(value, key, node.pos)
        return value

    def _key(self, value: Any, key: str, pos: int) -> Any:
        if isinstance(value, Mapping):
            if key not in value:
                raise Absent(key)
            return value[key]
        raise ExpressionError(f"`.{key}`: only records have fields, not {type_name(value)}", self.source, pos)

    def _index(self, value: Any, index: Any, pos: int) -> Any:
        if isinstance(value, list) and is_number(index) and float(index).is_integer():
            i = int(index)
            if -len(value) <= i < len(value):
                return value[i]
            raise Absent(f"[{i}]")
        if isinstance(value, Mapping) and isinstance(index, str):
            return self._key(value, index, pos)
        raise ExpressionError(f"cannot index {type_name(value)} with {type_name(index)}", self.source, pos)

    def _unary(self, node: Unary, st: State) -> Any:
        value = self.eval_node(node.operand, st)
        if node.op == "not":
            return not truthy(value)
        if value is None:
            return None
        if not is_number(value):
            raise ExpressionError(f"`{node.op}` needs a number, got {type_name(value)}", self.source, node.pos)
        return -value if node.op == "-" else value

    def _binary(self, op: str, left: Any, right: Any, pos: int) -> Any:
        if op == "+" and isinstance(left, str) and isinstance(right, str):
            if len(left) + len(right) > MAX_STRING:
                raise ExpressionError("string result is too long", self.source, pos)
            return left + right
        if op == "+" and isinstance(left, list) and isinstance(right, list):
            if len(left) + len(right) > MAX_LIST:
                raise ExpressionError("list result is too long", self.source, pos)
            return left + right
        if left is None or right is None:
            return None
        if not (is_number(left) and is_number(right)):
            raise ExpressionError(
                f"`{op}` needs numbers, got {type_name(left)} and {type_name(right)}", self.source, pos
            )
        try:
            if op == "**":
                if abs(right) > MAX_EXPONENT:
                    raise ExpressionError(f"exponent larger than {MAX_EXPONENT}", self.source, pos)
                result = float(left) ** float(right)
                if isinstance(result, complex):
                    raise ExpressionError("power gives a complex number", self.source, pos)
            else:
                result = _BINARY[op](left, right)
        except OverflowError:
            raise ExpressionError("arithmetic result is out of range", self.source, pos) from None
        return None if result is None else check_number(result, self.source, pos)

    def _compare(self, node: Compare, st: State) -> bool:
        left = self.eval_node(node.first, st)
        for op, right_node in node.rest:
            right = self.eval_node(right_node, st)
            if not self._compare_one(op, left, right, node.pos):
                return False
            left = right
        return True

    def _compare_one(self, op: str, left: Any, right: Any, pos: int) -> bool:
        if op in ("in", "not in"):
            if isinstance(right, str):
                if not isinstance(left, str):
                    raise ExpressionError(f"`{op}` a string needs a string, got {type_name(left)}", self.source, pos)
                found = left in right
            elif isinstance(right, (list, Mapping)):
                found = left in right
            elif right is None:
                found = False
            else:
                raise ExpressionError(f"`{op}` needs a list, string or record, got {type_name(right)}",
                                      self.source, pos)
            return found if op == "in" else not found
        if op == "==":
            return left == right
        if op == "!=":
            return left != right
        # Ordering with a missing value is false, as in SQL: a rule never fires on null.
        if left is None or right is None:
            return False
        if not ((is_number(left) and is_number(right)) or (isinstance(left, str) and isinstance(right, str))):
            raise ExpressionError(f"cannot compare {type_name(left)} with {type_name(right)}", self.source, pos)
        return _ORDER[op](left, right)

    def _iterate(self, node: Generator, st: State) -> Iterable[Any]:
        source = self.eval_node(node.source, st)
        if source is None:
            return
        if not isinstance(source, list):
            raise ExpressionError(f"`for ... in` needs a list, got {type_name(source)}", self.source, node.pos)
        saved = st.locals.get(node.var, _MISSING)
        try:
            for item in source:
                st.locals[node.var] = item
                if node.cond is None or truthy(self.eval_node(node.cond, st)):
                    yield self.eval_node(node.element, st)
        finally:
            if saved is _MISSING:
                st.locals.pop(node.var, None)
            else:
                st.locals[node.var] = saved

    def values_of(self, node: Node, st: State) -> list[Any]:
        """Arguments of the list functions: a generator, or one list-valued expression."""
        if isinstance(node, Generator):
            return list(self._iterate(node, st))
        value = self.eval_node(node, st)
        if value is None:
            return []
        if not isinstance(value, list):
            raise ExpressionError(f"expected a list, got {type_name(value)}", self.source, node.pos)
        return value


_MISSING = object()


def _collect_refs(node: Node, bound: frozenset[str], out: set[str]) -> None:
    if isinstance(node, Ref):
        if node.path[0] not in bound:
            out.add(".".join(node.path))
        return
    if isinstance(node, Generator):
        _collect_refs(node.source, bound, out)
        inner = bound | {node.var}
        _collect_refs(node.element, inner, out)
        if node.cond is not None:
            _collect_refs(node.cond, inner, out)
        return
    for child in children(node):
        _collect_refs(child, bound, out)


def _pattern_literals(node: Node) -> Iterable[Const]:
    if isinstance(node, Call) and node.func == "matches" and len(node.args) == 2:
        pattern = node.args[1]
        if isinstance(pattern, Const) and isinstance(pattern.value, str):
            yield pattern
    for child in children(node):
        yield from _pattern_literals(child)


#: source -> its compiled expression: a rule's expressions are checked when it is validated and compiled
#: again when it is evaluated, and rule files repeat texts; an Expression is never changed after it is built.
_COMPILED: dict[str, Expression] = {}
_COMPILED_MAX = 4096


def compile_expression(source: str) -> Expression:
    """Parse ``source``; raise :class:`ExpressionError` with the column on failure.

    Regex literals in ``matches()`` are compiled too, so a broken pattern is a
    lint error rather than a failure on a user's run. Each distinct source is
    parsed once per process, and once per machine while it passes (:mod:`advisor.expr.tree_cache`).
    """
    if not isinstance(source, str):
        return Expression(source)  # raises: an expression must be text
    if (cached := _COMPILED.get(source)) is not None:
        return cached
    built: list[Expression] = []

    def check() -> Node:
        built.append(Expression(source))
        return built[0].tree

    tree = cached_tree(source, check)  # parsed and checked in an earlier process, or by check() now
    expr = built[0] if built else Expression(source, tree)
    for pattern, pos in expr.patterns():
        compile_pattern(pattern, source, pos)
    if len(_COMPILED) < _COMPILED_MAX:
        _COMPILED[source] = expr
    return expr
