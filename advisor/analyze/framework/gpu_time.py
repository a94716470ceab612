"""GPU busy and idle time per device, stream and step, and the causes of the idle time.

Definitions, recorded in ``gpu.window`` so that reports can state them:

- The *window* is the analysed steps (first ProfilerStep start to last
  ProfilerStep end, every step counted); without ProfilerStep ranges it is
  the span from the first GPU op's start to the last one's end.
- A device is *busy* while any kernel, copy or memset runs on any of its
  streams; cuda_sync events are waits, not work, and count as idle.
  *Compute* is the time a non-communication kernel runs; *non-compute* is
  busy time with only communication kernels, copies or memsets running.
- Figures are per step (the window's total divided by its steps) and as a
  share of the window, so busy + idle = window and the shares add up to 1.

Holistic Trace Analysis measures over a different window (GPU ops launched
before the last step, from the first op's start to the last one's end),
counts cuda_sync events as GPU time and rounds ns timestamps inward to whole
microseconds; over the same window and events the figures agree (see
``tests/analyze/test_gpu_time.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze import group_by, intervals
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework import event_names
from advisor.analyze.framework.gpu_idle import CAUSES, KERNEL_GAP_NS, LAUNCH_GAP_NS, idle_gaps
from advisor.analyze.framework.gpu_links import GpuLinks, primary_device
from advisor.analyze.framework.per_step import NS_PER_MS
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

__all__ = ["STARVED", "busy_breakdown", "primary_device"]

#: idle for at least this share of the window: the GPU is starved
STARVED = 0.30
TOP_GAPS = 10

CAUSE_MEANING = {
    "sync": "the host was blocked in (or just out of) a synchronising call",
    "dataloader": "the host was loading the next batch",
    "launch": "the host was launching ops one by one, slower than the GPU ran them (launch-bound)",
    "cpu": f"the host was busy with other CPU work for more than {LAUNCH_GAP_NS // 1000} us (CPU-bound)",
    "kernel_gap": f"queued ops started within {KERNEL_GAP_NS // 1000} us of each other (device latency)",
    "other": "queued work waited on another stream or event, or its launch is not in the trace",
}

#: cause -> its facts: idle ms per step, and share of the window
CAUSE_FACTS = {
    "sync": ("gpu.idle.sync.ms", "gpu.idle.sync.share"),
    "dataloader": ("gpu.idle.dataloader.ms", "gpu.idle.dataloader.share"),
    "launch": ("gpu.idle.launch.ms", "gpu.idle.launch.share"),
    "cpu": ("gpu.idle.cpu.ms", "gpu.idle.cpu.share"),
    "kernel_gap": ("gpu.idle.kernel_gap.ms", "gpu.idle.kernel_gap.share"),
    "other": ("gpu.idle.other.ms", "gpu.idle.other.share"),
}

PROVIDES = (
    FactSpec("gpu.window", "text", "the window GPU figures are measured over, and how it was chosen"),
    FactSpec("gpu.window_ms", "ms", "length of the window per step"),
    FactSpec("gpu.device", "count", "the device analysed (the one with the most busy time)"),
    FactSpec("gpu.devices_used", "count", "devices that ran GPU ops in the window"),
    FactSpec("gpu.busy_ms", "ms", "time per step some kernel, copy or memset runs on the device"),
    FactSpec("gpu.idle_ms", "ms", "time per step nothing runs on the device"),
    FactSpec("gpu.busy_fraction", "fraction", "busy share of the window"),
    FactSpec("gpu.idle_fraction", "fraction", "idle share of the window (1 - busy_fraction)"),
    FactSpec("gpu.compute_ms", "ms", "time per step a compute (non-communication) kernel runs"),
    FactSpec("gpu.compute_fraction", "fraction", "compute share of the window"),
    FactSpec("gpu.noncompute_ms", "ms", "busy time per step with only communication, copies or memsets running"),
    FactSpec("gpu.noncompute_fraction", "fraction", "non-compute share of the window"),
    FactSpec("gpu.starved", "bool", f"the device is idle for at least {STARVED:.0%} of the window"),
    FactSpec("gpu.state", "text", "busy (idle < 10%), partly idle (< 30%) or starved"),
    *(FactSpec(CAUSE_FACTS[c][0], "ms", f"idle time per step because {m}") for c, m in CAUSE_MEANING.items()),
    *(FactSpec(CAUSE_FACTS[c][1], "fraction", f"share of the window idle because {m}")
      for c, m in CAUSE_MEANING.items()),
    FactSpec("gpu.idle.top_cause", "text", "the cause with the most idle time"),
    FactSpec("gpu.idle.host_ms", "ms", "idle time per step waiting on the host: sync + dataloader + launch + cpu"),
    FactSpec("gpu.idle.host_share", "fraction", "share of the window idle waiting on the host"),
    FactSpec("gpu.idle.table", "table", "idle time by cause", columns={
        "cause": "text: cause", "ms": "ms: per step", "share": "fraction: of the window",
        "of_idle": "fraction: of the idle time", "meaning": "text: what it means",
    }),
    FactSpec("gpu.gaps", "table", f"the {TOP_GAPS} longest idle gaps", columns={
        "at_ms": "ms: start, from the window's start", "ms": "ms: length", "cause": "text: main cause",
        "next": "text: the GPU op that ended the gap", "op": "text: the operator that launched it",
        "site": "text: the user's line that launched it", "step": "count: step number",
        "host": "text: the outermost operator and the runtime call that took most of the gap on the host",
    }),
    FactSpec("gpu.idle.host_ops", "table", "the host operators that ran while the device was idle", columns={
        "op": "text: outermost operator (or annotation) on the host", "ms": "ms: per step of it while the device was idle",
        "of_idle": "fraction: of the idle time", "calls_per_step": "count: calls per step",
        "site": "text: the user's line", "file": "text: file", "line": "count: line",
    }),
    FactSpec("gpu.idle.top_host_op", "text", "the host operator that ran through the most idle time"),
    FactSpec("gpu.idle.top_host_ms", "ms", "idle time per step it ran through"),
    FactSpec("gpu.idle.top_host_site", "text", "its user file:line, or the operator's name when the trace has no stacks"),
    FactSpec("gpu.idle.top_host_file", "text", "file of that line"),
    FactSpec("gpu.idle.top_host_line", "count", "number of that line"),
    FactSpec("gpu.kinds", "table", "busy time by kind of GPU op", columns={
        "kind": "text: compute, comm, memcpy or memset", "ms": "ms: per step (union of that kind)",
        "share": "fraction: of the window", "ops_per_step": "count: ops per step",
    }),
    FactSpec("gpu.streams", "table", "busy time per device and stream", columns={
        "device": "count: device", "stream": "count: stream", "ms": "ms: busy per step",
        "share": "fraction: of the window", "ops_per_step": "count: ops per step", "kind": "text: its main kind",
    }),
    FactSpec("gpu.devices", "table", "busy and idle time per device", columns={
        "device": "count: device", "busy_ms": "ms: per step", "idle_ms": "ms: per step",
        "busy_fraction": "fraction: of the window", "ops_per_step": "count: ops per step",
    }),
    FactSpec("gpu.steps", "table", "busy and idle time in each step", columns={
        "step": "count: step number", "time_ms": "ms: step length", "busy_ms": "ms: busy",
        "idle_ms": "ms: idle", "busy_fraction": "fraction: of the step",
    }),
)


def busy_breakdown(ops: pd.DataFrame, lo: int, hi: int) -> dict[str, int]:
    """ns of [lo, hi) that one device is busy, computing, idle, and busy with each kind of op."""
    per = busy_per_window(ops, np.array([lo], "int64"), np.array([hi], "int64"))
    return {k: int(v[0]) for k, v in per.items()}


def busy_per_window(ops: pd.DataFrame, lo: np.ndarray, hi: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`busy_breakdown` for many windows [lo[i], hi[i]) at once, in time linear in ops plus windows."""
    ts, end = ops["ts"].to_numpy("int64"), ops["end"].to_numpy("int64")
    busy = intervals.covered_between(*intervals.union(ts, end), lo, hi)
    out = {"window": hi - lo, "busy": busy, "idle": hi - lo - busy}
    kinds = _kind_codes(ops)
    for code, kind in enumerate(KIND_ORDER):
        sel = kinds == code
        out[kind] = intervals.covered_between(*intervals.union(ts[sel], end[sel]), lo, hi)
    out["noncompute"] = busy - out["compute"]
    return out


#: the kinds, in the order of the ``kind`` column's categories (sorted)
KIND_ORDER = tuple(sorted(("compute", "comm", "memcpy", "memset")))


def _kind_codes(ops: pd.DataFrame) -> np.ndarray:
    """The ``kind`` column as codes into :data:`KIND_ORDER`."""
    kind = ops["kind"]
    if isinstance(kind.dtype, pd.CategoricalDtype) and tuple(kind.cat.categories) == KIND_ORDER:
        return kind.cat.codes.to_numpy()
    lookup = {k: i for i, k in enumerate(KIND_ORDER)}
    return event_names.mapped(kind.to_numpy(dtype=object), lambda k: lookup.get(k, -1), "int8")


def _sync_intervals(links: GpuLinks) -> tuple[np.ndarray, np.ndarray]:
    s = links.host_syncs
    return intervals.union(s["ts"].to_numpy("int64"), s["end"].to_numpy("int64"))


def _causes(view: TraceView, links: GpuLinks, ops: pd.DataFrame) -> pd.DataFrame:
    loading = view.phase_intervals.get("dataloader", (np.empty(0, "int64"), np.empty(0, "int64")))
    return idle_gaps(ops, links.lo, links.hi, _sync_intervals(links), loading)


class _HostActivity:
    """The host table's arrays that :meth:`during` reads, taken once for all the gaps."""

    def __init__(self, view: TraceView) -> None:
        host = view.host
        self.ts, self.end = host["ts"].to_numpy(), host["end"].to_numpy()
        cat = host["cat"]
        self.top_op = ((cat == "cpu_op") & host["op_top"]).to_numpy()
        self.runtime = cat.isin(("cuda_runtime", "cuda_driver")).to_numpy()
        self.names = view.host_name_texts

    def during(self, lo: int, hi: int) -> str:
        """What the host did during [lo, hi): the outermost operator and the runtime call that took most of it."""
        near = np.flatnonzero((self.end > lo) & (self.ts < hi))
        overlap = np.minimum(self.end[near], hi) - np.maximum(self.ts[near], lo)
        names = self.names[near]
        parts = []
        for sel in (self.top_op[near], self.runtime[near]):
            if sel.any():
                # per name, in name order, so that a tie goes to the first name as a sorted groupby would
                unique, inverse = np.unique(names[sel], return_inverse=True)
                by_name = np.bincount(inverse, weights=overlap[sel])
                best = int(np.argmax(by_name))
                ns = int(by_name[best])
                if ns > 0:
                    parts.append(f"{unique[best]} {ns / NS_PER_MS:.3g} ms")
        return "; ".join(parts)


def _gap_rows(gaps: pd.DataFrame, ops: pd.DataFrame, links: GpuLinks, view: TraceView) -> list[dict[str, Any]]:
    from advisor.analyze.framework.per_step import site

    steps = view.steps["step"].to_numpy()
    host = _HostActivity(view)
    # the longest gaps, the earlier first on a tie (as ``nlargest``)
    top = np.argsort(-gaps["dur"].to_numpy(), kind="stable")[:TOP_GAPS]
    if len(top) == 0:
        return []
    gap = {c: gaps[c].to_numpy()[top].tolist() for c in ("start", "end", "dur", "next", *CAUSES)}
    nxt_rows = np.maximum(np.asarray(gap["next"]), 0)
    cols = {c: ops[c].to_numpy(dtype=object)[nxt_rows] if len(ops) else np.full(len(top), "")
            for c in ("name", "op", "src_file", "src_line", "src_func")}
    step_idx = view.step_of(np.asarray(gap["start"]))
    rows = []
    for i in range(len(top)):
        has = gap["next"][i] >= 0
        cause = max(CAUSES, key=lambda c: gap[c][i])
        idx = step_idx[i]
        start, end = gap["start"][i], gap["end"][i]
        rows.append({
            "at_ms": (start - links.lo) / NS_PER_MS, "ms": gap["dur"][i] / NS_PER_MS, "cause": cause,
            "next": cols["name"][i] if has else "", "op": cols["op"][i] if has else "",
            "site": site(cols["src_file"][i], int(cols["src_line"][i]), cols["src_func"][i]) if has else "",
            "step": int(steps[idx]) if idx >= 0 else -1, "host": host.during(start, end),
        })
    return rows


def _idle_host_ops(view: TraceView, gaps: pd.DataFrame, links: GpuLinks, idle: int) -> list[dict[str, Any]]:
    """Outermost host operators by how much of the device's idle time they ran through."""
    from advisor.analyze.framework.per_step import site

    host = view.host
    ts, end = host["ts"].to_numpy(), host["end"].to_numpy()
    keep = np.flatnonzero(((host["cat"] == "cpu_op") & host["op_top"]).to_numpy() & (end > links.lo) & (ts < links.hi))
    if len(keep) == 0 or idle <= 0:
        return []
    gs, ge = gaps["start"].to_numpy("int64"), gaps["end"].to_numpy("int64")
    overlap = intervals.covered_between(gs, ge, ts[keep], end[keep])
    rows = keep[overlap > 0]
    overlap = overlap[overlap > 0]
    if len(rows) == 0:
        return []
    keys = [view.host_name_texts[rows], *(host[c].iloc[rows].to_numpy() for c in ("src_file", "src_line", "src_func"))]
    ids, n = group_by.group_ids(*keys)
    ns = group_by.sums(ids, n, overlap)
    calls = np.bincount(ids, minlength=n)
    first = group_by.first_rows(ids, n)
    out = []
    for k in group_by.by_weight(ns, "quicksort")[:TOP_GAPS]:
        name, file, line, func = (key[first[k]] for key in keys)
        out.append({"op": name, "ms": ns[k] / links.steps / NS_PER_MS, "of_idle": ns[k] / idle,
                    "calls_per_step": calls[k] / links.steps, "site": site(file, int(line), func),
                    "file": file, "line": int(line)})
    return out


def _streams(ops: pd.DataFrame, links: GpuLinks) -> list[dict[str, Any]]:
    device, stream = ops["device"].to_numpy(), ops["stream"].to_numpy()
    ts, end, dur = ops["ts"].to_numpy(), ops["end"].to_numpy(), ops["dur"].to_numpy()
    kinds = _kind_codes(ops)
    order = np.lexsort((stream, device))  # groups in key order, as a sorted groupby
    keys = np.stack([device[order], stream[order]])
    cuts = np.flatnonzero(np.any(keys[:, 1:] != keys[:, :-1], axis=0)) + 1 if len(order) else np.empty(0, int)
    rows = []
    for part in np.split(order, cuts) if len(order) else []:
        b = intervals.covered(*intervals.clip(ts[part], end[part], links.lo, links.hi))
        by_kind = np.bincount(kinds[part], weights=dur[part], minlength=len(KIND_ORDER))
        by_kind[np.bincount(kinds[part], minlength=len(KIND_ORDER)) == 0] = -1  # only kinds it has
        rows.append({"device": int(device[part[0]]), "stream": int(stream[part[0]]), "ms": b / links.steps / NS_PER_MS,
                     "share": b / links.window_ns if links.window_ns else 0.0,
                     "ops_per_step": len(part) / links.steps, "kind": KIND_ORDER[int(np.argmax(by_kind))]})
    return sorted(rows, key=lambda r: -r["ms"])


def _devices(ops: pd.DataFrame, links: GpuLinks) -> list[dict[str, Any]]:
    rows = []
    device = ops["device"].to_numpy()
    for d in np.unique(device):
        part = ops[device == d]
        b = busy_breakdown(part, links.lo, links.hi)
        rows.append({"device": int(d), "busy_ms": b["busy"] / links.steps / NS_PER_MS,
                     "idle_ms": b["idle"] / links.steps / NS_PER_MS,
                     "busy_fraction": b["busy"] / b["window"] if b["window"] else 0.0,
                     "ops_per_step": len(part) / links.steps})
    return rows


def _steps(view: TraceView, ops: pd.DataFrame) -> list[dict[str, Any]]:
    if not view.profiler_steps_present:
        return []
    st = view.steps
    start, end, dur = st["start"].to_numpy("int64"), st["end"].to_numpy("int64"), st["dur"].to_numpy()
    busy = busy_per_window(ops, start, end)["busy"]
    idle = (end - start) - busy
    return [{"step": int(s), "time_ms": d / NS_PER_MS, "busy_ms": b / NS_PER_MS, "idle_ms": i / NS_PER_MS,
             "busy_fraction": b / d if d else 0.0}
            for s, d, b, i in zip(st["step"].tolist(), dur.tolist(), busy.tolist(), idle.tolist())]


@analyzer("gpu_time", needs=("gpu",), provides=PROVIDES)
def gpu_time(view: TraceView) -> dict[str, Any]:
    """Busy and idle time of the main device, per stream and step, and why it was idle."""
    links = view.gpu
    ops_all = links.in_window
    if len(ops_all) == 0 or links.window_ns <= 0:
        return {"gpu.window": links.window}
    device = links.device
    ops = links.device_ops
    b = busy_breakdown(ops, links.lo, links.hi)
    per = links.steps * NS_PER_MS
    window = b["window"]
    out: dict[str, Any] = {
        "gpu.window": links.window, "gpu.window_ms": window / per, "gpu.device": device,
        "gpu.devices_used": int(ops_all["device"].nunique()),
        "gpu.busy_ms": b["busy"] / per, "gpu.idle_ms": b["idle"] / per,
        "gpu.busy_fraction": b["busy"] / window, "gpu.idle_fraction": b["idle"] / window,
        "gpu.compute_ms": b["compute"] / per, "gpu.compute_fraction": b["compute"] / window,
        "gpu.noncompute_ms": b["noncompute"] / per, "gpu.noncompute_fraction": b["noncompute"] / window,
    }
    idle = b["idle"] / window
    out["gpu.starved"] = idle >= STARVED
    out["gpu.state"] = "busy" if idle < 0.10 else ("partly idle" if idle < STARVED else "starved")
    gaps = _causes(view, links, ops)
    table = []
    for cause in CAUSES:
        total = int(gaps[cause].sum())
        ms_fact, share_fact = CAUSE_FACTS[cause]
        out[ms_fact] = total / per
        out[share_fact] = total / window
        table.append({"cause": cause, "ms": total / per, "share": total / window,
                      "of_idle": total / b["idle"] if b["idle"] else 0.0, "meaning": CAUSE_MEANING[cause]})
    host = sum(int(gaps[c].sum()) for c in ("sync", "dataloader", "launch", "cpu"))
    out["gpu.idle.host_ms"] = host / per
    out["gpu.idle.host_share"] = host / window
    out["gpu.idle.table"] = records(sorted(table, key=lambda r: -r["ms"]))
    out["gpu.idle.top_cause"] = max(table, key=lambda r: r["ms"])["cause"] if b["idle"] else "none"
    out["gpu.gaps"] = records(_gap_rows(gaps, ops, links, view))
    host_ops = _idle_host_ops(view, gaps, links, b["idle"])
    out["gpu.idle.host_ops"] = records(host_ops)
    if host_ops:
        top = host_ops[0]
        out.update({"gpu.idle.top_host_op": top["op"], "gpu.idle.top_host_ms": top["ms"],
                    "gpu.idle.top_host_site": top["site"] or top["op"]})
        if top["site"]:
            out.update({"gpu.idle.top_host_file": top["file"], "gpu.idle.top_host_line": top["line"]})
    counts = np.bincount(_kind_codes(ops), minlength=len(KIND_ORDER))
    out["gpu.kinds"] = records([
        {"kind": k, "ms": b[k] / per, "share": b[k] / window, "ops_per_step": int(counts[KIND_ORDER.index(k)]) / links.steps}
        for k in ("compute", "comm", "memcpy", "memset")
    ])
    out["gpu.streams"] = records(_streams(ops_all, links))
    out["gpu.devices"] = records(_devices(ops_all, links))
    out["gpu.steps"] = records(_steps(view, ops))
    return out
