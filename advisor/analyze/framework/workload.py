"""What the profiled loop is: training or inference, closures, and autograd left on in inference.

- ``workload.kind``: *training* when the trace shows a backward pass or an
  optimizer step, *inference* when it shows forward passes and neither
  (inference and evaluation loops, ``generate()``-style decoding). Rules
  whose advice only makes sense for one of them read it.
- ``optimizer.closure``: forward and backward ran inside ``optimizer.step()``
  (a closure: LBFGS, PyTorch Lightning's automatic optimization). Seen from
  the collector's :data:`~advisor.naming.CLOSURE` marks, or, in traces
  recorded elsewhere, from forward or backward time inside ``Optimizer.step#``.
  The step split counts that time as forward and backward (:mod:`.phases`).
- ``workload.autograd_share``: in inference, the share of the forward's
  operator time that autograd recorded (ops with a sequence number: grad
  mode was on, so every op also built the graph for a backward that never
  comes). ``workload.autograd_nodes_per_step`` counts the graph nodes (one
  per distinct sequence number), and ``workload.autograd_ms`` prices each
  top-level op that recorded at what grad mode adds to an op of its kind
  (matrix product, normalisation, pointwise, add) in the run's own process
  (``host_costs`` in run.json, measured by the collector before the warm-up
  and before its own labels): the host time ``torch.inference_mode()`` would give back
  (``workload.autograd_ms_unprofiled``). In the recorded steps that time is
  stretched as the profiler stretched the whole step (run.json's unprofiled
  steps against the recorded ones), and ``workload.autograd_ms`` is in those
  units, as every other time the report compares it with. Traces recorded
  elsewhere carry no such measurement, so they get the count but not the time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze import intervals
from advisor.analyze.findings import FactSpec
from advisor.analyze.framework.per_step import NS_PER_MS, profiler_stretch, step_ms
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer
from advisor.naming import CLOSURE

PROVIDES = (
    FactSpec("workload.kind", "text", "training (a backward pass or optimizer step was seen) or inference "
             "(forward passes only)"),
    FactSpec("workload.autograd_share", "fraction", "inference: share of the forward's operator time that "
             "autograd recorded (grad mode was on)"),
    FactSpec("workload.forward_ops_per_step", "count", "inference: outermost operator calls per step in the forward"),
    FactSpec("workload.autograd_nodes_per_step", "count", "inference: autograd graph nodes recorded per step "
             "(distinct sequence numbers of the forward's ops)"),
    FactSpec("workload.autograd_ms", "ms", "inference: host time per step spent recording the forward's ops for "
             "autograd, in the recorded steps' time: workload.autograd_ms_unprofiled stretched as the profiler "
             "stretched the whole step (steps.profiler_overhead), where the run timed steps without it"),
    FactSpec("workload.autograd_ms_unprofiled", "ms", "inference: the same without the profiler: each op at what "
             "grad mode adds to an op of its kind in the run's process, measured before our instrumentation"),
    FactSpec("workload.autograd_step_share", "fraction", "inference: workload.autograd_ms as a share of the step"),
    FactSpec("autograd.us_per_op", "us", "host time autograd adds to one recorded op, measured in the run's "
             "process before the warm-up and before the collector's labels"),
    FactSpec("optimizer.closure", "bool", "forward and backward ran inside optimizer.step() (a closure: LBFGS, "
             "Lightning's automatic optimization); they count as forward and backward"),
    FactSpec("optimizer.closure_ms", "ms", "forward and backward time per step inside closures run by "
                                           "optimizer.step()"),
    FactSpec("optimizer.closure_calls", "count", "closure evaluations per step that ran a forward or backward "
             "(LBFGS evaluates its closure once, then again for each iteration and line-search point), from the "
             "collector's marks; 0 without them"),
)

_EMPTY = (np.empty(0, "int64"), np.empty(0, "int64"))


def _kind(view: TraceView) -> str | None:
    seen = {phase for phase, how in view.phase_sources.items() if how != "not seen"}
    if seen & {"backward", "optimizer"}:
        return "training"
    if "forward" in seen:
        return "inference"
    return None


def _forward_backward(view: TraceView) -> tuple[np.ndarray, np.ndarray]:
    """The forward and backward phase intervals, as one sorted union."""
    found = view.phase_intervals
    return intervals.union(*(np.concatenate([found.get(p, _EMPTY)[i] for p in ("forward", "backward")])
                             for i in (0, 1)))


def _closure_marks(view: TraceView) -> tuple[np.ndarray, np.ndarray] | None:
    """Start and end of the collector's closure marks; None in a trace without them."""
    e = view.events
    marks = ((e["cat"] == "user_annotation") & (e["name"] == CLOSURE)).to_numpy()
    if not marks.any():
        return None
    return e["ts"].to_numpy()[marks], e["end"].to_numpy()[marks]


def _closure_calls(view: TraceView, marks: tuple[np.ndarray, np.ndarray] | None,
                   nested: tuple[np.ndarray, np.ndarray]) -> float:
    """Closure marks per analysed step that hold some forward or backward time (each evaluation is marked)."""
    if marks is None or not view.step_count:
        return 0.0
    ns, ne = nested
    ts, end = marks
    steps = view.steps
    starts, ends = steps["start"].to_numpy("int64"), steps["end"].to_numpy("int64")
    at = np.searchsorted(ends, ts, side="right")  # the step each mark begins in, where it does
    in_step = (at < len(starts)) & (ts >= starts[np.minimum(at, len(starts) - 1)])
    first = np.searchsorted(ne, ts, side="right")  # the first forward/backward interval ending after the mark begins
    holds = (first < len(ns)) & (ns[np.minimum(first, len(ns) - 1)] < end)
    return float((in_step & holds).sum()) / view.step_count


def _closure_ns(view: TraceView, marks: tuple[np.ndarray, np.ndarray] | None,
                nested: tuple[np.ndarray, np.ndarray]) -> int:
    """Nanoseconds of forward and backward inside closures within the analysed steps, from the collector's marks or,
    without them, inside the optimizer's ranges.

    The forward and backward, not the closure: Lightning's manual optimization passes ``optimizer.step()`` a closure
    that does nothing (the script ran forward and backward before it), which is no closure loop."""
    closures = intervals.union(*marks) if marks is not None else view.phase_intervals.get("optimizer", _EMPTY)
    spans = intervals.intersect(*closures, *nested)
    steps = view.steps  # step by step: the analysed steps may have left-out ones between them
    return intervals.covered(*intervals.intersect(*spans, steps["start"].to_numpy("int64"),
                                                  steps["end"].to_numpy("int64")))


_MATMUL_OPS = frozenset({"aten::linear", "aten::addmm", "aten::mm", "aten::matmul", "aten::bmm", "aten::baddbmm",
                         "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution"})
_NORM_OPS = frozenset({"aten::layer_norm", "aten::native_layer_norm", "aten::batch_norm", "aten::group_norm",
                       "aten::instance_norm", "aten::rms_norm"})


#: sums save no input for backward, so recording one costs less than another pointwise op's
_ADD_OPS = frozenset({"aten::add", "aten::sub", "aten::rsub"})


def _op_kind(name: str) -> str:
    """Which of the collector's probes (:mod:`advisor.collect.host_costs`) prices this op's recording."""
    if name in _MATMUL_OPS:
        return "matmul"
    if name in _ADD_OPS:
        return "add"
    return "norm" if name in _NORM_OPS else "pointwise"


def _autograd(view: TraceView) -> dict[str, Any]:
    """Autograd's recording in an inference loop's forward: share of op time, ops and nodes per step."""
    host = view.host
    in_forward = ((host["step"] >= 0) & (host["phase"] == "forward") & (host["cat"] == "cpu_op")).to_numpy()
    top = in_forward & host["op_top"].to_numpy()
    if not top.any():
        return {}
    steps = max(view.step_count, 1)
    dur = host["dur"].to_numpy()[top].astype("float64")
    seq = host["seq"].to_numpy()
    recorded = seq[top] >= 0
    total = dur.sum()
    # Nested ops share their outer op's number when only the outer one records (one node): count numbers, not ops.
    nodes = len(np.unique(seq[in_forward & (seq >= 0)])) / steps
    out: dict[str, Any] = {
        "workload.autograd_share": float(dur[recorded].sum() / total) if total > 0 else float(recorded.mean()),
        "workload.forward_ops_per_step": float(top.sum()) / steps,
        "workload.autograd_nodes_per_step": nodes,
    }
    costs = view.run_meta.get("host_costs") or {}
    cost = costs.get("autograd_us")
    if cost is not None:
        out["autograd.us_per_op"] = float(cost)
        by_kind = costs.get("autograd_us_by_kind")
        if by_kind:
            # each op at its kind's cost, priced once per distinct name
            price = view.host_names(lambda n: float(by_kind.get(_op_kind(n), cost)), "float64")
            bare = float(price[top][recorded].sum()) / steps / 1e3
        else:  # a run.json from before the probes of each kind
            bare = nodes * float(cost) / 1e3
        out["workload.autograd_ms_unprofiled"] = bare
        # The probes price an op as the script runs without us; the recorded steps, which the estimate is a part
        # of and is compared with, ran under the profiler and our labels, which stretch host work (2.5-2.9x on
        # examples/inference_autograd.py, where inference_mode() gave back 2.5x as much recorded time as bare).
        stretch = profiler_stretch(view)
        out["workload.autograd_ms"] = bare * max(stretch, 1.0) if stretch else bare
        step = step_ms(view)
        out["workload.autograd_step_share"] = out["workload.autograd_ms"] / step if step else 0.0
    return out


@analyzer("workload", needs=("cpu_op",), provides=PROVIDES)
def workload(view: TraceView) -> dict[str, Any]:
    """Training or inference; closures inside optimizer.step(); autograd recording during inference."""
    kind = _kind(view)
    out: dict[str, Any] = {"workload.kind": kind}
    if kind == "training":
        marks, nested = _closure_marks(view), _forward_backward(view)
        closure = _closure_ns(view, marks, nested)
        out["optimizer.closure"] = closure > 0
        out["optimizer.closure_ms"] = closure / max(view.step_count, 1) / NS_PER_MS
        out["optimizer.closure_calls"] = _closure_calls(view, marks, nested)
    elif kind == "inference":
        out.update(_autograd(view))
    return out
