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


def _facts(tmp_path: Path, durations_us: list[float]) -> dict:
    events, t = [], 0.0
    for n, dur in enumerate(durations_us):
        events += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": t, "dur": dur,
                    "pid": 1, "tid": 1, "args": {}},
                   {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": t + 1, "dur": dur - 2, "pid": 1, "tid": 1,
                    "args": {}}]
        t += dur
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return step_split(TraceView(load_kineto(path), {"unprofiled_step_ms": [130.0] * len(durations_us)}))


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
