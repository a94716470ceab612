"""CPU005's figures worked out by hand: the unprofiled steps' faults priced by the collector's probe."""

from __future__ import annotations

import json

import pytest

from advisor.analyze.framework.memory_churn import memory_churn
from advisor.analyze.framework.view import TraceView
from advisor.load.kineto import load_kineto


def _view(tmp_path, meta: dict) -> TraceView:
    events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": n * 1000.0, "dur": 1000.0,
               "pid": 1, "tid": 1, "args": {}} for n in range(3)]
    events += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": n * 1000.0 + 10, "dur": 500.0, "pid": 1,
                "tid": 1, "args": {}} for n in range(3)]
    path = tmp_path / "trace.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return TraceView(load_kineto(path), meta)


def test_faults_of_the_unprofiled_steps_at_the_probed_price(tmp_path) -> None:
    meta = {"unprofiled_step_ms": [190.0, 200.0, 210.0],
            "heap": {"window_faults": [0, 2, 1], "unprofiled_faults": [50000, 52000, 0], "page_bytes": 4096,
                     "headroom": {"mb": 128.0, "kept": False, "pinned": True}},
            "host_costs": {"page_fault_us": 0.8}}
    facts = memory_churn(_view(tmp_path, meta))
    assert facts["memory.churn_bytes"] == 50000 * 4096  # the median step's faults: one step that faulted none is not
    assert facts["memory.churn_ms"] == pytest.approx(50000 * 0.8 / 1e3)  # 40 ms
    assert facts["memory.churn_share"] == pytest.approx(40 / 200)
    # the window faulted in almost nothing, with the collector's headroom in place: it hid the churn
    assert facts["memory.churn_hidden"] is True and facts["memory.window_churn_bytes"] == 4096


def test_no_price_without_the_probe_and_nothing_without_unprofiled_steps(tmp_path) -> None:
    heap = {"window_faults": [10], "unprofiled_faults": [10], "page_bytes": 4096}
    facts = memory_churn(_view(tmp_path, {"unprofiled_step_ms": [10.0], "heap": heap}))
    assert facts["memory.churn_bytes"] == 40960 and "memory.churn_ms" not in facts
    assert facts["memory.churn_hidden"] is False
    assert memory_churn(_view(tmp_path, {"heap": heap})) == {}
