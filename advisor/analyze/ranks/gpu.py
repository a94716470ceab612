"""Across rank traces: GPU compute imbalance, the straggler rank, and time waiting in collectives.

Each rank is measured like the single-rank GPU analysis (its own window, its
busiest device). In synchronous data parallelism every rank waits at each
collective for the slowest one, so:

- the *straggler* is the rank with the most compute time per step;
- a rank's *collective wait* is its communication time beyond the smallest
  communication time of any rank in the same step
  (:mod:`advisor.analyze.ranks.waits`): the same collectives take longer on
  ranks that arrive early, because their kernels start and then wait;
- *imbalance* is (most - least compute per step) / mean compute per step.

This analyzer has the ``ranks`` scope (see :mod:`advisor.analyze.registry`):
it is given a :class:`~advisor.analyze.ranks.rankset.RankSet`, only when several
rank traces are given. The host-side step times per rank are
:mod:`advisor.analyze.ranks.host`'s business.
"""

from __future__ import annotations

from typing import Any

from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.gpu_time import busy_breakdown
from advisor.analyze.framework.per_step import NS_PER_MS
from advisor.analyze.framework.view import TraceView
from advisor.analyze.ranks.comm import comm_overlap
from advisor.analyze.ranks.digest import rank_part
from advisor.analyze.ranks.rankset import RankSet
from advisor.analyze.ranks.waits import matched_waits
from advisor.analyze.registry import analyzer

__all__ = ["rank_row"]

PROVIDES = (
    FactSpec("ranks.gpu.count", "count", "rank traces with GPU work"),
    FactSpec("ranks.gpu.table", "table", "GPU figures of each rank", columns={
        "rank": "count: rank", "window_ms": "ms: window per step", "busy_fraction": "fraction: of its window",
        "compute_ms": "ms: compute per step", "comm_ms": "ms: communication per step",
        "exposed_comm_ms": "ms: communication per step not overlapped by compute", "idle_ms": "ms: idle per step",
        "wait_ms": "ms: communication per step beyond the least of any rank in the same step (waiting for others)",
    }),
    FactSpec("ranks.gpu.compute_imbalance", "ratio", "(most - least compute per step) / mean compute per step"),
    FactSpec("ranks.gpu.straggler", "count", "the rank with the most compute per step"),
    FactSpec("ranks.gpu.straggler_compute_ms", "ms", "its compute per step"),
    FactSpec("ranks.gpu.fastest_compute_ms", "ms", "the least compute per step of any rank"),
    FactSpec("ranks.gpu.busy_spread", "fraction", "most - least busy fraction of any rank"),
    FactSpec("comm.wait_ms", "ms", "collective wait per step of the rank that waits most"),
    FactSpec("comm.wait_rank", "count", "the rank that waits most in collectives"),
    FactSpec("comm.wait_share", "fraction", "that wait as a share of that rank's window"),
)


@rank_part("gpu_row")
def rank_row(view: TraceView) -> dict[str, Any] | None:
    """One rank's GPU figures per step, or None when it has no GPU work in its window."""
    if not view.trace.has_gpu:
        return None
    links = view.gpu
    if len(links.in_window) == 0 or links.window_ns <= 0:
        return None
    ops = links.device_ops
    b = busy_breakdown(ops, links.lo, links.hi)
    comm, overlapped = comm_overlap(ops, links.lo, links.hi)
    per = links.steps * NS_PER_MS
    by_step = {int(s.step): comm_overlap(ops, int(s.start), int(s.end))[0]
               for s in view.steps.itertuples(index=False)} if view.profiler_steps_present else {}
    return {"comm_ns_by_step": by_step,"rank": view.trace.rank, "window_ms": b["window"] / per, "busy_fraction": b["busy"] / b["window"],
            "compute_ms": b["compute"] / per, "comm_ms": comm / per, "exposed_comm_ms": (comm - overlapped) / per,
            "idle_ms": b["idle"] / per}


@analyzer("gpu_ranks", provides=PROVIDES, scope="ranks")
def gpu_ranks(rank_set: RankSet) -> dict[str, Any]:
    """Compute imbalance, straggler and collective wait across ranks."""
    rows = [r for r in rank_set.part("gpu_row") if r is not None]
    if len(rows) < 2:
        return {"ranks.gpu.count": len(rows)}
    waits = matched_waits([r.pop("comm_ns_by_step") for r in rows], [r["comm_ms"] for r in rows])
    for r, wait_ms in zip(rows, waits):
        r["wait_ms"] = wait_ms
    compute = [r["compute_ms"] for r in rows]
    mean = sum(compute) / len(compute)
    straggler = max(rows, key=lambda r: r["compute_ms"])
    waiter = max(rows, key=lambda r: r["wait_ms"])
    busy = [r["busy_fraction"] for r in rows]
    return {
        "ranks.gpu.count": len(rows),
        "ranks.gpu.table": records(sorted(rows, key=lambda r: r["rank"])),
        "ranks.gpu.compute_imbalance": (max(compute) - min(compute)) / mean if mean else 0.0,
        "ranks.gpu.straggler": straggler["rank"],
        "ranks.gpu.straggler_compute_ms": straggler["compute_ms"],
        "ranks.gpu.fastest_compute_ms": min(compute),
        "ranks.gpu.busy_spread": max(busy) - min(busy),
        "comm.wait_ms": waiter["wait_ms"],
        "comm.wait_rank": waiter["rank"],
        "comm.wait_share": waiter["wait_ms"] / waiter["window_ms"] if waiter["window_ms"] else 0.0,
    }
