"""The expression language: what it evaluates, and what it refuses."""

from __future__ import annotations

import re
import time

import pytest

from advisor.errors import ExpressionError
from advisor.expr.expression import Absent, compile_expression

ENV = {
    "gpu.idle_fraction": 0.4,
    "steps.count": 5,
    "trace.device": "NVIDIA A100",
    "kernels.top": [
        {"name": "volta_sgemm_128x64_nn", "share": 0.6, "ms": 12.0},
        {"name": "void at::native::vectorized_elementwise_kernel<4>", "share": 0.1, "ms": 2.0},
    ],
}


@pytest.mark.parametrize(("source", "expected"), [
    ("gpu.idle_fraction > 0.3 and steps.count >= 3", True),
    ("gpu.idle_fraction > 0.5 or steps.count == 5", True),
    ("not gpu.idle_fraction > 0.3", False),
    ("1 < 2 < 3", True),
    ("1 < 3 < 2", False),
    ("steps.count * 2 + 1", 11),
    ("steps.count / 2", 2.5),
    ("steps.count // 2", 2),
    ("steps.count % 2", 1),
    ("-steps.count", -5),
    ("2 ** 10", 1024.0),
    ("kernels.top[0].share", 0.6),
    ("kernels.top[-1].ms", 2.0),
    ("any(k.share > 0.5 for k in kernels.top)", True),
    ("all(k.share > 0.5 for k in kernels.top)", False),
    ("count(k for k in kernels.top if k.share > 0.05)", 2),
    ("sum(k.ms for k in kernels.top)", 14.0),
    ("max(k.ms for k in kernels.top)", 12.0),
    ("min(3, 1, 2)", 1),
    ("len(kernels.top)", 2),
    ("[k.name for k in kernels.top if k.share > 0.5]", ["volta_sgemm_128x64_nn"]),
    ("matches(kernels.top[0].name, 'sgemm|gemm')", True),
    ("contains(trace.device, 'A100')", True),
    ("startswith(lower(trace.device), 'nvidia')", True),
    ("'A100' in trace.device", True),
    ("'x' not in ['a', 'b']", True),
    ("1 if steps.count > 3 else 2", 1),
    ("has(gpu.missing)", False),
    ("has(gpu.idle_fraction)", True),
    ("coalesce(gpu.missing, 7)", 7),
    ("round(gpu.idle_fraction * 100, 1)", 40.0),
    ("clamp(5, 0, 3)", 3),
    ("pct(gpu.idle_fraction)", "40%"),
    ("ms(12.345)", "12.3 ms"),
    ("num(12345)", "12,345"),
    ("null > 1", False),
    ("1 / 0", None),
])
def test_evaluates(source: str, expected: object) -> None:
    assert compile_expression(source).evaluate(ENV) == expected


def test_missing_fact_is_absent_not_error() -> None:
    with pytest.raises(Absent) as info:
        compile_expression("gpu.nope > 0.1").evaluate(ENV)
    assert info.value.name == "gpu.nope"


def test_max_of_empty_list_is_absent() -> None:
    with pytest.raises(Absent):
        compile_expression("max(k.ms for k in kernels.top if k.ms > 100)").evaluate(ENV)


def test_references_exclude_loop_variables() -> None:
    expr = compile_expression("any(k.share > gpu.idle_fraction for k in kernels.top) and steps.count > 1")
    assert expr.references() == {"kernels.top", "gpu.idle_fraction", "steps.count"}


@pytest.mark.parametrize(("source", "message"), [
    ("__import__('os').system('id')", "`__` are not allowed"),
    ("().__class__.__bases__", "`__` are not allowed"),
    ("kernels.top.__class__", "`__` are not allowed"),
    ("open('/etc/passwd')", "unknown function `open()`"),
    ("eval('1')", "unknown function `eval()`"),
    ("x.y(1)", "unexpected text"),
    ("lambda: 1", "unexpected character"),
    ("1 +", "expected a value"),
    ("'unterminated", "unexpected character"),
    ("(" * 60 + "1" + ")" * 60, "nested deeper"),
    ("not " * 60 + "1", "nested deeper"),
    ("-" * 60 + "1", "nested deeper"),
    ("1" + " + 1" * 300, "more than 400 parts"),
    ("x" * 3000, "longer than"),
    ("9" * 50, "too long"),
])
def test_refused_at_parse_time(source: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compile_expression(source)


@pytest.mark.parametrize(("source", "message"), [
    ("2 ** 100000", "exponent"),
    ("10 ** 60 * 10 ** 60 * 10 ** 60 * 10 ** 60 * 10 ** 60 * 10 ** 60", "out of range"),
    ("'a' * 1000000000", "needs numbers"),
    ("[1] * 1000000000", "needs numbers"),
    ("trace.device.upper", "only records have fields"),
    ("(1).real", "only records have fields"),
    ("trace.device > 1", "cannot compare"),
])
def test_refused_at_evaluation(source: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=message):
        compile_expression(source).evaluate(ENV)


def test_catastrophic_regex_is_bounded() -> None:
    expr = compile_expression("matches(s, '(a+)+$')")
    start = time.monotonic()
    try:
        expr.evaluate({"s": "a" * 5000 + "!"})
    except ExpressionError as exc:
        assert "too long" in exc.message
    assert time.monotonic() - start < 2.0


def test_invalid_regex_names_the_pattern() -> None:
    with pytest.raises(ExpressionError, match="invalid regular expression"):
        compile_expression("matches(trace.device, '(')").evaluate(ENV)


def test_error_reports_column() -> None:
    with pytest.raises(ExpressionError) as info:
        compile_expression("steps.count > > 1")
    assert info.value.position == 14
    assert "column 15" in info.value.message


@pytest.mark.parametrize(("source", "message"), [
    ("2 ** 100000", "exponent larger than 64"),
    ("steps.count ** 100", "exponent larger than 64"),
    ("2 ** 10 ** 10", "exponent larger than 64"),
    ("'ab' * 1000000000", "`*` needs numbers, got string and number"),
    ("steps.count > 1 and [0] * 10 ** 9", "`*` needs numbers, got list and number"),
    ("mtaches(trace.device, 'A')", "did you mean `matches()`?"),
    ("matches(trace.device, '(')", "invalid regular expression"),
])
def test_refused_when_compiled_not_when_run(source: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=re.escape(message)):
        compile_expression(source)


def test_constant_parts_that_are_fine_still_compile() -> None:
    assert compile_expression("max([]) if false else 1 / 0").evaluate(ENV) is None
    assert compile_expression("2 ** 10 + steps.count").evaluate(ENV) == 1029.0


def test_null_arguments_give_null() -> None:
    assert compile_expression("clamp(null, 0, 1)").evaluate(ENV) is None
    assert compile_expression("round(null, 2)").evaluate(ENV) is None
    assert compile_expression("-null").evaluate(ENV) is None


def test_work_is_bounded() -> None:
    env = {"xs": list(range(1000))}
    with pytest.raises(ExpressionError, match="does too much work"):
        compile_expression("sum(count(b for b in xs) for a in xs)").evaluate(env)


def test_template_holes_render_and_fail_only_when_strict() -> None:
    from advisor.expr.template import Template

    text = Template("idle {{ pct(gpu.idle_fraction) }}, missing {{ ms(gpu.nope) }}, bad {{ pct(trace.device) }}")
    assert text.render(ENV) == "idle 40%, missing n/a, bad n/a"
    with pytest.raises(ExpressionError, match="needs numbers, got string"):
        text.render(ENV, strict=True)
