"""Host work inside the steps that the profiler sees only through the collector's ranges.

- DataLoader worker restarts: each new multi-process iterator (``iter(loader)``
  at every epoch without ``persistent_workers``) is a
  :data:`~advisor.naming.WORKERS_START_RANGE` range. What the restarts cost is
  how much longer the steps that hold one take than the median step without:
  the old workers are stopped, the new ones start, set up their copy of the
  dataset and prepare their first batch, and while they set up they also take
  cores from the training loop. When every step holds a restart, the cost is
  the range itself plus the extra wait of the batches just before and after it,
  beyond the median wait for a batch.
- Checkpoints: each ``torch.save`` in the steps is a
  :data:`~advisor.naming.SAVE_RANGE` range; its duration is the time the step
  is held up by serialising and writing.

Both ranges come only from :mod:`advisor.collect.host_hooks`: a trace recorded
without the collector has none, and these facts are absent.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze.findings import FactSpec
from advisor.analyze.framework.per_step import NS_PER_MS, call_site_of_rows, site, step_ms
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer
from advisor.naming import PHASE_NAMES, SAVE_RANGE, WORKERS_START_RANGE

__all__ = ["checkpoints", "worker_restarts"]

RESTART_FACTS = (
    FactSpec("dataloader.worker_starts_per_step", "count", "times per step a DataLoader started new worker processes"),
    FactSpec("dataloader.worker_start_ms", "ms", "time per step the restarts cost: how much longer the steps with one "
                                                 "take than the median step without"),
    FactSpec("dataloader.worker_start_share", "fraction", "worker_start_ms as a share of the step"),
    FactSpec("dataloader.worker_start_steps", "count", "analysed steps that hold a restart: with one, the window "
             "shows what a restart costs but not how often (an epoch's length)"),
    FactSpec("dataloader.worker_start_each_ms", "ms", "what one restart cost (worker_start_ms over the restarts)"),
    FactSpec("dataloader.worker_start_site", "text", "the user's line that starts the DataLoader's iteration"),
)

CHECKPOINT_FACTS = (
    FactSpec("checkpoint.saves_per_step", "count", "torch.save calls per step"),
    FactSpec("checkpoint.steps_with_save", "count", "analysed steps that hold a torch.save call: with one, the "
             "window shows a save but not how often the script saves"),
    FactSpec("checkpoint.ms", "ms", "time per step in torch.save"),
    FactSpec("checkpoint.share", "fraction", "checkpoint.ms as a share of the step"),
    FactSpec("checkpoint.longest_ms", "ms", "the longest single torch.save"),
    FactSpec("checkpoint.site", "text", "the user's line that calls torch.save"),
)


def _ranges(view: TraceView, name: str) -> np.ndarray:
    host = view.host
    return np.flatnonzero(((host["step"] >= 0) & (host["name"] == name)).to_numpy())


def _steps_holding(view: TraceView, rows: np.ndarray) -> int:
    """How many analysed steps hold one of ``rows`` (host rows inside the steps, as :func:`_ranges` gives)."""
    return len(np.unique(view.host["step"].to_numpy()[rows]))


def _site(view: TraceView, rows: np.ndarray) -> str | None:
    where = call_site_of_rows(view, rows)
    return site(*where) if where else None


@analyzer("worker_restarts", needs=("user_annotation",), provides=RESTART_FACTS)
def worker_restarts(view: TraceView) -> dict[str, Any]:
    """How often the DataLoader started new workers in the steps, and what each start cost."""
    starts = _ranges(view, WORKERS_START_RANGE)
    if len(starts) == 0:
        return {}
    cost = _restart_steps_excess(view, starts)
    if cost is None:
        cost = _restart_waits(view, starts)
    steps = max(view.step_count, 1)
    cost_ms = cost / steps / NS_PER_MS
    step = step_ms(view)
    out: dict[str, Any] = {
        "dataloader.worker_starts_per_step": round(len(starts) / steps, 3),
        "dataloader.worker_start_ms": round(cost_ms, 3),
        "dataloader.worker_start_share": round(cost_ms / step, 4) if step else None,
        "dataloader.worker_start_steps": _steps_holding(view, starts),
        "dataloader.worker_start_each_ms": round(cost / len(starts) / NS_PER_MS, 3),
    }
    where = _site(view, starts)
    if where:
        out["dataloader.worker_start_site"] = where
    return out


def _restart_steps_excess(view: TraceView, starts: np.ndarray) -> float | None:
    """How much longer the steps with a restart take than the median step without one (ns, summed);
    None when every step has one."""
    with_start = np.unique(view.host["step"].to_numpy()[starts])
    durations = view.steps["dur"].to_numpy().astype("float64")
    others = np.setdiff1d(np.arange(len(durations)), with_start)
    if len(others) == 0:
        return None
    return float(np.maximum(durations[with_start] - np.median(durations[others]), 0).sum())


def _restart_waits(view: TraceView, starts: np.ndarray) -> float:
    """The restarts' ranges plus the extra wait of the batches around them (ns, summed)."""
    host = view.host
    ts, end, dur = (host[c].to_numpy() for c in ("ts", "end", "dur"))
    fetches = _ranges(view, PHASE_NAMES["dataloader"])
    fetches = fetches[np.argsort(ts[fetches], kind="stable")]
    around = set()
    for start in starts:
        after = np.searchsorted(ts[fetches], ts[start])  # the first fetch that begins after the start
        if after < len(fetches):
            around.add(int(fetches[after]))
        if after > 0 and end[fetches[after - 1]] <= ts[start]:
            around.add(int(fetches[after - 1]))
    normal = [int(f) for f in fetches if int(f) not in around]
    typical = float(np.median(dur[normal])) if normal else 0.0
    return float(dur[starts].sum()) + sum(max(0.0, float(dur[f]) - typical) for f in around)


@analyzer("checkpoints", needs=("user_annotation",), provides=CHECKPOINT_FACTS)
def checkpoints(view: TraceView) -> dict[str, Any]:
    """torch.save calls inside the steps: how many, how long, and from which line."""
    saves = _ranges(view, SAVE_RANGE)
    if len(saves) == 0:
        return {}
    dur = view.host["dur"].to_numpy()[saves]
    steps = max(view.step_count, 1)
    total_ms = float(dur.sum()) / steps / NS_PER_MS
    step = step_ms(view)
    out: dict[str, Any] = {
        "checkpoint.saves_per_step": round(len(saves) / steps, 3),
        "checkpoint.steps_with_save": _steps_holding(view, saves),
        "checkpoint.ms": round(total_ms, 3),
        "checkpoint.share": round(total_ms / step, 4) if step else None,
        "checkpoint.longest_ms": round(float(dur.max()) / NS_PER_MS, 3),
    }
    where = _site(view, saves)
    if where:
        out["checkpoint.site"] = where
    return out
