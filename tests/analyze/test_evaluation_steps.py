"""Training steps that also ran an evaluation pass: found, left out of the figures, and said.

Seen on this project's machine: a Lightning loop validating every 10 batches on five held-out batches
recorded one step of 14.5 ms among steps of 3.2-4.4 ms, and "dataloader starvation" (DL001, 1.4 ms a
step) fired on the validation's batches. The real run is in tests/frameworks; here hand-made steps test
each case the finder must tell apart.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.analyze.evaluation_steps import MIN_KEPT, find_evaluation_steps
from advisor.analyze.framework.step_split import step_split
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import run_analyzers
from advisor.analyze.system.view import SystemView
from advisor.load.kineto import load_kineto
from advisor.load.nsys_sqlite import NsysTrace
from advisor.naming import PHASE_NAMES
from advisor.report.model import evaluation_note, loop_note
from test_system_analyzers import _two_steps

STEP = 10_000  # ns, hand-made steps


def _ranges(*spans: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    return np.array([s for s, _ in spans], "int64"), np.array([e for _, e in spans], "int64")


def _window(kinds: str, forward_only: int = 1, teacher: bool = False) -> tuple:
    """Steps of STEP ns, one per letter: T trains (fetch, forward, backward); E trains and then evaluates
    (``forward_only`` forwards with no backward, each after a fetch of its own); R trains and calls the model
    ``forward_only`` more times with no backward and no fetch (a rollout). ``teacher``: every step first calls a
    frozen model with no backward."""
    fwd, bwd, fetches = [], [], []
    for i, kind in enumerate(kinds):
        t = i * STEP
        fetches.append(t + 100)
        if teacher:
            fwd.append((t + 200, t + 300))
        fwd.append((t + 400, t + 1000))
        bwd.append((t + 1100, t + 2000))
        if kind in "ER":
            for k in range(forward_only):
                at = t + 3000 + k * 500
                if kind == "E":
                    fetches.append(at)
                fwd.append((at + 100, at + 400))
    starts = np.arange(len(kinds), dtype="int64") * STEP
    return starts, starts + STEP, _ranges(*fwd), _ranges(*bwd), np.array(fetches, "int64")


def test_an_evaluation_at_the_end_of_the_window_is_left_out() -> None:
    found = find_evaluation_steps(*_window("TTTTE", forward_only=5))
    assert found.evaluation.tolist() == [False, False, False, False, True]
    assert found.kept.tolist() == [True, True, True, True, False] and found.left_out == 1
    assert found.extra_calls[4] == 5 and found.extra_fetches[4] == 5


def test_with_the_gpu_or_other_ranks_the_steps_stay_one_unbroken_run() -> None:
    found = find_evaluation_steps(*_window("TETTT", forward_only=3))
    assert found.kept.tolist() == [False, False, True, True, True] and found.left_out == 2


def test_without_them_every_other_step_is_kept() -> None:
    found = find_evaluation_steps(*_window("TTETT", forward_only=3), gaps_allowed=True)
    assert found.kept.tolist() == [True, True, False, True, True]


def test_too_few_steps_left_keeps_them_all_and_still_finds_the_evaluation() -> None:
    found = find_evaluation_steps(*_window("TTETT", forward_only=3))  # runs of two on either side
    assert MIN_KEPT == 3
    assert found.evaluation.tolist() == [False, False, True, False, False]
    assert found.kept.all() and found.left_out == 0


def test_a_frozen_teacher_in_every_step_is_training() -> None:
    found = find_evaluation_steps(*_window("TTTTT", teacher=True))
    assert not found.found and found.kept.all()
    with_evaluation = find_evaluation_steps(*_window("TTTTE", forward_only=2, teacher=True))
    assert with_evaluation.evaluation.tolist() == [False] * 4 + [True] and with_evaluation.extra_calls[4] == 2


def test_more_model_calls_without_batches_of_their_own_are_more_training() -> None:
    found = find_evaluation_steps(*_window("TRTTR", forward_only=4))
    assert not found.found and found.kept.all()


def test_an_inference_loop_has_no_evaluation_steps() -> None:
    starts, ends, fwd, _, fetches = _window("TTTTE", forward_only=5)
    found = find_evaluation_steps(starts, ends, fwd, _ranges(), fetches)
    assert not found.found


def test_a_forward_recomputed_inside_backward_is_not_a_model_call() -> None:
    starts, ends, fwd, bwd, fetches = _window("TTTTT")
    # activation checkpointing: one more forward inside the last step's backward, and no extra fetch
    recomputed = (np.append(fwd[0], 4 * STEP + 1200), np.append(fwd[1], 4 * STEP + 1500))
    assert not find_evaluation_steps(starts, ends, recomputed, bwd, fetches).found


# --- the whole analyzer on a hand-made trace ------------------------------------------------------------

def _event(name: str, ts: float, dur: float, cat: str = "user_annotation") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": {}}


def _trace(tmp_path: Path, evaluation_at: int, steps: int = 5, kernel: bool = False) -> TraceView:
    """Steps of 1 ms (fetch 100 us, forward 300, backward 400, update 100); the evaluation step also runs
    four fetches of 200 us and four forwards of 300 us, 2 ms more."""
    events, t = [], 0.0
    for n in range(steps):
        dur = 3000.0 if n == evaluation_at else 1000.0
        events.append(_event(f"ProfilerStep#{n}", t, dur))
        at = t
        if n == evaluation_at:
            for _ in range(4):
                events += [_event(PHASE_NAMES["dataloader"], at + 10, 200),
                           _event(PHASE_NAMES["forward"], at + 220, 300), _event("aten::mm", at + 230, 280, "cpu_op")]
                at += 500
        events += [_event(PHASE_NAMES["dataloader"], at + 10, 100), _event(PHASE_NAMES["forward"], at + 120, 300),
                   _event("aten::mm", at + 130, 280, "cpu_op"), _event(PHASE_NAMES["backward"], at + 430, 400),
                   _event(PHASE_NAMES["optimizer"], at + 840, 100)]
        t += dur
    if kernel:
        events.append({"ph": "X", "cat": "kernel", "name": "gemm", "ts": 50.0, "dur": 10.0, "pid": 0, "tid": 7,
                       "args": {}})
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return TraceView(load_kineto(path), {"step_method": "optimizer"})


def test_the_step_split_leaves_the_evaluation_step_out(tmp_path: Path) -> None:
    view = _trace(tmp_path, evaluation_at=2)
    facts = step_split(view)
    assert facts["steps.count"] == 4 and [r["step"] for r in facts["steps.table"]] == [0, 1, 3, 4]
    assert facts["steps.time_ms"] == pytest.approx(1.0)
    assert facts["phases.dataloader.ms"] == pytest.approx(0.1)  # the training fetch alone, not the evaluation's
    assert facts["steps.evaluation"] == 1 and facts["steps.evaluation_steps"] == "2"
    assert facts["steps.evaluation_left_out"] == 1 and facts["steps.evaluation_calls"] == 4
    assert facts["steps.evaluation_ms"] == pytest.approx(2.0)
    # every host figure taken step by step leaves it out too: the operators in the analysed steps only
    assert (view.host[view.host["name"] == "aten::mm"]["step"] >= 0).sum() == 4
    note = loop_note(facts)
    assert note == evaluation_note(facts)
    assert note.startswith("Step 2 also ran an evaluation pass (4 model calls with no backward")
    assert "2.0 ms longer than a training step" in note and "the figures are over the other 4 steps" in note


def test_on_a_gpu_trace_the_analysed_steps_stay_one_span(tmp_path: Path) -> None:
    facts = step_split(_trace(tmp_path, evaluation_at=1, kernel=True))
    assert [r["step"] for r in facts["steps.table"]] == [2, 3, 4]
    assert facts["steps.evaluation_left_out"] == 2
    assert "The figures are over steps 2-4, the longest unbroken run without one; the other 2 recorded steps" \
        in evaluation_note(facts)


def test_too_few_steps_between_evaluations_are_said_not_hidden(tmp_path: Path) -> None:
    facts = step_split(_trace(tmp_path, evaluation_at=2, kernel=True))
    assert facts["steps.count"] == 5 and facts["steps.evaluation"] == 1 and facts["steps.evaluation_left_out"] == 0
    note = evaluation_note(facts)
    assert "the figures include them" in note and "--active" in note


def test_a_window_without_evaluation_says_nothing(tmp_path: Path) -> None:
    facts = step_split(_trace(tmp_path, evaluation_at=-1))
    assert facts["steps.count"] == 5 and "steps.evaluation" not in facts
    assert evaluation_note(facts) is None and loop_note(facts) is None


# --- the system stage: the same ranges as NVTX ----------------------------------------------------------

def test_the_system_stage_leaves_the_evaluation_step_out_in_one_unbroken_run() -> None:
    ms = 1_000_000
    nvtx = []
    for n in range(5):  # 10 ms steps; step 1 also validates on three batches, 20 ms more
        t, dur = (n * 10 + (20 if n > 1 else 0)) * ms, (30 if n == 1 else 10) * ms
        nvtx.append(dict(start=t, end=t + dur, name=f"ProfilerStep#{n}"))
        at = t
        if n == 1:
            for _ in range(3):
                nvtx += [dict(start=at, end=at + 3 * ms, name=PHASE_NAMES["dataloader"]),
                         dict(start=at + 3 * ms, end=at + 6 * ms, name=PHASE_NAMES["forward"])]
                at += 20 * ms // 3
        nvtx += [dict(start=at, end=at + ms, name=PHASE_NAMES["dataloader"]),
                 dict(start=at + ms, end=at + 4 * ms, name=PHASE_NAMES["forward"]),
                 dict(start=at + 4 * ms, end=at + 8 * ms, name=PHASE_NAMES["backward"]),
                 dict(start=at + 8 * ms, end=at + 9 * ms, name=PHASE_NAMES["optimizer"])]
    frame = pd.DataFrame([{**r, "pid": 100, "tid": 100, "domain": "", "kind": "range"} for r in nvtx])
    frame["dur"] = frame["end"] - frame["start"]
    # the tables' columns of test_system_analyzers' capture, emptied: a capture of NVTX ranges alone
    tables = {name: table.iloc[0:0] for name, table in _two_steps().tables.items()} | {"nvtx": frame}
    view = SystemView(NsysTrace(Path("made-up.sqlite"), tables, set(tables), {"product_version": "test"}))
    assert view.steps["step"].tolist() == [2, 3, 4]  # one span: step 0, before the evaluation step, goes too
    facts = run_analyzers(view, "system").values()
    assert facts["system.steps.count"] == 3 and facts["system.steps.time_ms"] == pytest.approx(10.0)
    assert facts["system.steps.source"] == ("ProfilerStep NVTX ranges #2 to #4 (2 left out: step 1 also ran an "
                                            "evaluation pass)")
