"""Every built-in rule loads, and passes its own test cases."""

from __future__ import annotations

import pytest

from advisor.analyze.registry import all_specs
from advisor.engine.rulebook import RuleBook
from advisor.engine.testing import run_rule_tests

BOOK = RuleBook.load(env=False)


@pytest.mark.parametrize("rule_id", sorted(BOOK.rules))
def test_rule_passes_its_cases(rule_id: str) -> None:
    loaded = BOOK[rule_id]
    assert loaded.rule.tests, f"{rule_id} has no test cases"
    results = run_rule_tests(loaded)
    failed = [f"{r.case}: {r.message}" for r in results if not r.passed]
    assert not failed, failed
    expects = {case.expect for case in loaded.rule.tests}
    assert {"fires", "quiet"} <= expects, f"{rule_id} needs cases that fire and that stay quiet"


@pytest.mark.parametrize("rule_id", sorted(BOOK.rules))
def test_rule_reads_only_declared_facts(rule_id: str) -> None:
    known = all_specs()
    for name in BOOK[rule_id].rule.compiled().references():
        assert any(name == k or name.startswith(k + ".") for k in known), f"{rule_id} reads unknown fact {name}"
