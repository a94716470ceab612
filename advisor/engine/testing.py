"""Running a rule's own test cases (``advisor rules test``).

Each case gives fact values and says whether the rule ``fires``, stays
``quiet``, or is ``not_applicable`` (a fact it reads is missing), and, for a
case that fires, optionally which severity and how many ms per step it
estimates, and which earlier diagnosis it refines (``refines: DL001``, or
``""`` for none; the refined diagnosis's ``refined.phase`` goes in the
facts). A case that fires also renders the rule's texts strictly, so a
text that fails on real values (``pct()`` of a string, say) fails the test
instead of showing ``n/a`` in a user's report.
"""

from __future__ import annotations

import math
from collections import ChainMap
from dataclasses import dataclass

from advisor.engine.evaluate import evaluate_rule
from advisor.engine.rulebook import LoadedRule
from advisor.engine.rule import Rule, RuleTest
from advisor.errors import ExpressionError
from advisor.expr.expression import Absent, Environment

__all__ = ["CaseResult", "run_rule_tests"]


@dataclass
class CaseResult:
    rule_id: str
    case: str
    passed: bool
    message: str
    path: str
    line: int | None


def run_rule_tests(loaded: LoadedRule) -> list[CaseResult]:
    """One result per test case; a rule without cases gets one failed result saying so."""
    rule = loaded.rule
    if not rule.tests:
        return [CaseResult(rule.id, "(none)", False, "the rule has no test cases", str(loaded.path),
                           loaded.line_of("id"))]
    results = []
    for i, case in enumerate(rule.tests):
        problems = _check_case(loaded, case)
        results.append(CaseResult(
            rule.id, case.name, not problems, "; ".join(problems) or "ok", str(loaded.path),
            loaded.line_of("tests", i),
        ))
    return results


def _check_case(loaded: LoadedRule, case: RuleTest) -> list[str]:
    outcome, diagnosis = evaluate_rule(loaded, case.facts)
    actual = "fires" if outcome.result == "fired" else outcome.result
    if outcome.result == "error":
        return [f"evaluation failed: {outcome.reason}"]
    if actual != case.expect:
        detail = f" ({outcome.reason})" if outcome.reason else ""
        return [f"expected {case.expect}, got {actual}{detail}"]
    if diagnosis is None:
        return []
    problems = []
    if case.severity is not None and diagnosis.severity != case.severity.value:
        problems.append(f"expected severity {case.severity.value}, got {diagnosis.severity}")
    if case.impact_ms is not None and not _close(diagnosis.impact_ms, case.impact_ms):
        problems.append(f"expected an impact of {case.impact_ms:g} ms per step, got {diagnosis.impact_ms}")
    env = Environment(case.facts)
    if case.refines is not None:
        refined = _refined(loaded.rule, env)
        if refined != case.refines:
            problems.append(f"expected it to refine {case.refines or 'nothing'}, got {refined or 'nothing'}")
    compiled = loaded.rule.compiled()
    for name, expr in (("impact.ms_per_step", compiled.impact), ("evidence", compiled.evidence)):
        try:
            if expr is not None:
                expr.evaluate(env)
        except Absent:
            pass  # reported as "n/a" / no evidence, which is allowed
        except ExpressionError as exc:
            problems.append(f"`{name}` fails: {exc.message}")
    for name, template in compiled.texts.items():
        try:
            template.render(env, strict=True)
        except ExpressionError as exc:
            problems.append(f"`{name}` text fails: {exc.message}")
    return problems


def _refined(rule: Rule, env: Environment) -> str:
    """The first rule of ``refines`` whose condition holds on the case's facts ("" for none); a case that gives
    ``refined.rule_id`` has only that rule's diagnosis to refine."""
    present = env.values.get("refined.rule_id")
    for entry, expr in zip(rule.refines, rule.compiled().refines):
        if present is not None and entry.rule != present:
            continue
        scope = Environment(ChainMap({"refined.rule_id": entry.rule}, env.values))  # type: ignore[arg-type]
        try:
            if expr.evaluate(scope):
                return entry.rule
        except (Absent, ExpressionError):
            continue
    return ""


def _close(actual: float | None, expected: float) -> bool:
    return actual is not None and math.isclose(actual, expected, rel_tol=1e-6, abs_tol=1e-9)
