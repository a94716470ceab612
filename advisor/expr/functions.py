"""The functions an expression may call, and nothing else.

Each function is a plain Python callable that receives the evaluator, the
call node and the evaluation state, so list functions can walk a generator
lazily and ``has()``/``coalesce()`` can catch a missing fact. The parser
checks names and argument counts against :data:`FUNCTIONS`, so a misspelt
function is an error at lint time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


from advisor.expr.tree import Call, Node
from advisor.expr.values import (
    MAX_PATTERN, MAX_STRING, REGEX_TIMEOUT_S, Absent, check_number, is_number, truthy, type_name,
)
from advisor.errors import ExpressionError
from advisor.units import fmt_bytes, fmt_ms, fmt_num, fmt_pct

__all__ = ["FUNCTIONS", "Function", "compile_pattern"]


class Evaluator(Protocol):
    source: str

    def eval_node(self, node: Node, st: Any) -> Any: ...

    def values_of(self, node: Node, st: Any) -> list[Any]: ...


Impl = Callable[[Evaluator, Call, Any], Any]


@dataclass(frozen=True)
class Function:
    arity: tuple[int, int]
    call: Impl
    doc: str


def _numbers(ev: Evaluator, node: Call, values: list[Any]) -> list[float]:
    nums = [v for v in values if v is not None]
    for v in nums:
        if not is_number(v):
            raise ExpressionError(f"`{node.func}()` needs numbers, got {type_name(v)}", ev.source, node.pos)
    return nums


def _fold(name: str, pick: Callable[[list[float]], float]) -> Impl:
    def run(ev: Evaluator, node: Call, st: Any) -> Any:
        if len(node.args) > 1:
            values = [ev.eval_node(a, st) for a in node.args]
        else:
            values = ev.values_of(node.args[0], st)
        nums = _numbers(ev, node, values)
        if not nums:
            raise Absent(f"{name}() of an empty list")
        return pick(nums)

    return run


def _fn_sum(ev: Evaluator, node: Call, st: Any) -> Any:
    return check_number(sum(_numbers(ev, node, ev.values_of(node.args[0], st))), ev.source, node.pos)


def _fn_count(ev: Evaluator, node: Call, st: Any) -> int:
    return len(ev.values_of(node.args[0], st))


def _fn_any(ev: Evaluator, node: Call, st: Any) -> bool:
    return any(truthy(v) for v in ev.values_of(node.args[0], st))


def _fn_all(ev: Evaluator, node: Call, st: Any) -> bool:
    return all(truthy(v) for v in ev.values_of(node.args[0], st))


def _fn_len(ev: Evaluator, node: Call, st: Any) -> int:
    value = ev.eval_node(node.args[0], st)
    if isinstance(value, (str, list, Mapping)):
        return len(value)
    raise ExpressionError(f"`len()` needs a list or string, got {type_name(value)}", ev.source, node.pos)


def _fn_abs(ev: Evaluator, node: Call, st: Any) -> Any:
    value = ev.eval_node(node.args[0], st)
    return None if value is None else abs(_numbers(ev, node, [value])[0])


def _all_numbers(ev: Evaluator, node: Call, st: Any) -> list[float] | None:
    """Every argument as a number, or None when one of them is null (the result is then null too)."""
    values = [ev.eval_node(a, st) for a in node.args]
    if any(v is None for v in values):
        return None
    return _numbers(ev, node, values)


def _fn_round(ev: Evaluator, node: Call, st: Any) -> Any:
    values = _all_numbers(ev, node, st)
    if values is None:
        return None
    digits = int(values[1]) if len(values) > 1 else 0
    return round(values[0], max(-20, min(20, digits)))


def _fn_clamp(ev: Evaluator, node: Call, st: Any) -> Any:
    values = _all_numbers(ev, node, st)
    if values is None:
        return None
    value, low, high = values
    return max(low, min(high, value))


def _string_args(ev: Evaluator, node: Call, st: Any) -> list[str]:
    values = [ev.eval_node(a, st) for a in node.args]
    for v in values:
        if not isinstance(v, str):
            raise ExpressionError(f"`{node.func}()` needs strings, got {type_name(v)}", ev.source, node.pos)
    return values


_PATTERN_CACHE: dict[str, Any] = {}


def compile_pattern(pattern: str, source: str = "", pos: int = 0) -> Any:
    """Compile a regex for ``matches()``: length-capped, cached, and later searched with a timeout."""
    if len(pattern) > MAX_PATTERN:
        raise ExpressionError(f"regular expression longer than {MAX_PATTERN} characters", source, pos)
    compiled = _PATTERN_CACHE.get(pattern)
    if compiled is None:
        import regex  # only for a rule that uses matches(): its import is about 15 ms

        try:
            compiled = regex.compile(pattern)
        except regex.error as exc:
            raise ExpressionError(f"invalid regular expression {pattern!r}: {exc}", source, pos) from None
        if len(_PATTERN_CACHE) > 512:
            _PATTERN_CACHE.clear()
        _PATTERN_CACHE[pattern] = compiled
    return compiled


def _fn_matches(ev: Evaluator, node: Call, st: Any) -> bool:
    text, pattern = _string_args(ev, node, st)
    compiled = compile_pattern(pattern, ev.source, node.pos)
    try:
        return compiled.search(text[:MAX_STRING], timeout=REGEX_TIMEOUT_S) is not None
    except TimeoutError:
        raise ExpressionError(f"regular expression {pattern!r} took too long", ev.source, node.pos) from None


def _string_fn(op: Callable[..., Any]) -> Impl:
    def run(ev: Evaluator, node: Call, st: Any) -> Any:
        return op(*_string_args(ev, node, st))

    return run


def _fn_has(ev: Evaluator, node: Call, st: Any) -> bool:
    try:
        return ev.eval_node(node.args[0], st) is not None
    except Absent:
        return False


def _fn_coalesce(ev: Evaluator, node: Call, st: Any) -> Any:
    for arg in node.args:
        try:
            value = ev.eval_node(arg, st)
        except Absent:
            continue
        if value is not None:
            return value
    return None


def _fn_first(ev: Evaluator, node: Call, st: Any) -> Any:
    values = ev.values_of(node.args[0], st)
    if not values:
        raise Absent("first() of an empty list")
    return values[0]


def _formatter(render: Callable[[float], str]) -> Impl:
    def run(ev: Evaluator, node: Call, st: Any) -> str:
        value = ev.eval_node(node.args[0], st)
        if value is None:
            return "n/a"
        return render(float(_numbers(ev, node, [value])[0]))

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
    "contains": Function((2, 2), _string_fn(lambda s, sub: sub in s), "substring test: contains(text, part)"),
    "startswith": Function((2, 2), _string_fn(lambda s, p: s.startswith(p)), "prefix test"),
    "endswith": Function((2, 2), _string_fn(lambda s, p: s.endswith(p)), "suffix test"),
    "lower": Function((1, 1), _string_fn(lambda s: s.lower()), "lower-case copy of a string"),
    "has": Function((1, 1), _fn_has, "true if a fact is present in this run and not null"),
    "coalesce": Function((1, 8), _fn_coalesce, "the first argument that is present and not null"),
    "first": Function((1, 1), _fn_first, "the first item of a list"),
    "ms": Function((1, 1), _formatter(fmt_ms), "text: a duration in ms, e.g. '12.3 ms'"),
    "pct": Function((1, 1), _formatter(fmt_pct), "text: a fraction as a percentage, e.g. '42%'"),
    "num": Function((1, 1), _formatter(fmt_num), "text: a number with thousands separators"),
    "size": Function((1, 1), _formatter(fmt_bytes), "text: a byte count, e.g. '1.5 GiB'"),
}
