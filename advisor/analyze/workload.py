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
  comes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze import intervals
from advisor.analyze.common import NS_PER_MS
from advisor.analyze.findings import FactSpec
from advisor.analyze.registry import analyzer
from advisor.analyze.view import TraceView
from advisor.naming import CLOSURE

PROVIDES = (
    FactSpec("workload.kind", "text", "training (a backward pass or optimizer step was seen) or inference "
             "(forward passes only)"),
    FactSpec("workload.autograd_share", "fraction", "inference: share of the forward's operator time that "
             "autograd recorded (grad mode was on)"),
    FactSpec("workload.forward_ops_per_step", "count", "inference: outermost operator calls per step in the forward"),
    FactSpec("optimizer.closure", "bool", "forward and backward ran inside optimizer.step() (a closure: LBFGS, "
             "Lightning's automatic optimization); they count as forward and backward"),
    FactSpec("optimizer.closure_ms", "ms", "time per step inside closures run by optimizer.step()"),
)

_EMPTY = (np.empty(0, "int64"), np.empty(0, "int64"))


def _kind(view: TraceView) -> str | None:
    seen = {phase for phase, how in view.phase_sources.items() if how != "not seen"}
    if seen & {"backward", "optimizer"}:
        return "training"
    if "forward" in seen:
        return "inference"
    return None


def _closure_ns(view: TraceView) -> int:
    """Nanoseconds inside closures within the analysed steps, from the collector's marks or the overlap."""
    e = view.events
    marks = ((e["cat"] == "user_annotation") & (e["name"] == CLOSURE)).to_numpy()
    if marks.any():
        spans = intervals.union(e["ts"].to_numpy()[marks], e["end"].to_numpy()[marks])
    else:
        found = view.phase_intervals
        nested = intervals.union(*(np.concatenate([found.get(p, _EMPTY)[i] for p in ("forward", "backward")])
                                   for i in (0, 1)))
        spans = intervals.intersect(*found.get("optimizer", _EMPTY), *nested)
    lo, hi = view.window
    return intervals.covered(*intervals.clip(*spans, lo, hi))


def _autograd_share(view: TraceView) -> tuple[float, float] | None:
    """(share of forward op time recorded by autograd, forward ops per step), over top-level ops in the steps."""
    host = view.host
    rows = ((host["step"] >= 0) & host["op_top"] & (host["phase"] == "forward")).to_numpy()
    if not rows.any():
        return None
    dur = host["dur"].to_numpy()[rows].astype("float64")
    recorded = host["seq"].to_numpy()[rows] >= 0
    total = dur.sum()
    share = float(dur[recorded].sum() / total) if total > 0 else float(recorded.mean())
    return share, float(rows.sum()) / max(view.step_count, 1)


@analyzer("workload", needs=("cpu_op",), provides=PROVIDES)
def workload(view: TraceView) -> dict[str, Any]:
    """Training or inference; closures inside optimizer.step(); autograd recording during inference."""
    kind = _kind(view)
    out: dict[str, Any] = {"workload.kind": kind}
    if kind == "training":
        closure = _closure_ns(view)
        out["optimizer.closure"] = closure > 0
        out["optimizer.closure_ms"] = closure / max(view.step_count, 1) / NS_PER_MS
    elif kind == "inference":
        measured = _autograd_share(view)
        if measured is not None:
            out["workload.autograd_share"], out["workload.forward_ops_per_step"] = measured
    return out
