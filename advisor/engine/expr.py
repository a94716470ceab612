"""The expression language of rule conditions, impact estimates and workflow guards.

It reads like a small, safe subset of Python::

    gpu.idle_fraction > 0.3 and steps.count >= 3
    dataloader.wait_ms_per_step * 0.9
    any(k.share > 0.5 for k in kernels.top)
    count(s for s in syncs.sites if matches(s.name, "item|_local_scalar_dense")) > 0
    "DL001" in diagnoses.ids

Safety is by construction, not by sandboxing Python: the source is tokenized
and parsed here into a tiny tree, and that tree is walked by an evaluator that
knows only numbers, strings, booleans, null, lists and records (dicts). There
is no attribute access on Python objects: ``a.b`` is a fact name or a record
key, nothing else. Work is bounded: the source length, nesting depth and node
count are capped at parse time; evaluation counts its steps; numbers must stay
finite and below 1e300; strings and lists cannot be multiplied; regular
expressions run with a timeout.

A fact that the run does not have raises :class:`Absent`; the rule engine
treats that as "not applicable", never as a crash.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import regex

from advisor.engine.syntax import (
    ARITY,
    MAX_MAGNITUDE,
    MAX_SOURCE,
    BoolOp,
    Call,
    Compare,
    Const,
    Field,
    Generator,
    IfElse,
    Index,
    ListLit,
    Node,
    Ref,
    Unary,
    Binary,
    children,
    parse,
)
from advisor.errors import ExpressionError
from advisor.units import fmt_bytes, fmt_ms, fmt_num, fmt_pct

__all__ = ["Absent", "Environment", "Expression", "compile_expression", "FUNCTIONS"]

MAX_STEPS = 2_000_000
MAX_STRING = 10_000
MAX_LIST = 100_000
MAX_EXPONENT = 64
MAX_PATTERN = 200
REGEX_TIMEOUT_S = 0.05


class Absent(Exception):
    """A name the expression reads is not present in this run."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"`{name}` is not available in this run")


# --------------------------------------------------------------------------- evaluation


class Environment:
    """The names an expression can read: facts by dotted name, plus local variables.

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
class _State:
    env: Environment
    locals: dict[str, Any] = field(default_factory=dict)
    steps: int = 0


def _check_number(value: Any, source: str, pos: int) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > 2**63:
            value = float(value)
    if isinstance(value, float) and (math.isnan(value) or abs(value) > MAX_MAGNITUDE):
        raise ExpressionError("arithmetic result is out of range", source, pos)
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Expression:
    """A parsed expression, ready to evaluate many times."""

    def __init__(self, source: str) -> None:
        if not isinstance(source, str):
            raise ExpressionError(f"expression must be text, got {type(source).__name__}", str(source))
        if len(source) > MAX_SOURCE:
            raise ExpressionError(f"expression is longer than {MAX_SOURCE} characters", source[:80] + "...")
        self.source = source
        self.tree = parse(source)

    def __repr__(self) -> str:
        return f"Expression({self.source!r})"

    # static analysis ------------------------------------------------------
    def references(self) -> set[str]:
        """The dotted names this expression reads from the environment (locals excluded)."""
        found: set[str] = set()
        _collect_refs(self.tree, frozenset(), found)
        return found

    def patterns(self) -> list[str]:
        """Regex literals passed to ``matches()``, so lint can compile them early."""
        out: list[str] = []
        _collect_patterns(self.tree, out)
        return out

    # evaluation -----------------------------------------------------------
    def evaluate(self, env: Environment | Mapping[str, Any]) -> Any:
        if not isinstance(env, Environment):
            env = Environment(env)
        return self._eval(self.tree, _State(env))

    def _eval(self, node: Node, st: _State) -> Any:  # noqa: C901 - one dispatch, kept flat
        st.steps += 1
        if st.steps > MAX_STEPS:
            raise ExpressionError("expression does too much work", self.source, node.pos)
        if isinstance(node, Const):
            return node.value
        if isinstance(node, Ref):
            return self._ref(node, st)
        if isinstance(node, Field):
            return self._key(self._eval(node.target, st), node.key, node.pos)
        if isinstance(node, Index):
            return self._index(self._eval(node.target, st), self._eval(node.index, st), node.pos)
        if isinstance(node, ListLit):
            return [self._eval(item, st) for item in node.items]
        if isinstance(node, Unary):
            return self._unary(node, st)
        if isinstance(node, Binary):
            return self._binary(node.op, self._eval(node.left, st), self._eval(node.right, st), node.pos)
        if isinstance(node, Compare):
            return self._compare(node, st)
        if isinstance(node, BoolOp):
            return self._boolop(node, st)
        if isinstance(node, IfElse):
            return self._eval(node.then if _truthy(self._eval(node.cond, st)) else node.other, st)
        if isinstance(node, Call):
            return FUNCTIONS[node.func].call(self, node, st)
        if isinstance(node, Generator):
            return list(self._iterate(node, st))
        raise ExpressionError(f"cannot evaluate {type(node).__name__}", self.source, node.pos)

    def _ref(self, node: Ref, st: _State) -> Any:
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
        raise ExpressionError(f"`.{key}`: only records have fields, not {_type(value)}", self.source, pos)

    def _index(self, value: Any, index: Any, pos: int) -> Any:
        if isinstance(value, list) and _is_number(index) and float(index).is_integer():
            i = int(index)
            if -len(value) <= i < len(value):
                return value[i]
            raise Absent(f"[{i}]")
        if isinstance(value, Mapping) and isinstance(index, str):
            return self._key(value, index, pos)
        raise ExpressionError(f"cannot index {_type(value)} with {_type(index)}", self.source, pos)

    def _unary(self, node: Unary, st: _State) -> Any:
        value = self._eval(node.operand, st)
        if node.op == "not":
            return not _truthy(value)
        if not _is_number(value):
            raise ExpressionError(f"`{node.op}` needs a number, got {_type(value)}", self.source, node.pos)
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
        if not (_is_number(left) and _is_number(right)):
            raise ExpressionError(
                f"`{op}` needs numbers, got {_type(left)} and {_type(right)}", self.source, pos
            )
        try:
            if op == "+":
                result = left + right
            elif op == "-":
                result = left - right
            elif op == "*":
                result = left * right
            elif op == "/":
                result = left / right if right else None
            elif op == "//":
                result = left // right if right else None
            elif op == "%":
                result = left % right if right else None
            else:  # **
                if abs(right) > MAX_EXPONENT:
                    raise ExpressionError(f"exponent larger than {MAX_EXPONENT}", self.source, pos)
                result = float(left) ** float(right)
                if isinstance(result, complex):
                    raise ExpressionError("power gives a complex number", self.source, pos)
        except OverflowError:
            raise ExpressionError("arithmetic result is out of range", self.source, pos) from None
        return None if result is None else _check_number(result, self.source, pos)

    def _compare(self, node: Compare, st: _State) -> bool:
        left = self._eval(node.first, st)
        for op, right_node in node.rest:
            right = self._eval(right_node, st)
            if not self._compare_one(op, left, right, node.pos):
                return False
            left = right
        return True

    def _compare_one(self, op: str, left: Any, right: Any, pos: int) -> bool:
        if op in ("in", "not in"):
            if isinstance(right, str):
                if not isinstance(left, str):
                    raise ExpressionError(f"`{op}` a string needs a string, got {_type(left)}", self.source, pos)
                found = left in right
            elif isinstance(right, list):
                found = left in right
            elif isinstance(right, Mapping):
                found = left in right
            elif right is None:
                found = False
            else:
                raise ExpressionError(f"`{op}` needs a list, string or record, got {_type(right)}", self.source, pos)
            return found if op == "in" else not found
        if op == "==":
            return left == right
        if op == "!=":
            return left != right
        # Ordering with a missing value is false, as in SQL: a rule never fires on null.
        if left is None or right is None:
            return False
        if not ((_is_number(left) and _is_number(right)) or (isinstance(left, str) and isinstance(right, str))):
            raise ExpressionError(f"cannot compare {_type(left)} with {_type(right)}", self.source, pos)
        return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]

    def _boolop(self, node: BoolOp, st: _State) -> bool:
        if node.op == "and":
            return all(_truthy(self._eval(v, st)) for v in node.values)
        return any(_truthy(self._eval(v, st)) for v in node.values)

    def _iterate(self, node: Generator, st: _State) -> Iterable[Any]:
        source = self._eval(node.source, st)
        if source is None:
            return
        if not isinstance(source, list):
            raise ExpressionError(f"`for ... in` needs a list, got {_type(source)}", self.source, node.pos)
        saved = st.locals.get(node.var, _MISSING)
        try:
            for item in source:
                st.locals[node.var] = item
                if node.cond is None or _truthy(self._eval(node.cond, st)):
                    yield self._eval(node.element, st)
        finally:
            if saved is _MISSING:
                st.locals.pop(node.var, None)
            else:
                st.locals[node.var] = saved

    def values_of(self, node: Node, st: _State) -> list[Any]:
        """Arguments of the list functions: a generator, or one list-valued expression."""
        if isinstance(node, Generator):
            return list(self._iterate(node, st))
        value = self._eval(node, st)
        if value is None:
            return []
        if not isinstance(value, list):
            raise ExpressionError(f"expected a list, got {_type(value)}", self.source, node.pos)
        return value


_MISSING = object()


def _truthy(value: Any) -> bool:
    return bool(value)


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if _is_number(value):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, Mapping):
        return "record"
    return "value"


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


def _collect_patterns(node: Node, out: list[str]) -> None:
    if isinstance(node, Call) and node.func == "matches" and len(node.args) == 2:
        pattern = node.args[1]
        if isinstance(pattern, Const) and isinstance(pattern.value, str):
            out.append(pattern.value)
    for child in children(node):
        _collect_patterns(child, out)


# --------------------------------------------------------------------------- functions


@dataclass(frozen=True)
class Function:
    arity: tuple[int, int]
    call: Callable[[Expression, Call, _State], Any]
    doc: str


def _numbers(expr: Expression, node: Call, values: list[Any]) -> list[float]:
    nums = [v for v in values if v is not None]
    for v in nums:
        if not _is_number(v):
            raise ExpressionError(f"`{node.func}()` needs numbers, got {_type(v)}", expr.source, node.pos)
    return nums


def _fold(name: str, pick: Callable[[list[float]], float]) -> Callable[[Expression, Call, _State], Any]:
    def run(expr: Expression, node: Call, st: _State) -> Any:
        if len(node.args) > 1:
            values = [expr._eval(a, st) for a in node.args]
        else:
            values = expr.values_of(node.args[0], st)
        nums = _numbers(expr, node, values)
        if not nums:
            raise Absent(f"{name}() of an empty list")
        return pick(nums)

    return run


def _fn_sum(expr: Expression, node: Call, st: _State) -> Any:
    return _check_number(sum(_numbers(expr, node, expr.values_of(node.args[0], st))), expr.source, node.pos)


def _fn_count(expr: Expression, node: Call, st: _State) -> int:
    return len(expr.values_of(node.args[0], st))


def _fn_any(expr: Expression, node: Call, st: _State) -> bool:
    return any(_truthy(v) for v in expr.values_of(node.args[0], st))


def _fn_all(expr: Expression, node: Call, st: _State) -> bool:
    return all(_truthy(v) for v in expr.values_of(node.args[0], st))


def _fn_len(expr: Expression, node: Call, st: _State) -> int:
    value = expr._eval(node.args[0], st)
    if isinstance(value, (str, list, Mapping)):
        return len(value)
    raise ExpressionError(f"`len()` needs a list or string, got {_type(value)}", expr.source, node.pos)


def _fn_abs(expr: Expression, node: Call, st: _State) -> Any:
    value = expr._eval(node.args[0], st)
    return None if value is None else abs(_numbers(expr, node, [value])[0])


def _fn_round(expr: Expression, node: Call, st: _State) -> Any:
    value = expr._eval(node.args[0], st)
    digits = expr._eval(node.args[1], st) if len(node.args) > 1 else 0
    if value is None:
        return None
    value, digits = _numbers(expr, node, [value, digits])
    return round(value, max(-20, min(20, int(digits))))


def _fn_clamp(expr: Expression, node: Call, st: _State) -> Any:
    value, low, high = _numbers(expr, node, [expr._eval(a, st) for a in node.args])
    return max(low, min(high, value))


def _string_args(expr: Expression, node: Call, st: _State) -> list[str]:
    values = [expr._eval(a, st) for a in node.args]
    for v in values:
        if not isinstance(v, str):
            raise ExpressionError(f"`{node.func}()` needs strings, got {_type(v)}", expr.source, node.pos)
    return values


def compile_pattern(pattern: str, source: str = "", pos: int = 0) -> Any:
    """Compile a regex for ``matches()``; length-capped, evaluated with a timeout."""
    if len(pattern) > MAX_PATTERN:
        raise ExpressionError(f"regular expression longer than {MAX_PATTERN} characters", source, pos)
    try:
        return _compiled(pattern)
    except regex.error as exc:
        raise ExpressionError(f"invalid regular expression {pattern!r}: {exc}", source, pos) from None


_PATTERN_CACHE: dict[str, Any] = {}


def _compiled(pattern: str) -> Any:
    if pattern not in _PATTERN_CACHE:
        if len(_PATTERN_CACHE) > 512:
            _PATTERN_CACHE.clear()
        _PATTERN_CACHE[pattern] = regex.compile(pattern)
    return _PATTERN_CACHE[pattern]


def _fn_matches(expr: Expression, node: Call, st: _State) -> bool:
    text, pattern = _string_args(expr, node, st)
    compiled = compile_pattern(pattern, expr.source, node.pos)
    try:
        return compiled.search(text[:MAX_STRING], timeout=REGEX_TIMEOUT_S) is not None
    except TimeoutError:
        raise ExpressionError(f"regular expression {pattern!r} took too long", expr.source, node.pos) from None


def _string_fn(op: Callable[..., Any]) -> Callable[[Expression, Call, _State], Any]:
    def run(expr: Expression, node: Call, st: _State) -> Any:
        return op(*_string_args(expr, node, st))

    return run


def _fn_has(expr: Expression, node: Call, st: _State) -> bool:
    try:
        return expr._eval(node.args[0], st) is not None
    except Absent:
        return False


def _fn_coalesce(expr: Expression, node: Call, st: _State) -> Any:
    for arg in node.args:
        try:
            value = expr._eval(arg, st)
        except Absent:
            continue
        if value is not None:
            return value
    return None


def _fn_first(expr: Expression, node: Call, st: _State) -> Any:
    values = expr.values_of(node.args[0], st)
    if not values:
        raise Absent("first() of an empty list")
    return values[0]


def _number_arg(expr: Expression, node: Call, st: _State) -> float | None:
    value = expr._eval(node.args[0], st)
    if value is None:
        return None
    return float(_numbers(expr, node, [value])[0])


def _formatter(render: Callable[[float], str]) -> Callable[[Expression, Call, _State], str]:
    def run(expr: Expression, node: Call, st: _State) -> str:
        value = _number_arg(expr, node, st)
        return "n/a" if value is None else render(value)

    return run


FUNCTIONS: dict[str, Function] = {
    "any": Function((1, 1), _fn_any, "true if any item is true: any(k.share > 0.5 for k in kernels.top)"),
    "all": Function((1, 1), _fn_all, "true if every item is true (and for an empty list)"),
    "count": Function((1, 1), _fn_count, "number of items: count(s for s in syncs.sites if s.calls > 10)"),
    "sum": Function((1, 1), _fn_sum, "sum of numbers; nulls are skipped"),
    "max": Function((1, 8), _fold("max", max), "largest of a list, or of several arguments"),
    "min": Function((1, 8), _fold("min", min), "smallest of a list, or of several arguments"),
    "len": Function((1, 1), _fn_len, "length of a list or string"),
    "abs": Function((1, 1), _fn_abs, "absolute value"),
    "round": Function((1, 2), _fn_round, "round(x, digits)"),
    "clamp": Function((3, 3), _fn_clamp, "clamp(x, low, high)"),
    "matches": Function((2, 2), _fn_matches, "regular-expression search: matches(k.name, 'gemm|conv')"),
    "contains": Function((2, 2), _string_fn(lambda s, sub: sub in s), "substring test"),
    "startswith": Function((2, 2), _string_fn(lambda s, p: s.startswith(p)), "prefix test"),
    "endswith": Function((2, 2), _string_fn(lambda s, p: s.endswith(p)), "suffix test"),
    "lower": Function((1, 1), _string_fn(lambda s: s.lower()), "lower-case copy of a string"),
    "has": Function((1, 1), _fn_has, "true if a fact is present in this run and not null"),
    "coalesce": Function((1, 8), _fn_coalesce, "the first argument that is present and not null"),
    "first": Function((1, 1), _fn_first, "the first item of a list"),
    "ms": Function((1, 1), _formatter(fmt_ms), "text: a duration in ms, e.g. '12.3 ms'"),
    "pct": Function((1, 1), _formatter(fmt_pct),
                    "text: a fraction as a percentage, e.g. '42%'"),
    "num": Function((1, 1), _formatter(fmt_num), "text: a number with thousands separators"),
    "size": Function((1, 1), _formatter(fmt_bytes), "text: a byte count, e.g. '1.5 GiB'"),
}


def compile_expression(source: str) -> Expression:
    """Parse ``source``; raise :class:`ExpressionError` with the column on failure."""
    return Expression(source)


ARITY.update({name: fn.arity for name, fn in FUNCTIONS.items()})
