"""Recorded steps that slow down as the window goes on: ``steps.window_drift``, and the report's sentence on it.

Seen on this project's machine: the profiler holds every operator's inputs until it stops (record_shapes), and
a DDP example's recorded steps went from ~150 ms to ~350 ms mid-window while the steps after it took ~130 ms.
The collector now records shapes apart (advisor.load.kineto_shapes); the profiler's own records still grow the
process, less, and the note names record_shapes only for a trace that recorded shapes in its window.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.analyze.framework.step_split import step_split
from advisor.analyze.framework.view import TraceView
from advisor.load.kineto import load_kineto
from advisor.report.model import WINDOW_DRIFT_NOTE, profiler_note


def _facts(tmp_path: Path, durations_us: list[float], heap: dict | None = None) -> dict:
    events, t = [], 0.0
    for n, dur in enumerate(durations_us):
        events += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": t, "dur": dur,
                    "pid": 1, "tid": 1, "args": {}},
                   {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": t + 1, "dur": dur - 2, "pid": 1, "tid": 1,
                    "args": {}}]
        t += dur
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    meta = {"unprofiled_step_ms": [130.0] * len(durations_us), **({"heap": heap} if heap else {})}
    return step_split(TraceView(load_kineto(path), meta))


def test_steps_that_slow_down_mid_window(tmp_path: Path) -> None:
    facts = _facts(tmp_path, [150e3, 150e3, 200e3, 350e3, 350e3])  # the middle step of five is left out
    assert facts["steps.window_drift"] == pytest.approx(350 / 150)
    note = profiler_note(facts)
    assert "slowed down as the window went on" in note and "2.3 times" in note and "record_shapes" not in note
    assert "keeps its records until it stops" in note
    in_window = profiler_note({**facts, "trace.shapes": "window"})
    assert "keeps every operator's inputs until it stops (record_shapes)" in in_window


def test_steady_steps_say_nothing_of_a_drift(tmp_path: Path) -> None:
    facts = _facts(tmp_path, [300e3, 310e3, 290e3, 305e3])
    assert facts["steps.window_drift"] == pytest.approx(297.5 / 305)
    note = profiler_note(facts)
    assert "profiling made the recorded steps" in note and "slowed down" not in note


def test_the_note_starts_at_its_threshold(tmp_path: Path) -> None:
    just_under = _facts(tmp_path, [200e3, 200e3, 299.8e3, 299.8e3])
    assert just_under["steps.window_drift"] < WINDOW_DRIFT_NOTE
    assert "slowed down" not in profiler_note(just_under)
    at = _facts(tmp_path, [200e3, 200e3, 300e3, 300e3])
    assert at["steps.window_drift"] == pytest.approx(WINDOW_DRIFT_NOTE)
    assert "slowed down" in profiler_note(at)


def test_too_few_steps_for_a_trend(tmp_path: Path) -> None:
    facts = _facts(tmp_path, [150e3, 150e3, 350e3])
    assert "steps.window_drift" not in facts or facts["steps.window_drift"] is None


#: examples/zeroed_grads.py with glibc keeping freed memory, before the heap headroom: every recorded step faulted
#: in its six 4 MB weight-gradient temporaries afresh (6144 pages), the steps after the window none
FAULTING = {"window_faults": [3083, 6144, 6144, 6144, 6145], "unprofiled_faults": [0, 0, 1, 0, 0], "headroom": None,
            "page_bytes": 4096}


def test_measured_faults_say_why_the_recorded_steps_were_longer(tmp_path: Path) -> None:
    facts = _facts(tmp_path, [300e3, 310e3, 290e3, 305e3, 300e3], FAULTING)
    assert facts["steps.window_fault_bytes"] == 6144 * 4096 and facts["steps.unprofiled_fault_bytes"] == 0
    assert "steps.heap_headroom_bytes" not in facts
    note = profiler_note(facts)
    assert "Each recorded step faulted in 24.0 MiB of new memory" in note and "after the window 0 B" in note
    assert "slowed down" not in note  # steady steps: no drift to speak of


def test_a_drift_without_new_memory_does_not_blame_memory(tmp_path: Path) -> None:
    quiet = {**FAULTING, "window_faults": [0, 1, 0, 0, 2]}
    note = profiler_note(_facts(tmp_path, [150e3, 150e3, 200e3, 350e3, 350e3], quiet))
    assert "slowed down as the window went on" in note and "without faulting in new memory" in note
    assert "keeps its records" not in note and "faulted in" not in note.replace("without faulting in", "")


def test_a_drift_with_new_memory_says_both(tmp_path: Path) -> None:
    note = profiler_note(_facts(tmp_path, [150e3, 150e3, 200e3, 350e3, 350e3], FAULTING))
    assert "slowed down as the window went on (the later half took 2.3 times the earlier half)." in note
    assert "Each recorded step faulted in 24.0 MiB" in note


def test_faults_like_the_unprofiled_steps_are_not_news(tmp_path: Path) -> None:
    alike = {**FAULTING, "unprofiled_faults": [6000, 6100, 6144, 6144, 6144]}
    facts = _facts(tmp_path, [300e3, 310e3, 290e3, 305e3, 300e3], alike)
    assert "faulted in" not in profiler_note(facts)


def test_the_headroom_given_is_a_fact(tmp_path: Path) -> None:
    given = {**FAULTING, "window_faults": [0, 0, 1, 0, 0], "headroom": {"mb": 221.1, "ms": 91.0, "kept": True}}
    facts = _facts(tmp_path, [300e3, 310e3, 290e3, 305e3], given)
    assert facts["steps.heap_headroom_bytes"] == round(221.1 * 2**20)
    trimmed = _facts(tmp_path, [300e3, 310e3, 290e3, 305e3], {**given, "headroom": {"mb": 64.0, "kept": False}})
    assert "steps.heap_headroom_bytes" not in trimmed
