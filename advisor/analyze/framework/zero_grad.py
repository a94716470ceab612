"""Gradients zeroed in place every step instead of being released (``zero_grad(set_to_none=False)``).

With ``set_to_none=False`` (``optimizer.zero_grad``, ``model.zero_grad``, or
a loop of ``p.grad.zero_()``) each step writes zeros into every gradient,
and the next backward pass then adds into them: ``AccumulateGrad`` runs an
in-place ``aten::add_`` instead of taking the new gradient tensor as it is.
With ``set_to_none=True`` (the default since PyTorch 2.0) neither happens.

The zeroing calls are the outermost ``aten::zero_`` / ``aten::_foreach_zero_``
ops inside an ``Optimizer.zero_grad#...`` annotation, or, for
``model.zero_grad`` and hand-written loops (which have no annotation), those
made outside the forward pass and backward, two or more per step from one
line. They count only when backward accumulates into existing gradients.
Of the accumulation, only the part that lands in freshly zeroed gradients is
avoidable: with gradient accumulation over k backward passes per step, the
first of the k.

On a CPU trace the zeroing inside ``optimizer.zero_grad`` is priced at the
annotation's whole time, not only its ops': the per-parameter Python work
around each ``zero_()`` (the detach or ``requires_grad_`` check, the call
itself) goes with the fix too, and what stays, a loop of ``p.grad = None``,
is a few microseconds per parameter. On ``examples/zeroed_grads.py`` the
annotation took 3.7 ms a step, its ``zero_`` ops 3.0 ms, and with
``set_to_none=True`` the annotation took 0.1 ms.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze import intervals
from advisor.analyze.findings import FactSpec
from advisor.analyze.framework.op_cost import OpRows, by_site, cost_basis, cost_ns, op_rows
from advisor.analyze.framework.per_step import NS_PER_MS, step_ms
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

ZERO_OPS = ("aten::zero_", "aten::_foreach_zero_")
ACCUMULATE = "torch::autograd::AccumulateGrad"
ZERO_GRAD_ANNOTATION = "Optimizer.zero_grad#"

PROVIDES = (
    FactSpec("zero_grad.calls_per_step", "count", "gradient zeroing calls per step (zero_ per tensor, _foreach_zero_ per group)"),
    FactSpec("zero_grad.zero_ms", "ms", "time per step zeroing gradients (on a CPU trace: the whole optimizer.zero_grad "
             "call, where the zeroing ran in one)"),
    FactSpec("zero_grad.accumulate_ms", "ms",
             "time per step backward spends adding into the zeroed gradients (AccumulateGrad's in-place add_)"),
    FactSpec("zero_grad.ms", "ms", "zeroing plus that accumulation: what set_to_none=True removes"),
    FactSpec("zero_grad.share", "fraction", "that time as a share of the step"),
    FactSpec("zero_grad.by_optimizer", "bool", "the zeroing runs inside optimizer.zero_grad (else model.zero_grad or a loop)"),
    FactSpec("zero_grad.site", "text", "the user's line that zeroes the gradients"),
    FactSpec("zero_grad.basis", "text", "what the times count: host (CPU op time) or gpu (kernel time)"),
)


def _zeroing_rows(view: TraceView, ops: OpRows) -> tuple[np.ndarray, np.ndarray | None]:
    """The outermost gradient-zeroing ops, and the optimizer.zero_grad annotations holding them (None when the
    zeroing ran outside any)."""
    host = view.host
    zero = ops.outermost(ops.named(*ZERO_OPS))
    annotation = (host["cat"] == "user_annotation").to_numpy() & view.host_names(
        lambda n: n.startswith(ZERO_GRAD_ANNOTATION), bool) & (host["step"] >= 0).to_numpy()
    inside = zero & _within(host, annotation)
    if inside.any():
        return np.flatnonzero(inside), _holding(host, annotation, inside)
    phase = host["phase"].to_numpy(dtype=object)
    module = host["module"].to_numpy(dtype=object)
    loose = np.flatnonzero(zero & (phase != "backward") & (phase != "dataloader") & (module == ""))
    if len(loose) == 0:
        return loose, None
    # one line zeroing two or more tensors per step: a loop over parameters
    lines = (host["src_file"].to_numpy(dtype=object)[loose] + ":"
             + host["src_line"].to_numpy()[loose].astype(str)).astype(str)
    uniq, counts = np.unique(lines, return_counts=True)
    busy = uniq[counts >= 2 * max(view.step_count, 1)]
    return loose[np.isin(lines, busy)], None


def _holding(host: Any, ranges: np.ndarray, points: np.ndarray) -> np.ndarray:
    """The rows of ``ranges`` (not overlapping one another on a thread) in which a row of ``points`` starts."""
    ts, end, tid = host["ts"].to_numpy(), host["end"].to_numpy(), host["tid"].to_numpy()
    held = []
    for t in np.unique(tid[ranges]):
        mine = np.flatnonzero(ranges & (tid == t))
        mine = mine[np.argsort(ts[mine], kind="stable")]
        at = ts[points & (tid == t)]
        k = np.searchsorted(ts[mine], at, side="right") - 1
        k = k[(k >= 0) & (at < end[mine[np.maximum(k, 0)]])]
        held.append(mine[np.unique(k)])
    return np.concatenate(held) if held else np.zeros(0, "int64")


def _within(host: Any, ranges: np.ndarray) -> np.ndarray:
    """Rows that start inside one of the ``ranges`` rows on their own thread.

    By time, not by nesting: the collector's source label around the ``zero_grad()`` call opens
    with the annotation and closes before it, so the two overlap without nesting.
    """
    out = np.zeros(len(host), bool)
    ts, tid = host["ts"].to_numpy(), host["tid"].to_numpy()
    for t in np.unique(tid[ranges]):
        mine = ranges & (tid == t)
        starts, ends = intervals.union(ts[mine], host["end"].to_numpy()[mine])
        rows = np.flatnonzero(tid == t)
        k = np.searchsorted(starts, ts[rows], side="right") - 1
        out[rows] = (k >= 0) & (ts[rows] < ends[np.maximum(k, 0)])
    return out


def _accumulate_rows(ops: OpRows) -> np.ndarray:
    """The in-place adds under AccumulateGrad."""
    acc = ops.named(ACCUMULATE)
    add = ops.named("aten::add_")
    parent = ops.parent_op
    under = np.zeros(len(add), bool)
    has = add & (parent >= 0)
    under[has] = acc[parent[has]]
    return np.flatnonzero(under)


@analyzer("zero_grad", needs=("cpu_op",), provides=PROVIDES)
def zero_grad(view: TraceView) -> dict[str, Any]:
    """Gradients zeroed with zero_() each step, and the in-place accumulation into them."""
    ops = op_rows(view)
    zero_rows, annotations = _zeroing_rows(view, ops)
    add_rows = _accumulate_rows(ops)
    if len(zero_rows) == 0 or len(add_rows) == 0:
        return {"zero_grad.calls_per_step": len(zero_rows) / max(view.step_count, 1), "zero_grad.ms": 0.0,
                "zero_grad.share": 0.0}
    steps = max(view.step_count, 1)
    zero_cost = cost_ns(view, zero_rows)
    add_cost = cost_ns(view, add_rows)
    zero_ns = float(zero_cost.sum())
    if annotations is not None and cost_basis(view) == "host":  # the Python around each zero_() goes too
        zero_ns = max(zero_ns, float(view.host["dur"].to_numpy()[annotations].sum()))
    zero_ms = zero_ns / steps / NS_PER_MS
    # with k backward passes per step (gradient accumulation) only the first adds into zeroed gradients
    accumulate_ms = float(add_cost.sum()) / steps / NS_PER_MS / _backward_passes(view)
    mean = step_ms(view)
    total = zero_ms + accumulate_ms
    sites = by_site(view, zero_rows, zero_cost, top=1)
    return {
        "zero_grad.calls_per_step": len(zero_rows) / steps,
        "zero_grad.zero_ms": zero_ms,
        "zero_grad.accumulate_ms": accumulate_ms,
        "zero_grad.ms": total,
        "zero_grad.share": total / mean if mean else 0.0,
        "zero_grad.by_optimizer": annotations is not None,
        "zero_grad.site": sites[0]["site"] if sites and sites[0]["site"] else None,
        "zero_grad.basis": cost_basis(view),
    }


def _backward_passes(view: TraceView) -> float:
    """Backward passes per step: the collector's backward ranges, else one (the torch fallback has no ranges)."""
    how, frame = view.phase_evidence.get("backward", ("", None))
    if how != "advisor labels" or frame is None or not view.step_count:
        return 1.0
    inside = view.step_of(frame["ts"].to_numpy()) >= 0
    return max(float(inside.sum()) / view.step_count, 1.0)
