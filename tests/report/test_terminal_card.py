"""The terminal card: the top diagnosis in full, the next ones a line each, cut on a word and marked when long."""

from __future__ import annotations

import io

from rich.console import Console

from advisor.report.terminal import print_card

LONG_WHAT = ("Under Nsight Systems the training thread is blocked in OS calls 52.8 ms per step (58% of the step), "
             "mostly in clock_nanosleep (sleep); during dataloader it is blocked 86% of the time. Second sentence.")


def _card(diagnoses: list[dict]) -> str:
    console = Console(width=100, record=True, file=io.StringIO())
    data = {"verdict": {"status": "slow", "headline": "dataloader starvation"}, "diagnoses": diagnoses, "facts": {}}
    print_card(data, "run/report.html", console)
    return console.export_text()


def _diagnosis(rule_id: str, what: str) -> dict:
    return {"rule_id": rule_id, "severity": "high", "what": what, "where": "train.py:12", "why": "Because.",
            "fix": "Do this. Then that.", "impact_ms": 10.0}


def test_later_diagnoses_show_their_first_sentence_cut_on_a_word() -> None:
    text = _card([_diagnosis("DL001", "The loop waits."), _diagnosis("SYS001", LONG_WHAT),
                  _diagnosis("CPU001", "Short one. Not shown.")])
    flat = " ".join(text.replace("│", " ").split())
    assert "SYS001 Under Nsight Systems the training thread is blocked in OS calls 52.8 ms per step (58% of the ..." \
        in flat
    assert "Second sentence" not in flat
    assert "CPU001 Short one." in flat and "Not shown" not in flat


def _story_card(summary: dict | None = None) -> str:
    from advisor.report.story import chain

    trail = [{"stage": "framework", "status": "ran", "artifacts": ["framework/rank0.pt.trace.json.gz"]},
             {"stage": "system", "status": "ran", "artifacts": ["system/report.sqlite"]},
             {"stage": "kernel", "status": "not_needed", "reason": "no escalation to it"}]
    top = {**_diagnosis("DL001", "The loop waits 60 ms per step."), "stage": "framework", "escalate": "nsys",
           "refinements": [{"rule_id": "SYS001", "name": "training-thread-blocked-in-os-calls", "stage": "system",
                            "tool": "Nsight Systems", "what": LONG_WHAT, "where": "the dataloader phase",
                            "why": "Blocked.", "facts": {}, "evidence": [], "files": ["system/report.sqlite"]}]}
    top["chain"] = chain(top, trail, {"script_command": ["python", "train.py"]}, "/runs/r1")
    console = Console(width=100, record=True, file=io.StringIO())
    data = {"verdict": {"status": "slow", "headline": "dataloader starvation"}, "diagnoses": [top], "facts": {},
            "summary": summary or {}}
    print_card(data, "run/report.html", console)
    return " ".join(console.export_text().replace("│", " ").split())


def test_the_top_diagnosis_tells_how_and_why_a_line_each() -> None:
    flat = _story_card()
    assert "How (Nsight Systems, SYS001): the dataloader phase" in flat
    assert "Why (Nsight Compute): not examined (the report has the command)" in flat


def test_the_combined_gain_is_on_the_card() -> None:
    line = "All 2 fixes together: 55.6 ms per step (59% of the step)."
    assert line in _story_card({"combined": line})
