"""OPT001 says why by what the step's calls are: dispatcher overhead around tiny tensors, passes over memory
around large ones, or per-tensor work in a step already fused (whose fix is not "use fused").

Seen on this project's machine: a plain loop over three layers of up to 2048x2048 with Adam spent 14.8 ms a
step in 54 calls (260 us a call), and fused=True gave back 6.6-10.7 ms against an estimate of 11; the
planted example's fixed twin (fused, 800 tiny tensors) still fires, and was told to use fused.
"""

from __future__ import annotations

import pytest

from advisor.engine.evaluate import Diagnosis, evaluate_rules
from advisor.engine.rulebook import RuleBook

BOOK = RuleBook.load(env=False)


def _opt001(**facts: object) -> Diagnosis:
    base = {"phases.optimizer.share": 0.35, "phases.optimizer.ms": 14.8, "optimizer.name": "Adam"}
    diagnoses, _ = evaluate_rules([r for r in BOOK.active("framework") if r.rule.id == "OPT001"],
                                  {**base, **facts})
    assert [d.rule_id for d in diagnoses] == ["OPT001"]
    return diagnoses[0]


def test_many_tiny_calls_are_dispatcher_overhead() -> None:
    d = _opt001(**{"phases.optimizer.ms": 85.0, "optimizer.ops_per_step": 7218, "optimizer.per_param_calls": 9,
                   "optimizer.foreach": False, "optimizer.fused": False})
    assert d.why.startswith("The optimizer uses its for-loop implementation: the update is split into 9 operator")
    assert "dispatcher and Python overhead" in d.why
    assert d.fix.startswith("Use the fused implementation")


def test_few_large_calls_are_passes_over_memory() -> None:
    d = _opt001(**{"optimizer.ops_per_step": 54, "optimizer.per_param_calls": 9, "optimizer.foreach": False,
                   "optimizer.fused": False})
    assert "reads and writes its whole tensor again (274 us a call)" in d.why, d.why
    assert "dispatcher" not in d.why


def test_an_already_fused_step_is_told_to_merge_its_tensors() -> None:
    d = _opt001(**{"phases.optimizer.ms": 21.8, "optimizer.ops_per_step": 2, "optimizer.per_param_calls": 2,
                   "optimizer.fused": True})
    assert d.why.startswith("The step is already fused")
    assert d.fix.startswith("Merge the many tiny parameters") and "fused=True" not in d.fix
    assert d.impact_ms == pytest.approx(21.8 * 0.3)


def test_without_the_call_count_it_says_the_overhead() -> None:
    d = _opt001()
    assert "8 operator calls per parameter tensor" in d.why and "dispatcher" in d.why
