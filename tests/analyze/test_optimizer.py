"""The optimizer step's calls per parameter tensor (OPT001's estimate), on small traces of each implementation."""

from __future__ import annotations

import json

import pytest

from advisor.analyze.framework.optimizer import optimizer
from advisor.analyze.framework.view import TraceView
from advisor.load.kineto import load_kineto

#: torch.optim.Adam's for-loop update of one tensor: the step count, the two moments, the denominator, the update
FOR_LOOP = ["aten::add_", "aten::lerp_", "aten::mul_", "aten::addcmul_", "aten::sqrt", "aten::div", "aten::add_",
            "aten::addcdiv_"]


def _x(cat: str, name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": {}}


def _step(ops: list[str]) -> dict:
    """One step whose optimizer.step() runs ``ops``, 10 us each, 5 us apart."""
    events = [_x("user_annotation", "ProfilerStep#1", 0, 100000),
              _x("user_annotation", "Optimizer.step#Adam.step", 100, 15 * len(ops) + 100)]
    events += [_x("cpu_op", name, 150 + 15 * i, 10) for i, name in enumerate(ops)]
    return {"traceEvents": events}


def _facts(tmp_path, trace: dict) -> dict:
    path = tmp_path / "trace.pt.trace.json"
    path.write_text(json.dumps(trace))
    return optimizer(TraceView(load_kineto(path)))


@pytest.mark.parametrize("tensors", [1, 3, 50])
def test_the_for_loop_makes_its_calls_once_per_tensor(tmp_path, tensors: int) -> None:
    facts = _facts(tmp_path, _step(FOR_LOOP * tensors))
    assert facts["optimizer.ops_per_step"] == 8 * tensors
    assert facts["optimizer.per_param_calls"] == 8  # add_ runs twice per tensor, the other seven once
    assert not facts["optimizer.foreach"] and not facts["optimizer.fused"]


def test_foreach_and_fused_steps_make_their_calls_once_per_group(tmp_path) -> None:
    foreach = ["aten::_foreach_add_", "aten::_foreach_lerp_", "aten::_foreach_mul_", "aten::_foreach_addcmul_",
               "aten::_foreach_sqrt", "aten::_foreach_div_", "aten::_foreach_add_", "aten::_foreach_addcdiv_"]
    facts = _facts(tmp_path, _step(foreach))
    assert facts["optimizer.per_param_calls"] == 8 and facts["optimizer.foreach"]
    facts = _facts(tmp_path, _step(["aten::_foreach_add_", "aten::_fused_adam_"]))
    assert facts["optimizer.per_param_calls"] == 2 and facts["optimizer.fused"]
