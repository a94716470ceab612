"""Runs of memory-bound elementwise kernels on one GPU stream that a compiler would fuse.

In eager mode every elementwise op, reduction and normalisation is its own kernel: it reads its inputs
from GPU memory and writes its output back, so a hand-written RMSNorm or rotary embedding moves the same
tensor through memory once per op. This analyzer reads that from the kernels themselves, with the
category the roofline model gives each kernel's operator (:func:`~.roofline.window`):

- a *run* is a maximal sequence of two or more kernels, consecutive on one stream in one phase, each of
  an elementwise, reduce or normalisation operator (:data:`MEMBERS`), at least one of them elementwise
  or reduce; any other kernel (a GEMM, a convolution, an unmodelled or Triton kernel) ends it;
- kernels of hand-written attention chains (:func:`.attention.find_chains`) are left out: their passes
  over the score matrix are GPU021's gain, counted once;
- fused, a run is one kernel that reads its inputs once and writes once, about as dear as its dearest
  member (the one pass over the largest tensor), so its gain is its time less its dearest kernel's (the
  rule CPU004 uses on the host side, here on the GPU's measured kernel times).

The roofline says why the time is there: ``elementwise_runs.bandwidth_share`` is the runs' time-weighted
roofline share (their modelled bytes over the GPU's bandwidth): near 1 the kernels stream memory as fast
as it goes, and only fewer passes help; far below, most of them are too small to fill the GPU, and
fusing also saves their launches.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze import group_by, intervals
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.attention import find_chains
from advisor.analyze.framework.op_cost import op_rows
from advisor.analyze.framework.per_step import NS_PER_MS, site, step_ms
from advisor.analyze.framework.roofline import window
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

MEMBERS = ("elementwise", "reduce", "NORM_fwd", "NORM_bwd")
#: categories of which a run needs one (two norms in a row are not a chain of elementwise work)
POINTWISE = ("elementwise", "reduce")
#: phases whose elementwise work is someone else's concern (the optimizer's update: OPT001; the input pipeline)
SKIPPED_PHASES = ("optimizer", "dataloader")
MIN_KERNELS = 2
TOP_N = 10

SITE_COLUMNS = {
    "ops": "text: the run's operators, in order (first ten)",
    "module": "text: nn.Module of its first kernel (the heaviest, and how many others run the same line)",
    "phase": "text: phase", "site": "text: user file:line (function) of its first kernel",
    "runs_per_step": "count: times the run occurs per step", "kernels": "count: kernels in the run",
    "ms": "ms: its kernels' time per step", "gain_ms": "ms: its time less its dearest kernel's, per step",
    "bandwidth_share": "fraction: time-weighted roofline share of its kernels (null without a spec)",
}

PROVIDES = (
    FactSpec("elementwise_runs.runs_per_step", "count",
             f"runs of {MIN_KERNELS}+ consecutive elementwise, reduce or norm kernels on one stream, per step"),
    FactSpec("elementwise_runs.kernels_per_step", "count", "kernels in those runs per step"),
    FactSpec("elementwise_runs.ms", "ms", "their kernel time per step"),
    FactSpec("elementwise_runs.share", "fraction", "that time as a share of all compute kernel time"),
    FactSpec("elementwise_runs.us_per_kernel", "us", "median time of a kernel in a run"),
    FactSpec("elementwise_runs.bandwidth_share", "fraction",
             "time-weighted roofline share of those kernels (memory-bound: their TB/s over the bandwidth)"),
    FactSpec("elementwise_runs.gain_ms", "ms", "per step, each run's time less its dearest kernel's: what fusing "
             "each run into one kernel gives back"),
    FactSpec("elementwise_runs.fused_ms", "ms", "what the runs would still take fused: each one's dearest kernel, "
             "per step"),
    FactSpec("elementwise_runs.gain_share", "fraction", "that gain as a share of the step"),
    FactSpec("elementwise_runs.where", "text", "the user's line and module of the run with the most gain"),
    FactSpec("elementwise_runs.sites", "table", "the runs by operator sequence and place, most gain first",
             columns=SITE_COLUMNS),
)


def _attention_kernels(view: TraceView, op_row: np.ndarray) -> np.ndarray:
    """Kernels launched under a hand-written attention chain's operators."""
    chains = find_chains(view, op_rows(view))
    if not chains:
        return np.zeros(len(op_row), bool)
    host = view.host
    mask = np.zeros(len(host), bool)
    mask[np.concatenate([rows for rows, _ in chains])] = True
    under = mask | (intervals.enclosing(host["parent"].to_numpy(), host["depth"].to_numpy(), mask) >= 0)
    return (op_row >= 0) & under[np.maximum(op_row, 0)]


def find_runs(view: TraceView) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """Each run's kernel positions (in ``window(view).kernels``), and the kernels' columns used."""
    w = window(view)
    k = w.kernels
    if k.empty:
        return [], {}
    category = w.table["category"].to_numpy(dtype=object)[w.row]
    op_row = k["op_row"].to_numpy().astype("int64")
    member = (np.isin(category, MEMBERS) & ~_attention_kernels(view, op_row)
              & ~np.isin(k["phase"].to_numpy(dtype=object), SKIPPED_PHASES))
    cols = {"category": category, "dur": k["dur"].to_numpy().astype("float64"), "row": w.row,
            "stream": k["stream"].to_numpy(), "phase": k["phase"].to_numpy(dtype=object)}
    order = np.lexsort((k["ts"].to_numpy(), cols["stream"]))
    stream, phase, m = cols["stream"][order], cols["phase"][order], member[order]
    # a run breaks at a non-member kernel (which stands alone), a new stream or a new phase
    brk = np.r_[True, (stream[1:] != stream[:-1]) | (phase[1:] != phase[:-1]) | ~m[1:] | ~m[:-1]]
    runs = [seg for seg in np.split(order, np.flatnonzero(brk)[1:])
            if member[seg[0]] and len(seg) >= MIN_KERNELS and np.isin(category[seg], POINTWISE).any()]
    return runs, cols


@analyzer("elementwise_runs", needs=("kernel",), provides=PROVIDES)
def elementwise_runs(view: TraceView) -> dict[str, Any]:
    """Runs of consecutive elementwise kernels on a stream, what fusing each gives back, and their bandwidth."""
    runs, cols = find_runs(view)
    if not runs:
        return {"elementwise_runs.runs_per_step": 0.0, "elementwise_runs.ms": 0.0, "elementwise_runs.gain_ms": 0.0,
                "elementwise_runs.gain_share": 0.0}
    w = window(view)
    steps = max(view.step_count, 1)
    dur = cols["dur"]
    members = np.concatenate(runs)
    total = float(dur[members].sum())
    gain = np.array([dur[r].sum() - dur[r].max() for r in runs])
    sites = _sites(view, runs, cols, gain)
    mean = step_ms(view)
    gain_ms = float(gain.sum()) / steps / NS_PER_MS
    compute = float(w.table["kernel_ns"].sum())
    return {
        "elementwise_runs.runs_per_step": len(runs) / steps,
        "elementwise_runs.kernels_per_step": len(members) / steps,
        "elementwise_runs.ms": total / steps / NS_PER_MS,
        "elementwise_runs.share": total / compute if compute else 0.0,
        "elementwise_runs.us_per_kernel": float(np.median(dur[members])) / 1e3,
        "elementwise_runs.bandwidth_share": _share(w, cols["row"][members], dur[members]),
        "elementwise_runs.gain_ms": gain_ms,
        "elementwise_runs.fused_ms": total / steps / NS_PER_MS - gain_ms,
        "elementwise_runs.gain_share": gain_ms / mean if mean else 0.0,
        "elementwise_runs.where": _where(sites[0]),
        "elementwise_runs.sites": records(sites),
    }


def _share(w: Any, rows: np.ndarray, dur: np.ndarray) -> float | None:
    """Time-weighted roofline share over these kernels (each takes its row's share); None without shares."""
    share = w.table["roofline_share"].to_numpy(dtype="float64")[rows]
    known = np.isfinite(share)
    weight = dur[known]
    return float((share[known] * weight).sum() / weight.sum()) if known.any() and weight.sum() else None


def _where(top: dict[str, Any]) -> str:
    return f"{top['site']} (in {top['module']})" if top["site"] and top["module"] else top["site"] or top["module"]


def _sites(view: TraceView, runs: list[np.ndarray], cols: dict[str, np.ndarray],
           gain: np.ndarray) -> list[dict[str, Any]]:
    """Runs grouped by their operator sequence and the place of their first kernel, most gain first."""
    w = window(view)
    k = w.kernels
    op = w.table["op"].to_numpy(dtype=object)
    files, lines, funcs = (k["src_file"].to_numpy(dtype=object), k["src_line"].to_numpy(),
                           k["src_func"].to_numpy(dtype=object))
    module = k["module"].to_numpy(dtype=object)
    keys = [(" ".join(str(op[cols["row"][i]]).removeprefix("aten::") for i in r[:10]), str(cols["phase"][r[0]]),
             site(str(files[r[0]]), int(lines[r[0]]), str(funcs[r[0]]))) for r in runs]
    labels = np.array(["\x00".join(key) for key in keys], dtype=object)
    ids, n = group_by.group_ids(labels)
    gains = group_by.sums(ids, n, gain)
    first = group_by.first_rows(ids, n)
    steps = max(view.step_count, 1)
    out = []
    for g in group_by.by_weight(gains, "stable")[:TOP_N]:
        of = [(r, x) for r, x, i in zip(runs, gain, ids) if i == g]
        kernels = np.concatenate([r for r, _ in of])
        ops, phase, at = keys[first[g]]
        out.append({"ops": ops, "module": _modules([str(module[r[0]]) for r, _ in of], [x for _, x in of]),
                    "phase": phase, "site": at, "runs_per_step": len(of) / steps, "kernels": len(of[0][0]),
                    "ms": float(cols["dur"][kernels].sum()) / steps / NS_PER_MS,
                    "gain_ms": float(gains[g]) / steps / NS_PER_MS,
                    "bandwidth_share": _share(w, cols["row"][kernels], cols["dur"][kernels])})
    return out


def _modules(names: list[str], weights: list[float]) -> str:
    """The module with the most gain, and how many others run the same operators from the same line."""
    total: dict[str, float] = {}
    for name, x in zip(names, weights):
        total[name] = total.get(name, 0.0) + x
    best = max(total, key=total.__getitem__)
    others = len([m for m in total if m and m != best])
    return f"{best} (and {others} more)" if best and others else best
