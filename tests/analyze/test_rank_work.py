"""Whether two ranks did the same work, on hand-made rank traces: the same ATen calls on the same input shapes per
step, counted at the outermost call (what an autograd node or another operator calls inside is its own work)."""

from __future__ import annotations

import json

import pytest

from advisor.analyze.framework.view import TraceView
from advisor.analyze.ranks.rankset import RankSet
from advisor.analyze.ranks.work import rank_work, work_signature
from advisor.load.kineto import load_kineto


def _op(name: str, ts: float, dur: float, dims: list | None) -> dict:
    args = {"Input Dims": dims, "Input type": ["float"] * len(dims)} if dims is not None else {}
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": args}


def _trace(tokens: int, dims_known: bool = True, scale: float = 1.0, step_us: float = 10000.0) -> dict:
    """Two steps; ``scale`` stretches every call (a busier core), ``step_us`` the step (time between the calls)."""
    events = []
    for n in range(2):
        t = step_us * n
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n + 1}", "ts": t, "dur": step_us,
                       "pid": 1, "tid": 1, "args": {}})
        events.append(_op("aten::linear", t + 10, 3000 * scale, [[16, tokens, 64], [64, 64], [64]]))
        events.append(_op("aten::addmm", t + 20, 2900 * scale, [[64], [16 * tokens, 64], [64, 64]]))  # in the linear
        events.append(_op("autograd::engine::evaluate_function: AddmmBackward0", t + 4000, 3000 * scale, None))
        events.append(_op("aten::mm", t + 4010, 1400 * scale,
                          [[16 * tokens, 64], [64, 64]] if dims_known else None))
        events.append(_op("aten::mm", t + 4010 + 1500 * scale, 1400 * scale, [[64, 16 * tokens], [16 * tokens, 64]]))
    return {"traceEvents": events}


def _view(tmp_path, rank: int, trace: dict) -> TraceView:
    path = tmp_path / f"rank{rank}.pt.trace.json"
    path.write_text(json.dumps({**trace, "distributedInfo": {"rank": rank, "world_size": 2}}))
    return TraceView(load_kineto(path))


def test_the_same_calls_on_the_same_shapes_are_the_same_work(tmp_path) -> None:
    views = [_view(tmp_path, 0, _trace(32)), _view(tmp_path, 1, _trace(32))]
    assert work_signature(views[0]) == {"aten::linear|[[16,32,64],[64,64],[64]]": 1.0,
                                        "aten::mm|[[512,64],[64,64]]": 1.0, "aten::mm|[[64,512],[512,64]]": 1.0}
    assert rank_work(RankSet(views)) == {"ranks.same_ops": True, "ranks.ops_compared": 3}


def test_longer_inputs_on_one_rank_are_other_work(tmp_path) -> None:
    views = [_view(tmp_path, 0, _trace(32)), _view(tmp_path, 1, _trace(96))]
    assert rank_work(RankSet(views))["ranks.same_ops"] is False


def test_a_call_without_its_shapes_leaves_the_question_open(tmp_path) -> None:
    views = [_view(tmp_path, 0, _trace(32)), _view(tmp_path, 1, _trace(32, dims_known=False))]
    assert work_signature(views[1]) is None
    assert rank_work(RankSet(views)) == {}


def test_a_busier_core_stretches_the_operators_with_the_step(tmp_path) -> None:
    # the second rank: every call and the step 20% longer, the same calls on the same shapes
    views = [_view(tmp_path, 0, _trace(32)), _view(tmp_path, 1, _trace(32, scale=1.2, step_us=12000.0))]
    facts = rank_work(RankSet(views))
    assert facts["ranks.same_ops"] is True
    # calls 5.8 -> 6.96 ms a step (+20%), the step 10 -> 12 ms (+20%)
    assert facts["ranks.op_stretch_ratio"] == pytest.approx(1.0, abs=1e-6)


def test_time_between_the_same_operators_is_not_a_stretch_of_them(tmp_path) -> None:
    # the second rank sleeps 5 ms a step between the same calls, each as fast as the first rank's
    views = [_view(tmp_path, 0, _trace(32)), _view(tmp_path, 1, _trace(32, step_us=15000.0))]
    facts = rank_work(RankSet(views))
    assert facts["ranks.same_ops"] is True and facts["ranks.op_stretch_ratio"] == pytest.approx(0.0, abs=1e-6)
