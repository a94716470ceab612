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

Where phases overlap, the innermost wins, so a step's time is split once:
:data:`advisor.naming.PHASE_ORDER` lists them from the innermost. A forward and backward
that run inside ``optimizer.step(closure)`` (LBFGS, PyTorch Lightning's
automatic optimization) are forward and backward time, and the optimizer
phase is what is left of the step call: the update. (The collector closes
its optimizer range while a closure runs, so its own labels never overlap;
traces recorded elsewhere carry ``Optimizer.step#`` around the closure.) A
forward recomputed inside backward (activation checkpointing) is backward
time. Nothing nests in data loading.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from advisor.analyze import intervals
from advisor.analyze.framework import event_names as by_name
from advisor.analyze.framework.trace_tables import TraceTables
from advisor.naming import LABEL_PREFIX, PHASE_NAMES, PHASE_ORDER

__all__ = ["found_phases", "phase_intervals", "phase_sources", "split_step"]

_EMPTY = (np.empty(0, "int64"), np.empty(0, "int64"))
_FORWARD_ANNOTATION = re.compile(r"(^|[^a-z])forward([^a-z]|$)", re.IGNORECASE)


def _merged(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return intervals.union(frame["ts"].to_numpy(), frame["end"].to_numpy())


def found_phases(view: TraceTables) -> dict[str, tuple[str, pd.DataFrame]]:
    """phase -> (how it was found, the events that mark it: their name, ts, end and tid)."""
    e = view.events
    names = e["name"]
    ua = (e["cat"] == "user_annotation").to_numpy()
    cpu_op = (e["cat"] == "cpu_op").to_numpy()
    marks = e[["name", "ts", "end", "tid"]]  # each filter below copies only these columns
    out: dict[str, tuple[str, pd.DataFrame]] = {}
    # phases as small ints per row: comparing them is cheap, comparing texts per row is not
    phases = list(PHASE_NAMES)
    by_label = {label: i for i, label in enumerate(PHASE_NAMES.values())}
    labels = by_name.mapped(names, lambda n: by_label.get(n, -1), "int8")
    for i, phase in enumerate(phases):
        marked = ua & (labels == i)
        if marked.any():
            out[phase] = ("advisor labels", marks[marked])
    fallback = by_name.mapped(names, lambda n: phases.index(p) if (p := _fallback_phase(n)) else -1, "int8")
    fallbacks = {
        "dataloader": ua & (fallback == phases.index("dataloader")),
        "optimizer": ua & (fallback == phases.index("optimizer")),
        "backward": cpu_op & (fallback == phases.index("backward")),
    }
    for phase, mask in fallbacks.items():
        if phase not in out and mask.any():
            out[phase] = ("torch annotations", marks[mask])
    if "forward" not in out:
        marked = ua & by_name.where(names, _is_forward_annotation)
        if marked.any():
            out["forward"] = ("forward annotations", marks[marked])
        else:
            modules = ((e["cat"] == "python_function").to_numpy() & by_name.where(names, _is_module_frame)
                       & (e["tid"] == view.main_tid).to_numpy())
            if modules.any():
                out["forward"] = ("nn.Module frames", marks[modules])
    return out


def _fallback_phase(name: str) -> str | None:
    """The phase a torch annotation or op name marks, in traces without the collector's labels."""
    if name.startswith("enumerate(DataLoader)#"):
        return "dataloader"
    if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
        return "optimizer"
    if name.startswith("autograd::engine::evaluate_function"):
        return "backward"
    return None


def _is_forward_annotation(name: str) -> bool:
    return bool(_FORWARD_ANNOTATION.search(name)) and not name.startswith(LABEL_PREFIX)


def _is_module_frame(name: str) -> bool:
    return name.startswith("nn.Module: ")


def phase_intervals(view: TraceTables) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    found = view.phase_evidence
    result = {phase: _merged(frame) for phase, (_, frame) in found.items()}
    if "forward" not in result:
        inferred = _infer_forward(view, result)
        if len(inferred[0]):
            result["forward"] = inferred
    return result


def phase_sources(view: TraceTables) -> dict[str, str]:
    found = view.phase_evidence
    out = {phase: how for phase, (how, _) in found.items()}
    if "forward" not in out and "forward" in view.phase_intervals:
        out["forward"] = "inferred from autograd-recorded ops"
    return {phase: out.get(phase, "not seen") for phase in PHASE_NAMES}


def _infer_forward(view: TraceTables, known: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Per step: from the first to the last autograd-recorded top-level op before backward starts."""
    e = view.events
    ops = (e["cat"] == "cpu_op").to_numpy() & (e["tid"] == view.main_tid).to_numpy() & (e["seq"] >= 0).to_numpy()
    if not ops.any():
        return _EMPTY
    ts, end = e["ts"].to_numpy()[ops], e["end"].to_numpy()[ops]
    # Not the optimizer: a closure's forward runs inside optimizer.step(), and the update itself records no autograd.
    inner = [p for p in known if p != "optimizer"]
    other_s, other_e = intervals.union(
        np.concatenate([known[p][0] for p in inner] or [np.empty(0, "int64")]),
        np.concatenate([known[p][1] for p in inner] or [np.empty(0, "int64")]),
    )
    if len(other_s):
        k = np.searchsorted(other_s, ts, side="right") - 1
        inside = (k >= 0) & (ts < other_e[np.maximum(k, 0)])
        ts, end = ts[~inside], end[~inside]
    back_s = np.sort(known.get("backward", _EMPTY)[0])
    lo, hi = view.steps["start"].to_numpy("int64"), view.steps["end"].to_numpy("int64")
    # Each step's forward ends where its first backward starts (or at the step's end).
    k = np.searchsorted(back_s, lo, side="left")
    first_back = back_s[np.minimum(k, max(len(back_s) - 1, 0))] if len(back_s) else hi
    stop = np.where((k < len(back_s)) & (first_back < hi), first_back, hi)
    first = np.full(len(lo), np.iinfo("int64").max, "int64")
    last = np.full(len(lo), np.iinfo("int64").min, "int64")
    # An op lies in [start, stop] of the last step starting at or before it; an op of zero
    # length on the boundary also in the step before.
    j = np.searchsorted(lo, ts, side="right") - 1
    for step in (j, j - 1):
        ok = (step >= 0) & (end <= stop[np.maximum(step, 0)])
        np.minimum.at(first, step[ok], ts[ok])
        np.maximum.at(last, step[ok], end[ok])
    seen = last >= first
    return first[seen], last[seen]


def split_step(view: TraceTables, lo: int, hi: int) -> dict[str, int]:
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
