"""The kernel stage's why inside the diagnosis that named the kernel (issue 17): refine versus new, for every
kernel rule, with the fold the engine runs on a real run (evaluate_rules over the whole rule book)."""

from __future__ import annotations

import copy

import pytest

from advisor.engine.evaluate import Diagnosis, evaluate_rules
from advisor.engine.rulebook import RuleBook

#: the kernel the framework stage names (kernels.top) and the kernel stage profiled
NAMED = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
#: a compute-bound run as the framework stage sees it: GPU009 fires and names its kernels over 5% of the time
BUSY = {"gpu.busy_fraction": 0.97, "gpu.compute_fraction": 0.97, "kernels.top_name": NAMED, "kernels.top_share": 0.3,
        "kernels.top3_share": 0.6, "kernels.top": [{"name": NAMED, "op": "aten::add_", "share": 0.3, "ms": 3.0},
                                                   {"name": "volta_sgemm_64x64_nt", "op": "aten::mm", "share": 0.02,
                                                    "ms": 0.2}]}
KERNEL_RULES = ["KRN001", "KRN002", "KRN003", "KRN004", "KRN005", "KRN006", "KRN007", "KRN008", "KRN009", "NCU001"]


@pytest.fixture(scope="module")
def book() -> RuleBook:
    return RuleBook.load([], env=False)


def _kernel_facts(book: RuleBook, rule_id: str, framework_name: str) -> dict:
    """The facts of the rule's own case that refines GPU009, with the profiled kernel named as given."""
    rule = next(r.rule for r in book.active() if r.rule.id == rule_id)
    case = next(c for c in rule.tests if c.refines == "GPU009")
    facts = {k: v for k, v in copy.deepcopy(case.facts).items() if not k.startswith("refined.")}
    for table in ("ncu.kernels", "ncu.rules"):
        for row in facts.get(table, []):
            row["framework_name"] = framework_name
    return facts


def _run(book: RuleBook, facts: dict) -> tuple[dict[str, Diagnosis], dict]:
    diagnoses, outcomes = evaluate_rules(book.active(), facts)
    return {d.rule_id: d for d in diagnoses}, {o.rule_id: o for o in outcomes}


def test_gpu009_names_the_kernels_it_asks_about(book: RuleBook) -> None:
    diagnoses, _ = _run(book, BUSY)
    assert diagnoses["GPU009"].kernels == [NAMED]  # the 2% kernel is not asked about
    assert diagnoses["GPU009"].to_dict()["kernels"] == [NAMED]


@pytest.mark.parametrize("rule_id", KERNEL_RULES)
def test_a_kernel_rule_on_a_named_kernel_is_the_why_of_that_diagnosis(book: RuleBook, rule_id: str) -> None:
    diagnoses, outcomes = _run(book, {**BUSY, **_kernel_facts(book, rule_id, NAMED)})
    assert rule_id not in diagnoses, f"{rule_id} should be folded into GPU009"
    gpu009 = diagnoses["GPU009"]
    section = next(s for s in gpu009.refinements if s["rule_id"] == rule_id)
    assert section["stage"] == "kernel" and section["tool"] == "Nsight Compute"
    assert section["evidence"] and any(r.startswith("ncu.") for r in section["reads"])
    assert gpu009.stages == ["framework", "kernel"]
    assert outcomes[rule_id].reason == "explains GPU009: shown inside it as its why (kernel)"


@pytest.mark.parametrize("rule_id", KERNEL_RULES)
def test_a_kernel_rule_on_a_kernel_no_diagnosis_named_stays_its_own(book: RuleBook, rule_id: str) -> None:
    diagnoses, outcomes = _run(book, {**BUSY, **_kernel_facts(book, rule_id, "volta_sgemm_64x64_nt")})
    assert rule_id in diagnoses and diagnoses["GPU009"].refinements == []
    assert outcomes[rule_id].reason == ""


@pytest.mark.parametrize("rule_id", KERNEL_RULES)
def test_a_kernel_rule_without_the_framework_stage_stands_alone(book: RuleBook, rule_id: str) -> None:
    diagnoses, _ = _run(book, _kernel_facts(book, rule_id, ""))
    assert rule_id in diagnoses and "GPU009" not in diagnoses


def test_every_kernel_rule_refines_the_diagnoses_that_name_kernels(book: RuleBook) -> None:
    rules = {r.rule.id: r.rule for r in book.active()}
    for rule_id in KERNEL_RULES:
        assert [e.rule for e in rules[rule_id].refines] == ["GPU005", "GPU006", "GPU009", "GPU020"], rule_id
        cases = {c.refines for c in rules[rule_id].tests if c.refines is not None}
        assert {"GPU009", ""} <= cases, f"{rule_id} tests refine and new"
    for rule_id in ("GPU005", "GPU006", "GPU009"):
        assert rules[rule_id].kernels, f"{rule_id} names its kernels"
    # GPU020 names its operators' kernels by its evidence's kernel column (ops.efficiency rows; see
    # tests/cli/test_analyze_ncu.py on the TimeSformer fixture) and asks the kernel stage about them
    assert rules["GPU020"].escalate == "ncu" and "ops.efficiency" in rules["GPU020"].evidence
