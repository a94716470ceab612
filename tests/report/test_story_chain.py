"""Each diagnosis across the stages: what / where → how → why, found, examined or not examined (with a command)."""

from __future__ import annotations

from advisor.report.story import chain, combined_line

RUN = "/runs/r1"
META = {"script_command": ["python", "train.py", "--epochs", "1"]}
DL001 = {"rule_id": "DL001", "name": "dataloader-starvation", "stage": "framework", "what": "The loop waits.",
         "where": "train.py:12", "escalate": "nsys", "impact_ms": 50.0, "refinements": []}
SECTION = {"rule_id": "SYS001", "name": "training-thread-blocked-in-os-calls", "stage": "system",
           "tool": "Nsight Systems", "what": "Blocked in clock_nanosleep.", "where": "the dataloader phase",
           "why": "Blocked.", "facts": {"system.osrt.main_wait_share": 0.5}, "evidence": [],
           "files": ["system/report.sqlite"]}


def _trail(system: str, kernel: str = "not_needed", **extra: str) -> list[dict]:
    return [{"stage": "framework", "status": "ran", "artifacts": ["framework/rank0.pt.trace.json.gz"]},
            {"stage": "system", "status": system, "artifacts": ["system/report.sqlite"] if system == "ran" else [],
             "reason": extra.get("reason", ""), "command": extra.get("command")},
            {"stage": "kernel", "status": kernel, "reason": "no escalation to it"}]


def test_a_refined_diagnosis_has_its_how_from_the_system_stage() -> None:
    parts = chain({**DL001, "refinements": [SECTION]}, _trail("ran"), META, RUN, {"system.osrt.main_wait_share":
                                                                                  "fraction"})
    assert [(p["part"], p["stage"], p["status"]) for p in parts] == [
        ("What / where", "framework", "found"), ("How", "system", "found"), ("Why", "kernel", "not examined")]
    own, how, why = parts
    assert own["own"] and own["files"] == ["framework/rank0.pt.trace.json.gz"]
    assert how["rule_id"] == "SYS001" and how["files"] == ["system/report.sqlite"]
    assert how["fact_rows"] == [{"name": "system.osrt.main_wait_share", "value": 0.5, "unit": "fraction"}]
    assert "does not ask for Nsight Compute" in why["reason"]
    assert why["command"] == ("ncu --set full -o /runs/r1/kernel/report python train.py --epochs 1 && "
                              "advisor analyze /runs/r1 /runs/r1/kernel/report.ncu-rep")


def test_a_stage_that_ran_without_explaining_it_is_examined() -> None:
    how = chain(DL001, _trail("ran"), META, RUN)[1]
    assert how["status"] == "examined" and "none of its rules explains" in how["reason"]


def test_a_skipped_stage_gives_its_own_command() -> None:
    how = chain(DL001, _trail("skipped", reason="nsys was not found (needed: DL001)", command="nsys profile x"),
                META, RUN)[1]
    assert how["status"] == "not examined" and how["reason"] == "skipped: nsys was not found"
    assert how["command"] == "nsys profile x"


def test_a_system_diagnosis_alone_has_an_examined_framework_part() -> None:
    alone = {**SECTION, "impact_ms": 10.0, "escalate": None, "refinements": []}
    framework, how, _ = chain(alone, _trail("ran"), META, RUN)
    assert framework["status"] == "examined" and how["status"] == "found" and how["own"]


def test_the_combined_line_needs_two_gains_and_says_when_they_overlap() -> None:
    one = combined_line({"combined_impact_ms": 50.0}, [DL001], 100.0)
    assert one is None
    two = combined_line({"combined_impact_ms": 70.0}, [DL001, {**DL001, "impact_ms": 40.0}], 100.0)
    assert two == ("All 2 fixes together: 70.0 ms per step (70% of the step); their own gains add up to 90.0 ms, "
                   "the overlap is counted once.")
    apart = combined_line({"combined_impact_ms": 60.0}, [DL001, {**DL001, "impact_ms": 10.0}], 100.0)
    assert apart == "All 2 fixes together: 60.0 ms per step (60% of the step)."


def test_a_run_without_gpu_kernels_has_no_kernel_to_examine() -> None:
    why = chain(DL001, _trail("ran"), META, RUN, gpu=False)[2]
    assert why["status"] == "not examined" and why["command"] is None and "no GPU kernels" in why["reason"]
