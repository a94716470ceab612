"""Where each training phase ran: merged time intervals on the main thread.

Each phase is found from the best evidence the trace has, in this order:

============  =======================================  ===========================================
phase         collector labels (exact)                 otherwise (traces recorded elsewhere)
============  =======================================  ===========================================
dataloader    ``advisor::dataloader``                  ``enumerate(DataLoader)#...`` annotations
optimizer     ``advisor::optimizer``                   ``Optimizer.step#`` / ``Optimizer.zero_grad#``
backward      ``advisor::backward``                    ``autograd::engine::evaluate_function`` ops
forward       ``advisor::forward``                     ``## forward ##``-style annotations, then
                                                       top-level ``nn.Module:`` frames, then
                                                       inferred: from the first to the last
                                                       autograd-recorded op before backward
============  =======================================  ===========================================

Where phases overlap, the earlier in :data:`PHASE_ORDER` wins, so a step's
time is split once: a forward that runs inside the optimizer (LBFGS) is
optimizer time.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from advisor.analyze import intervals
from advisor.naming import PHASE_NAMES

if TYPE_CHECKING:
    from advisor.analyze.view import TraceView

__all__ = ["PHASE_ORDER", "phase_intervals", "phase_sources", "split_step"]

PHASE_ORDER = ("dataloader", "optimizer", "backward", "forward")
_EMPTY = (np.empty(0, "int64"), np.empty(0, "int64"))
_FORWARD_ANNOTATION = re.compile(r"(^|[^a-z])forward([^a-z]|$)", re.IGNORECASE)


def _merged(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return intervals.union(frame["ts"].to_numpy(), frame["end"].to_numpy())


def _found(view: TraceView) -> dict[str, tuple[str, pd.DataFrame]]:
    """phase -> (how it was found, the events that mark it)."""
    e = view.events
    names = e["name"].astype(str)
    ua = (e["cat"] == "user_annotation")
    out: dict[str, tuple[str, pd.DataFrame]] = {}
    for phase, label in PHASE_NAMES.items():
        marked = e[ua & (names == label)]
        if len(marked):
            out[phase] = ("advisor labels", marked)
    fallbacks = {
        "dataloader": e[ua & names.str.startswith("enumerate(DataLoader)#")],
        "optimizer": e[ua & (names.str.startswith("Optimizer.step#") | names.str.startswith("Optimizer.zero_grad#"))],
        "backward": e[(e["cat"] == "cpu_op") & names.str.startswith("autograd::engine::evaluate_function")],
    }
    for phase, frame in fallbacks.items():
        if phase not in out and len(frame):
            out[phase] = ("torch annotations", frame)
    if "forward" not in out:
        marked = e[ua & names.map(lambda n: bool(_FORWARD_ANNOTATION.search(n)) and not n.startswith("advisor::"))]
        modules = e[(e["cat"] == "python_function") & names.str.startswith("nn.Module: ") & (e["tid"] == view.main_tid)]
        if len(marked):
            out["forward"] = ("forward annotations", marked)
        elif len(modules):
            out["forward"] = ("nn.Module frames", modules)
    return out


def phase_intervals(view: TraceView) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    found = _found(view)
    result = {phase: _merged(frame) for phase, (_, frame) in found.items()}
    if "forward" not in result:
        inferred = _infer_forward(view, result)
        if len(inferred[0]):
            result["forward"] = inferred
    return result


def phase_sources(view: TraceView) -> dict[str, str]:
    found = _found(view)
    out = {phase: how for phase, (how, _) in found.items()}
    if "forward" not in out and "forward" in view.phase_intervals:
        out["forward"] = "inferred from autograd-recorded ops"
    return {phase: out.get(phase, "not seen") for phase in PHASE_NAMES}


def _infer_forward(view: TraceView, known: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Per step: from the first to the last autograd-recorded top-level op before backward starts."""
    e = view.events
    ops = e[(e["cat"] == "cpu_op") & (e["tid"] == view.main_tid) & (e["seq"] >= 0)]
    if len(ops) == 0:
        return _EMPTY
    ts, end = ops["ts"].to_numpy(), ops["end"].to_numpy()
    other_s, other_e = intervals.union(
        np.concatenate([known[p][0] for p in known] or [np.empty(0, "int64")]),
        np.concatenate([known[p][1] for p in known] or [np.empty(0, "int64")]),
    )
    if len(other_s):
        k = np.searchsorted(other_s, ts, side="right") - 1
        inside = (k >= 0) & (ts < other_e[np.maximum(k, 0)])
        ts, end = ts[~inside], end[~inside]
    back_s = known.get("backward", _EMPTY)[0]
    starts, ends = [], []
    for _, step in view.steps.iterrows():
        lo, hi = int(step["start"]), int(step["end"])
        later = back_s[(back_s >= lo) & (back_s < hi)]
        stop = int(later.min()) if len(later) else hi
        sel = (ts >= lo) & (end <= stop)
        if sel.any():
            starts.append(int(ts[sel].min()))
            ends.append(int(end[sel].max()))
    return np.array(starts, "int64"), np.array(ends, "int64")


def split_step(view: TraceView, lo: int, hi: int) -> dict[str, int]:
    """Nanoseconds of [lo, hi) in each phase, by priority, plus ``other``."""
    out: dict[str, int] = {}
    acc_s: list[np.ndarray] = []
    acc_e: list[np.ndarray] = []
    before = 0
    for phase in PHASE_ORDER:
        s, e = view.phase_intervals.get(phase, _EMPTY)
        s, e = intervals.clip(s, e, lo, hi)
        acc_s.append(s)
        acc_e.append(e)
        now = intervals.covered(np.concatenate(acc_s), np.concatenate(acc_e))
        out[phase] = now - before
        before = now
    out["other"] = max(hi - lo - before, 0)
    return out
