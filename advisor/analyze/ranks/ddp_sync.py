"""DDP's gradient all-reduce per micro-batch: how many of the backward passes of one optimizer step sync.

DistributedDataParallel all-reduces each gradient bucket from a hook that
runs when the bucket's gradients are ready in backward: in the trace, a
``c10d::allreduce_`` whose enclosing operator is an
``autograd::engine::evaluate_function`` (on the training thread with gloo on
the CPU, on the autograd thread with NCCL). With gradient accumulation only
the last micro-batch before ``optimizer.step()`` needs it; ``no_sync()``
skips the others.

Per optimizer step (the time from the end of one ``Optimizer.step#`` range to
the end of the next; the first from the window's start):

- *micro-batches*: outermost ``DistributedDataParallel.forward`` ranges;
- *synced* micro-batches: those whose span (from their forward to the next
  one, or to the optimizer step) issues a gradient all-reduce;
- *all-reduce time*: in each synced span, the host time in collectives over
  all threads (gloo runs the exchange on its own threads; see
  :func:`~advisor.analyze.ranks.host.collective_intervals`), or, with
  communication kernels, the time those kernels run with no compute kernel
  beside them (exposed).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze import intervals
from advisor.analyze.findings import FactSpec
from advisor.analyze.framework.per_step import NS_PER_MS
from advisor.analyze.framework.view import TraceView
from advisor.analyze.ranks.host import collective_intervals
from advisor.analyze.registry import analyzer

__all__ = ["ddp_sync"]

DDP_FORWARD = "DistributedDataParallel.forward"
GRAD_ALLREDUCE = frozenset({"c10d::allreduce_", "c10d::allreduce_coalesced_"})

PROVIDES = (
    FactSpec("ddp.micro_batches_per_step", "ratio", "DDP forward passes per optimizer step (micro-batches)"),
    FactSpec("ddp.synced_micro_batches_per_step", "ratio",
             "micro-batches per optimizer step whose backward all-reduces the gradients"),
    FactSpec("ddp.grad_allreduces_per_step", "count", "gradient all-reduce calls (buckets) per optimizer step"),
    FactSpec("ddp.grad_allreduce_ms", "ms",
             "time per optimizer step in the gradient all-reduces: host time in collectives (gloo), or exposed "
             "communication kernel time (NCCL)"),
    FactSpec("ddp.grad_allreduce_share", "fraction", "that time as a share of the optimizer step"),
    FactSpec("ddp.optimizer_steps", "count", "optimizer steps the figures are averaged over"),
    FactSpec("ddp.time_basis", "text", "what the all-reduce time counts: host collectives or exposed kernels"),
)


def _outermost(view: TraceView, mask: np.ndarray) -> np.ndarray:
    """Rows in ``mask`` not nested in another row of ``mask`` (a range recorded twice counts once)."""
    host = view.host
    inside = intervals.enclosing(host["parent"].to_numpy(), host["depth"].to_numpy(), mask)
    return np.flatnonzero(mask & (inside < 0))


def _grad_allreduces(view: TraceView) -> np.ndarray:
    """Start times of the all-reduces DDP's backward hooks issue."""
    host = view.host
    names = view.host_name_texts
    is_hook = view.host_names(lambda n: n.startswith("autograd::engine::evaluate_function"), bool)
    under_hook = intervals.enclosing(host["parent"].to_numpy(), host["depth"].to_numpy(), is_hook) >= 0
    rows = np.flatnonzero(np.isin(names, list(GRAD_ALLREDUCE)) & under_hook)
    return np.sort(host["ts"].to_numpy()[rows])


def _exposed_comm(view: TraceView) -> tuple[Any, ...] | None:
    """The communication kernels' launch times, starts and ends, and the intervals where compute hides them."""
    if not view.trace.has_gpu or len(view.gpu.in_window) == 0:
        return None
    ops = view.gpu.device_ops
    comm = (ops["kind"] == "comm").to_numpy()
    if not comm.any():
        return None
    ts, end = ops["ts"].to_numpy("int64"), ops["end"].to_numpy("int64")
    compute = (ops["kind"] == "compute").to_numpy()
    cs, ce = intervals.union(ts[comm], end[comm])
    ps, pe = intervals.union(ts[compute], end[compute])
    hidden = intervals.intersect(cs, ce, ps, pe)
    return ops["launch_ts"].to_numpy("int64")[comm], ts[comm], end[comm], hidden


def _comm_ns(exposed: Any, lo: int, hi: int) -> int:
    """Exposed time of the communication kernels launched in [lo, hi)."""
    launch, ts, end, hidden = exposed
    sel = (launch >= lo) & (launch < hi)
    if not sel.any():
        return 0
    mine = intervals.union(ts[sel], end[sel])
    covered = intervals.covered(*mine)
    both = intervals.intersect(*mine, *hidden)
    return covered - int((both[1] - both[0]).sum())


@analyzer("ddp_sync", needs=("cpu_op",), provides=PROVIDES)
def ddp_sync(view: TraceView) -> dict[str, Any]:
    """Micro-batches per optimizer step, how many of them all-reduce the gradients, and what that costs."""
    names = view.host_name_texts
    host = view.host
    forwards = _outermost(view, names == DDP_FORWARD)
    reduces = _grad_allreduces(view)
    if len(forwards) == 0 or len(reduces) == 0:
        return {}
    steps = _outermost(view, view.host_names(lambda n: n.startswith("Optimizer.step#"), bool))
    if len(steps) == 0:
        return {}
    ts, end = host["ts"].to_numpy(), host["end"].to_numpy()
    ends = np.sort(end[steps])
    bounds = np.concatenate([[view.window[0]], ends])
    starts = np.sort(ts[forwards])
    exposed = _exposed_comm(view)
    coll = collective_intervals(view)
    cycles = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        mine = starts[(starts >= lo) & (starts < hi)]
        if len(mine) == 0:
            continue
        spans = np.append(mine, hi)
        synced, calls, ns = 0, 0, 0
        for a, b in zip(spans[:-1], spans[1:]):
            n = int(((reduces >= a) & (reduces < b)).sum())
            if n == 0:
                continue
            synced, calls = synced + 1, calls + n
            ns += _comm_ns(exposed, a, b) if exposed is not None else \
                intervals.covered(*intervals.clip(*coll, int(a), int(b)))
        cycles.append((len(mine), synced, calls, ns, hi - lo))
    if not cycles:
        return {}
    count, synced, calls, ns, dur = (np.array(c, dtype=float) for c in zip(*cycles))
    mean_ns = float(ns.mean())
    return {
        "ddp.micro_batches_per_step": float(count.mean()),
        "ddp.synced_micro_batches_per_step": float(synced.mean()),
        "ddp.grad_allreduces_per_step": float(calls.mean()),
        "ddp.grad_allreduce_ms": mean_ns / NS_PER_MS,
        "ddp.grad_allreduce_share": mean_ns / float(dur.mean()) if dur.mean() > 0 else 0.0,
        "ddp.optimizer_steps": len(cycles),
        "ddp.time_basis": "exposed communication kernels" if exposed is not None else "host collectives",
    }
