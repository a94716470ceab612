"""The fused backward of an elementwise chain is priced at the dearest kernel its backward nodes ran, not the dearest
node: a node is several kernels (``PowBackward0``: a pow and two multiplies).

A hand-made trace of one step: two backward nodes as autograd records them (the engine's
``evaluate_function`` range, the node's own range, the ``aten::`` calls it made, one of which calls another), and
a node with no operator recorded under it.
"""

from __future__ import annotations

import json

import numpy as np

from advisor.analyze.framework.elementwise import _dearest_op_ns
from advisor.analyze.framework.op_cost import BACKWARD_PREFIX, cost_ns, op_rows
from advisor.analyze.framework.view import TraceView
from advisor.load.kineto import load_kineto


def _x(name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": {}}


def _view(tmp_path) -> TraceView:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 10000, "pid": 1, "tid": 1,
         "args": {}},
        _x(BACKWARD_PREFIX + "PowBackward0", 100, 1000),
        _x("PowBackward0", 110, 950),
        _x("aten::pow", 120, 400),
        _x("aten::copy_", 130, 350),  # called by the pow: not a kernel of its own here
        _x("aten::mul", 530, 250),
        _x("aten::mul", 790, 250),
        _x(BACKWARD_PREFIX + "TanhBackward0", 2000, 300),
        _x("TanhBackward0", 2010, 280),
        _x("aten::tanh_backward", 2020, 260),
        _x(BACKWARD_PREFIX + "AddBackward0", 3000, 20),  # nothing recorded under it
    ]
    path = tmp_path / "trace.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return TraceView(load_kineto(path))


def test_a_node_is_priced_by_its_dearest_outermost_op(tmp_path) -> None:
    view = _view(tmp_path)
    ops = op_rows(view)
    names = view.host["name"].astype(str).to_numpy()
    nodes = np.flatnonzero(np.char.startswith(names.astype(str), BACKWARD_PREFIX))
    node_cost = dict(zip(nodes.tolist(), cost_ns(view, nodes).tolist()))
    priced = _dearest_op_ns(view, ops, nodes, node_cost)
    by_name = {names[n].removeprefix(BACKWARD_PREFIX): priced[n] for n in nodes.tolist()}
    assert by_name == {"PowBackward0": 400_000, "TanhBackward0": 260_000, "AddBackward0": 20_000}
    assert _dearest_op_ns(view, ops, np.array([], "int64"), {}) == {}
