"""Ranks compared: per-rank step figures, the straggler, and the time the others wait for it.

In synchronous data-parallel training every rank waits at each collective
for the last rank to arrive, so all ranks show about the same step time;
what differs is how the step divides between *work* and *waiting in
collectives*. Per rank, over its analysed steps:

- ``collective_ms``: host time per step inside collective operations, the
  union over all host threads of the backend's own ranges (``gloo:*``,
  ``nccl:*``, ``mpi:*``, ...) and the ``c10d::*`` / ``record_param_comms``
  ops. With gloo the whole exchange is host time; with NCCL the host only
  enqueues, and the wait shows on the GPU (the GPU-side ``ranks.gpu.*``
  facts, not this module).
- ``busy_ms``: step time minus collective time: the rank's own work.
- ``wait_ms``: collective time beyond the least any rank spent there in
  the same step (:mod:`advisor.analyze.ranks.waits`). The rank that
  arrives last waits least, so its collective time is the cost of the
  exchange itself, and the rest is waiting for a slower rank.

The *straggler* is the rank with the most work per step (the others wait
for it); the *slowest* rank is the one with the longest steps (in lock-step
training they are close, so it says little on its own). Phase columns are
the phase's time outside collectives, so a row adds up:
``step = dataloader + forward + backward + optimizer + other + collective``.
"""

from __future__ import annotations

import re
from statistics import median
from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze import intervals
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.per_step import NS_PER_MS
from advisor.analyze.framework.phases import split_step
from advisor.analyze.framework.view import TraceView
from advisor.analyze.ranks.digest import rank_part
from advisor.analyze.ranks.rankset import RankSet
from advisor.analyze.ranks.waits import matched_waits
from advisor.analyze.registry import analyzer
from advisor.naming import PHASE_ORDER, STEP_PARTS as PHASES

__all__ = ["collective_intervals", "rank_figures"]

#: the backend's own range around each collective, on the host (gpu_user_annotation is the GPU's copy)
COLLECTIVE_RANGE = re.compile(r"^(gloo|nccl|mpi|ucc|xccl|hccl|rccl):")
COLLECTIVE_OP = re.compile(r"^(c10d::|record_param_comms$)")

PROVIDES = (
    FactSpec("ranks.count", "count", "number of rank traces compared"),
    FactSpec("ranks.step_ms", "table", "per rank: step time and how it divides into work and collectives", columns={
        "rank": "count: rank", "steps": "count: analysed steps", "step_ms": "ms: mean step time",
        "min_ms": "ms: shortest step", "max_ms": "ms: longest step",
        "busy_ms": "ms: step time outside collectives (the rank's own work)",
        "collective_ms": "ms: host time in collectives per step",
        "wait_ms": "ms: collective time beyond the least any rank spent there in the same step (waiting for slower "
                   "ranks)",
        **{f"{p}_ms": f"ms: time in {p} per step, outside collectives" for p in PHASES},
    }),
    FactSpec("ranks.step_time_ms", "ms", "mean step time over all ranks"),
    FactSpec("ranks.spread", "ratio", "(longest - shortest) / mean of the ranks' mean step times"),
    FactSpec("ranks.slowest", "count", "the rank with the longest mean step"),
    FactSpec("ranks.straggler", "count", "the rank with the most work outside collectives: the others wait for it"),
    FactSpec("ranks.straggler_excess_ms", "ms", "the straggler's work per step beyond the median of the other ranks"),
    FactSpec("ranks.straggler_phase", "text", "the phase where the straggler's extra work is largest"),
    FactSpec("ranks.straggler_phase_ms", "ms", "the straggler's extra work per step in that phase"),
    FactSpec("ranks.straggler_phase_share", "fraction",
             "that phase's part of the straggler's extra work (its extra in the phase / its whole extra)"),
    FactSpec("ranks.collective_wait_ms", "ms", "mean wait per step in collectives of the ranks other than the straggler"),
    FactSpec("ranks.collective_wait_share", "fraction", "that wait as a share of the mean step time"),
    FactSpec("ranks.collective_ms", "ms", "mean host time per step in collectives, over all ranks"),
)


def collective_intervals(view: TraceView) -> tuple[np.ndarray, np.ndarray]:
    """Merged host intervals spent in collectives, over all threads of one trace."""
    e = view.events
    is_range = (e["cat"] == "user_annotation").to_numpy() & _name_matches(e["name"], COLLECTIVE_RANGE)
    is_op = (e["cat"] == "cpu_op").to_numpy() & _name_matches(e["name"], COLLECTIVE_OP)
    sel = e[is_range | is_op]
    return intervals.union(sel["ts"].to_numpy(), sel["end"].to_numpy())


def _name_matches(names: pd.Series, pattern: re.Pattern[str]) -> np.ndarray:
    """``pattern.match`` of every row's name, matched once per distinct name (a few hundred, for millions of
    rows: the loader's name column is a Categorical)."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return names.astype(str).str.match(pattern).to_numpy(dtype=bool)
    labels = names.cat.categories
    hit = np.fromiter((pattern.match(str(n)) is not None for n in labels), dtype=bool, count=len(labels))
    return np.append(hit, False)[names.cat.codes.to_numpy()]  # code -1 (no name) matches nothing


def _overlap(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Length of the intersection of two interval sets: |A| + |B| - |A u B|."""
    both = intervals.covered(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))
    return intervals.covered(*a) + intervals.covered(*b) - both


def _split_collectives(view: TraceView, coll: tuple[np.ndarray, np.ndarray], lo: int, hi: int) -> dict[str, int]:
    """Nanoseconds of the collective time in [lo, hi) falling in each phase, by the phases' priority."""
    c = intervals.clip(*coll, lo, hi)
    total = int((c[1] - c[0]).sum())
    out: dict[str, int] = {}
    acc: list[tuple[np.ndarray, np.ndarray]] = []
    before = 0
    for phase in PHASE_ORDER:
        acc.append(intervals.clip(*view.phase_intervals.get(phase, (np.empty(0, "int64"),) * 2), lo, hi))
        merged = intervals.union(np.concatenate([s for s, _ in acc]), np.concatenate([e for _, e in acc]))
        now = _overlap(merged, c)
        out[phase] = now - before
        before = now
    out["other"] = total - before
    out["total"] = total
    return out


def rank_figures(rank: int, view: TraceView) -> dict[str, Any]:
    """One rank's mean figures per analysed step (ms)."""
    coll = collective_intervals(view)
    sums = {key: 0.0 for key in ("step", "collective", *PHASES)}
    by_step: dict[int, int] = {}
    durations = view.steps["dur"].to_numpy() / NS_PER_MS
    for step in view.steps.itertuples(index=False):
        lo, hi = int(step.start), int(step.end)
        split = split_step(view, lo, hi)
        in_coll = _split_collectives(view, coll, lo, hi)
        sums["step"] += hi - lo
        sums["collective"] += in_coll["total"]
        by_step[int(step.step)] = in_coll["total"]
        for phase in PHASES:
            sums[phase] += split[phase] - in_coll[phase]
    n = max(view.step_count, 1)
    mean = {key: value / n / NS_PER_MS for key, value in sums.items()}
    return {
        "rank": rank, "steps": int(view.step_count if view.profiler_steps_present else 0),
        "step_ms": mean["step"], "min_ms": float(durations.min()) if len(durations) else 0.0,
        "max_ms": float(durations.max()) if len(durations) else 0.0,
        "busy_ms": mean["step"] - mean["collective"], "collective_ms": mean["collective"],
        **{f"{p}_ms": mean[p] for p in PHASES},
        "collective_ns_by_step": by_step,
    }


@rank_part("figures")
def _figures(view: TraceView) -> dict[str, Any]:
    """:func:`rank_figures` with rank -1: the rank set numbers the ranks (file order when the traces' repeat)."""
    return rank_figures(-1, view)


def _share(part: float, whole: float) -> float:
    """``part / whole`` within [0, 1]; 0 when there is no extra work to share."""
    return min(max(part / whole, 0.0), 1.0) if whole > 0 else 0.0


@analyzer("ranks", needs=("ranks",), provides=PROVIDES, scope="ranks")
def ranks(rank_set: RankSet) -> dict[str, Any]:
    """Compare the ranks: step times, the straggler, and the time the others wait for it in collectives."""
    rows = [{**figures, "rank": rank} for rank, figures in zip(rank_set.ranks, rank_set.part("figures"))]
    waits = matched_waits([r["collective_ns_by_step"] for r in rows], [r["collective_ms"] for r in rows])
    for r, wait_ms in zip(rows, waits):
        r["wait_ms"] = wait_ms
    step = [r["step_ms"] for r in rows]
    mean_step = sum(step) / len(step)
    slowest = max(rows, key=lambda r: r["step_ms"])
    straggler = max(rows, key=lambda r: r["busy_ms"])
    others = [r for r in rows if r is not straggler]
    excess = {p: straggler[f"{p}_ms"] - median(r[f"{p}_ms"] for r in others) for p in PHASES}
    phase = max(excess, key=lambda p: excess[p])
    wait = sum(r["wait_ms"] for r in others) / len(others)
    extra = straggler["busy_ms"] - median(r["busy_ms"] for r in others)
    table = [{k: r[k] for k in ("rank", "steps", "step_ms", "min_ms", "max_ms", "busy_ms", "collective_ms", "wait_ms",
                                *(f"{p}_ms" for p in PHASES))} for r in rows]
    return {
        "ranks.count": len(rows),
        "ranks.step_ms": records(table),
        "ranks.step_time_ms": mean_step,
        "ranks.spread": (max(step) - min(step)) / mean_step if mean_step else 0.0,
        "ranks.slowest": slowest["rank"],
        "ranks.straggler": straggler["rank"],
        "ranks.straggler_excess_ms": extra,
        "ranks.straggler_phase": phase,
        "ranks.straggler_phase_ms": excess[phase],
        "ranks.straggler_phase_share": _share(excess[phase], extra),
        "ranks.collective_wait_ms": wait,
        "ranks.collective_wait_share": wait / mean_step if mean_step else 0.0,
        "ranks.collective_ms": sum(r["collective_ms"] for r in rows) / len(rows),
    }
