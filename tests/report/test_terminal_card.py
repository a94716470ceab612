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
