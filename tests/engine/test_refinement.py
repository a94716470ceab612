"""One bottleneck, one story: refinement of an earlier diagnosis by a deeper stage, and gains that add up."""

from __future__ import annotations

from pathlib import Path

import pytest
from rulefiles import rule_data, write_rule

from advisor.engine.evaluate import Diagnosis, evaluate_rules
from advisor.engine.lint import lint
from advisor.engine.rulebook import RuleBook
from advisor.engine.story import combined_gain, fact_stage, stages_of
from advisor.report.verdict import judge

#: a starved loop as the framework stage sees it (DL001), and the main thread's OS waits under nsys (SYS001)
STARVED = {"steps.time_ms": 94.0, "steps.count": 3, "phases.dataloader.ms": 60.0, "phases.dataloader.share": 0.64,
           "dataloader.remaining_ms": 4.4, "dataloader.multiprocess": False}
BLOCKED = {"system.osrt.main_wait_ms_per_step": 50.0, "system.osrt.main_wait_share": 0.58,
           "system.osrt.main_top_phase_wait_share": 0.85, "system.osrt.main_top_call": "clock_nanosleep",
           "system.osrt.main_top_category": "sleep", "system.osrt.main_top_phase": "dataloader",
           "system.steps.time_ms": 120.0,
           "system.osrt.waits": [{"thread": "main", "call": "clock_nanosleep", "phase": "dataloader",
                                  "calls_per_step": 32.0, "ms_per_step": 48.0}]}


@pytest.fixture(scope="module")
def book() -> RuleBook:
    return RuleBook.load([], env=False)


def _diagnose(book: RuleBook, facts: dict) -> tuple[list[Diagnosis], dict]:
    diagnoses, outcomes = evaluate_rules(book.active(), facts, facts.get("steps.time_ms"))
    return diagnoses, {o.rule_id: o for o in outcomes}


def test_the_os_waits_of_a_starved_loop_are_the_how_of_dl001(book: RuleBook) -> None:
    diagnoses, outcomes = _diagnose(book, {**STARVED, **BLOCKED})
    ids = [d.rule_id for d in diagnoses]
    assert "DL001" in ids and "SYS001" not in ids
    dl001 = next(d for d in diagnoses if d.rule_id == "DL001")
    assert dl001.stages == ["framework", "system"] and dl001.phase == "dataloader"
    (how,) = dl001.refinements
    assert how["rule_id"] == "SYS001" and how["stage"] == "system" and how["tool"] == "Nsight Systems"
    assert "clock_nanosleep" in how["what"] and how["evidence"][0]["call"] == "clock_nanosleep"
    # its numbers are the system stage's; the framework facts it also read stay with DL001
    assert how["facts"]["system.osrt.main_wait_share"] == 0.58 and "steps.time_ms" not in how["facts"]
    # DL001's own estimate stands: it is measured without nsys's slowdown
    assert dl001.impact_ms == pytest.approx(60.0 - 4.4)
    assert outcomes["SYS001"].result == "fired" and outcomes["SYS001"].reason.startswith("explains DL001")


def test_os_waits_in_another_phase_stay_their_own_diagnosis(book: RuleBook) -> None:
    diagnoses, outcomes = _diagnose(book, {**STARVED, **BLOCKED, "system.osrt.main_top_phase": "other"})
    ids = [d.rule_id for d in diagnoses]
    assert "DL001" in ids and "SYS001" in ids
    assert next(d for d in diagnoses if d.rule_id == "DL001").refinements == []
    assert outcomes["SYS001"].reason == ""


def test_without_the_framework_diagnosis_the_system_one_stands_alone(book: RuleBook) -> None:
    fed = {**STARVED, "phases.dataloader.ms": 5.0, "phases.dataloader.share": 0.05}
    diagnoses, _ = _diagnose(book, {**fed, **BLOCKED})
    sys001 = next(d for d in diagnoses if d.rule_id == "SYS001")
    assert "DL001" not in [d.rule_id for d in diagnoses]
    assert sys001.stages == ["framework", "system"] and sys001.refinements == []


def test_the_combined_gain_of_the_refined_run_is_dl001s_alone(book: RuleBook) -> None:
    facts = {**STARVED, **BLOCKED}
    diagnoses, _ = _diagnose(book, facts)
    verdict = judge(diagnoses, facts)
    own = sum(d.impact_ms or 0.0 for d in diagnoses)
    assert verdict.combined_impact_ms is not None
    assert verdict.combined_impact_ms <= min(own, facts["steps.time_ms"]) + 1e-9


# the arithmetic -------------------------------------------------------------------------------
def _d(gain: float | None, phase: str | None = None) -> dict:
    return {"impact_ms": gain, "phase": phase}


PHASES = {"steps.time_ms": 100.0, "phases.dataloader.ms": 60.0, "phases.forward.ms": 30.0,
          "phases.optimizer.ms": 10.0}


def test_one_gain_is_its_own() -> None:
    assert combined_gain([_d(42.0, "dataloader")], PHASES) == pytest.approx(42.0)
    assert combined_gain([_d(42.0)], PHASES) == pytest.approx(42.0)


def test_gains_in_one_phase_take_their_share_of_what_is_left_of_it() -> None:
    # 50 of 60 ms, then 40 of 60 ms: the second removes 2/3 of the 10 ms left
    combined = combined_gain([_d(50.0, "dataloader"), _d(40.0, "dataloader")], PHASES)
    assert combined == pytest.approx(60.0 * (1 - (10 / 60) * (20 / 60)))
    assert combined <= 60.0


def test_gains_in_different_phases_add_up() -> None:
    combined = combined_gain([_d(30.0, "dataloader"), _d(10.0, "forward"), _d(5.0, "optimizer")], PHASES)
    assert combined == pytest.approx(45.0)


def test_gains_tied_to_no_phase_act_on_the_whole_step() -> None:
    combined = combined_gain([_d(50.0, "dataloader"), _d(50.0)], PHASES)
    assert combined == pytest.approx(100.0 * (1 - 0.5 * 0.5))


def test_the_combined_gain_never_exceeds_the_step() -> None:
    many = [_d(90.0), _d(95.0), _d(60.0, "dataloader"), _d(60.0, "dataloader"), _d(30.0, "forward")]
    assert combined_gain(many, PHASES) <= 100.0
    assert combined_gain([_d(100.0), _d(100.0)], PHASES) == pytest.approx(100.0)


def test_a_phase_the_run_lacks_counts_on_the_whole_step() -> None:
    assert combined_gain([_d(20.0, "backward"), _d(20.0, "backward")], PHASES) == pytest.approx(36.0)


def test_no_estimate_no_combined_gain_and_no_step_no_bound() -> None:
    assert combined_gain([_d(None)], PHASES) is None
    assert combined_gain([], PHASES) is None
    assert combined_gain([_d(3.0), _d(4.0)], {}) == pytest.approx(7.0)


def test_the_stages_of_a_diagnosis_follow_its_facts() -> None:
    assert fact_stage("system.osrt.waits") == "system" and fact_stage("ncu.kernels") == "kernel"
    assert fact_stage("phases.dataloader.ms") == "framework"
    assert stages_of(["ncu.kernels", "kernels.top"], "kernel") == ["framework", "kernel"]
    assert stages_of([], "system") == ["system"]


# the rule format --------------------------------------------------------------------------------
def _refining(**changes: object) -> dict:
    fields = {"id": "TST002", "name": "deeper-look", "stage": "system", "when": "system.steps.time_ms >= 100",
              "refines": [{"rule": "DL001", "when": "refined.phase == 'dataloader'"}],
              "tests": [{"name": "at", "expect": "fires", "refines": "DL001",
                         "facts": {"system.steps.time_ms": 100, "refined.phase": "dataloader"}},
                        {"name": "alone", "expect": "fires", "refines": "", "facts": {"system.steps.time_ms": 100}},
                        {"name": "under", "expect": "quiet", "facts": {"system.steps.time_ms": 99.5}}]}
    return rule_data(**{**fields, **changes})


def _problems(path: Path) -> list[str]:
    return [str(p) for p in lint([path], env=False).problems]


def test_a_user_rule_may_refine_a_builtin_one(tmp_path: Path) -> None:
    assert _problems(write_rule(tmp_path, data=_refining())) == []


def test_refines_names_an_earlier_stages_rule(tmp_path: Path) -> None:
    missing = _problems(write_rule(tmp_path / "a", data=_refining(refines=[{"rule": "XX999"}])))
    assert any("no enabled rule XX999" in p for p in missing)
    same = _problems(write_rule(tmp_path / "b", data=_refining(refines=[{"rule": "SYS002"}])))
    assert any("SYS002 is a system rule; a system rule can only refine" in p for p in same)


def test_refines_conditions_read_facts_and_the_refined_diagnosis(tmp_path: Path) -> None:
    typo = _problems(write_rule(tmp_path, data=_refining(refines=[{"rule": "DL001", "when": "refined.phse == 'x'"}])))
    assert any("refines[0].when" in p and "refined.phse" in p for p in typo)


def test_a_refining_rule_tests_both_ways(tmp_path: Path) -> None:
    data = _refining()
    data["tests"] = [t for t in data["tests"] if t.get("refines") != ""]
    assert any("one that fires on its own" in p for p in _problems(write_rule(tmp_path, data=data)))


def test_rules_test_checks_what_a_case_refines(tmp_path: Path) -> None:
    from advisor.engine.rulebook import parse_rule_file
    from advisor.engine.testing import run_rule_tests

    data = _refining()
    data["tests"][1]["facts"]["refined.phase"] = "dataloader"  # says "alone", but DL001's phase matches
    loaded, errors = parse_rule_file(write_rule(tmp_path, data=data), False)
    assert not errors and loaded is not None
    results = {r.case: r for r in run_rule_tests(loaded)}
    assert results["at"].passed and not results["alone"].passed
    assert "expected it to refine nothing, got DL001" in results["alone"].message


def test_the_combined_gain_is_never_below_the_largest_gain_alone() -> None:
    # 47.106590666666655 ms of a 47.10659066666665 ms step went through 1 - (1 - g/step) as 47.10659066666665:
    # the combined gain came out an ulp below the one gain it combined (seen in tests/workflow/test_nsys_end_to_end)
    step = 47.10659066666665
    for gain in (47.106590666666655, 12.345678901234567, 0.1 + 0.2):
        facts = {"steps.time_ms": step}
        combined = combined_gain([{"impact_ms": gain, "phase": None}], facts)
        assert min(gain, step) <= combined <= step
