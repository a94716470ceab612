"""Running a rule's own test cases (``advisor rules test``).

Each case gives fact values and says whether the rule ``fires``, stays
``quiet``, or is ``not_applicable`` (a fact it reads is missing), and
optionally which severity it fires with.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.engine.evaluate import evaluate_rule
from advisor.engine.rulebook import LoadedRule

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
    rule = loaded.rule
    results = []
    for i, case in enumerate(rule.tests):
        outcome, diagnosis = evaluate_rule(loaded, case.facts)
        actual = "fires" if outcome.result == "fired" else outcome.result
        problems = []
        if outcome.result == "error":
            problems.append(f"evaluation failed: {outcome.reason}")
        elif actual != case.expect:
            detail = f" ({outcome.reason})" if outcome.reason else ""
            problems.append(f"expected {case.expect}, got {actual}{detail}")
        elif case.severity is not None and diagnosis is not None and diagnosis.severity != case.severity.value:
            problems.append(f"expected severity {case.severity.value}, got {diagnosis.severity}")
        results.append(CaseResult(
            rule.id, case.name, not problems, "; ".join(problems) or "ok", str(loaded.path),
            loaded.line_of("tests", i),
        ))
    return results
