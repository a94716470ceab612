"""How close each operator runs to the GPU's roofline, from the shapes the trace recorded.

The rows come from :func:`~.op_efficiency.efficiency_table` (kernel time per operator, shape and dtype;
FLOPs and bytes from :mod:`.op_model`; the roof from :mod:`.gpu_spec`). Facts:

- ``ops.efficiency``: the operators with the most kernel time, with achieved TFLOP/s and TB/s, their share
  of the roofline (the least time the call can take over the time its kernels took) and what bounds them;
- ``ops.efficiency_by_category``: the same per category (GEMM, CONV_fwd, ..., unmodelled);
- ``ops.busy_efficiency``: the roofline time of all modelled calls over all compute kernel time, so an
  unmodelled kernel counts as time with nothing to show (a lower bound of the busy time's efficiency);
- which spec was used (``roofline.gpu``), and a note when shares cannot be given (no shapes in the
  trace, or a GPU the table does not know: then TFLOP/s and TB/s come without a share);
- ``roofline.ncu_candidates``: the kernels the kernel stage should measure, those of the operators that
  lose the most time to the roofline (kernel time x (1 - share)), for ``collect/ncu.py``.

:func:`window` computes the join once per view, for this analyzer and the ones that read the same rows
(:mod:`.gemm_alignment`, :mod:`.elementwise_runs`, :mod:`.fp32_gemms`, :mod:`.attention_scores`).

The analysed window is the GPU window of :mod:`.gpu_links` (kernels that start in it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

import numpy as np
import pandas as pd

from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.gpu_spec import GpuSpec, device_spec
from advisor.analyze.framework.op_efficiency import efficiency_join
from advisor.analyze.framework.op_model import CATEGORIES
from advisor.analyze.framework.per_step import NS_PER_MS
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

__all__ = ["Window", "device_spec", "efficiency_frame", "window"]

TOP_N = 40
#: kernels offered to the kernel stage
NCU_CANDIDATES = 10

ROW_COLUMNS = {
    "op": "text: operator (the innermost modelled one around the kernels)",
    "category": "text: GEMM, CONV_fwd, CONV_bwd, SDPA_fwd, SDPA_bwd, NORM_fwd, NORM_bwd, elementwise, reduce, triton "
                "or unmodelled",
    "shape": "text: its Input Dims",
    "dtype": "text: the data type whose peak bounds it (fp32, tf32, bf16, ...)",
    "calls": "count: calls that launched kernels in the window",
    "kernel_ms": "ms: their kernels' total time in the window",
    "ms_per_step": "ms: that time per step",
    "share": "fraction: of all compute kernel time",
    "us_per_call": "us: kernel time per call",
    "gflops": "ratio: GFLOP per call (from the shapes)",
    "mbytes": "ratio: MB (2**20 bytes) moved per call, each tensor read or written once",
    "tflops_s": "ratio: achieved TFLOP/s",
    "tb_s": "ratio: achieved TB/s",
    "roofline_share": "fraction: roofline time over measured time (1 at the roof); absent without a spec",
    "bound": "text: compute or memory, at the roof",
    "site": "text: user file:line (function) of its heaviest kernel",
    "kernel": "text: its heaviest kernel",
}
CANDIDATE_COLUMNS = {
    "name": "text: the kernel (the operator's heaviest), as kernels.top names it",
    "op": "text: its operator", "category": "text: the operator's category", "shape": "text: its Input Dims",
    "dtype": "text: its data type", "ms": "ms: the operator's kernel time per step",
    "share": "fraction: of all compute kernel time",
    "roofline_share": "fraction: roofline time over measured time",
    "lost_ms": "ms: per step, its time x (1 - roofline_share): what it loses to the roofline",
    "calls_per_step": "count: launches of that kernel per step (for ncu's --launch-skip)",
    "site": "text: user file:line (function)",
}
CATEGORY_COLUMNS = {
    "category": "text: category", "calls": "count: calls", "kernel_ms": "ms: kernel time in the window",
    "ms_per_step": "ms: per step", "share": "fraction: of all compute kernel time",
    "tflops_s": "ratio: achieved TFLOP/s over the category", "tb_s": "ratio: achieved TB/s over the category",
    "roofline_share": "fraction: time-weighted roofline share; absent without a spec or a model",
}

PROVIDES = (
    FactSpec("ops.efficiency", "table", f"the {TOP_N} operators (by shape and dtype) with the most kernel time, "
             "against the GPU's roofline", columns=ROW_COLUMNS),
    FactSpec("ops.efficiency_by_category", "table", "kernel time and roofline share per operator category",
             columns=CATEGORY_COLUMNS),
    FactSpec("ops.modelled_share", "fraction", "share of compute kernel time launched by operators with a model"),
    FactSpec("ops.unmodelled_ms", "ms", "compute kernel time per step of operators without a model"),
    FactSpec("ops.roofline_share", "fraction", "time-weighted roofline share of the modelled operators"),
    FactSpec("ops.busy_efficiency", "fraction",
             "roofline time of all modelled calls over all compute kernel time (unmodelled time counts as none)"),
    FactSpec("roofline.gpu", "text", "the GPU spec the roofline uses ('' when the device is unknown)"),
    FactSpec("roofline.device", "text", "the device name the spec was chosen by"),
    FactSpec("roofline.memory_tb_s", "ratio", "that GPU's memory bandwidth, TB/s"),
    FactSpec("roofline.peak_dtype", "text", "the data type with the most modelled kernel time"),
    FactSpec("roofline.peak_tflops", "ratio", "that data type's matrix peak on that GPU, TFLOP/s (the roof of the "
                                              "roofline chart)"),
    FactSpec("roofline.source", "text", "where the spec's figures come from"),
    FactSpec("roofline.note", "text", "why shares are missing, when they are"),
    FactSpec("roofline.ncu_candidates", "table", f"up to {NCU_CANDIDATES} kernels, one per name, of the operators "
             "with the most time x (1 - roofline share), most first: what the kernel stage should measure",
             columns=CANDIDATE_COLUMNS),
)


@dataclass(frozen=True)
class Window:
    """The efficiency join over the kernels in the GPU window, with the derived columns."""

    spec: GpuSpec | None
    device: str
    #: :func:`efficiency_frame`'s rows, heaviest first
    table: pd.DataFrame
    #: the compute kernels counted, in GPU order
    kernels: pd.DataFrame
    #: for each of those kernels, the position of its row in ``table``
    row: np.ndarray


_WINDOWS: WeakKeyDictionary[TraceView, Window] = WeakKeyDictionary()


def window(view: TraceView) -> Window:
    """The join for the view's GPU window and device spec, computed once per view."""
    hit = _WINDOWS.get(view)
    if hit is None:
        spec, device = device_spec(view)
        table, kernels, row = efficiency_join(view, spec)
        hit = _WINDOWS[view] = Window(spec, device, _derive(view, table), kernels, row)
    return hit


def efficiency_frame(view: TraceView, spec: GpuSpec | None, kernels: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`~.op_efficiency.efficiency_table` (of ``kernels``, default those in the window) with the derived
    columns of :data:`ROW_COLUMNS`, all rows."""
    return _derive(view, efficiency_join(view, spec, kernels)[0])


def _derive(view: TraceView, t: pd.DataFrame) -> pd.DataFrame:
    ns = t["kernel_ns"].to_numpy().astype("float64")
    calls = t["calls"].to_numpy().astype("float64")
    total = ns.sum()
    steps = max(view.step_count, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t["kernel_ms"] = ns / NS_PER_MS
        t["ms_per_step"] = ns / steps / NS_PER_MS
        t["share"] = ns / total if total else 0.0
        t["us_per_call"] = np.where(calls > 0, ns / np.maximum(calls, 1) / 1e3, np.nan)
        t["gflops"] = t["flops"] / 1e9
        t["mbytes"] = t["bytes"] / 2**20
        t["tflops_s"] = np.where(ns > 0, t["flops"] * calls / ns / 1e3, np.nan)
        t["tb_s"] = np.where(ns > 0, t["bytes"] * calls / ns / 1e3, np.nan)
        t["roofline_share"] = np.where(ns > 0, t["roof_ns"] * calls / ns, np.nan)
    return t


def _by_category(t: pd.DataFrame, steps: int) -> list[dict[str, Any]]:
    total = float(t["kernel_ns"].sum())
    out = []
    for cat in CATEGORIES:
        part = t[t["category"] == cat]
        if part.empty:
            continue
        ns = float(part["kernel_ns"].sum())
        calls = part["calls"].to_numpy()
        roofed = part["roof_ns"].notna().to_numpy()
        roof_ns = float((part["roof_ns"].to_numpy()[roofed] * calls[roofed]).sum())
        roofed_ns = float(part["kernel_ns"].to_numpy()[roofed].sum())
        out.append({"category": cat, "calls": int(calls.sum()), "kernel_ms": ns / NS_PER_MS,
                    "ms_per_step": ns / steps / NS_PER_MS, "share": ns / total if total else 0.0,
                    "tflops_s": _total(part, "flops") / ns / 1e3 if ns and part["flops"].notna().any() else None,
                    "tb_s": _total(part, "bytes") / ns / 1e3 if ns and part["bytes"].notna().any() else None,
                    "roofline_share": roof_ns / roofed_ns if roofed_ns else None})
    return out


def _total(part: pd.DataFrame, column: str) -> float:
    """A per-call column (flops, bytes) times the calls, summed over the rows."""
    return float((part[column].fillna(0) * part["calls"]).sum())


def _note(t: pd.DataFrame, spec: GpuSpec | None, device: str, modelled: float) -> str:
    if t.empty:
        return "no compute kernels in the window"
    if not modelled:
        return ("no operator could be modelled: the trace has no input shapes (profile with record_shapes=True) "
                "or none of its operators is one the model knows")
    if spec is None:
        return (f"the GPU ({device or 'unnamed in the trace'}) is not in the spec table: TFLOP/s and TB/s are "
                "given without a roofline share (--gpu-spec FILE adds it)")
    return ""


def _peak(t: pd.DataFrame, spec: GpuSpec | None) -> dict[str, Any]:
    """The matrix peak of the data type with the most modelled kernel time: one roof for the chart."""
    modelled = t[t["flops"].notna() & t["dtype"].notna() & (t["dtype"] != "")]
    if modelled.empty:
        return {}
    dtype = str(modelled.groupby("dtype")["kernel_ns"].sum().idxmax())
    peak = spec.peak_tflops("matrix", dtype) if spec else None
    return {"roofline.peak_dtype": dtype, **({"roofline.peak_tflops": peak} if peak is not None else {})}


def _table_rows(t: pd.DataFrame) -> list[dict[str, Any]]:
    keep = list(ROW_COLUMNS)
    head = t.head(TOP_N)[keep].astype(object)
    return records(head.where(head.notna(), None).to_dict("records"))


@analyzer("roofline", needs=("kernel",), provides=PROVIDES)
def roofline(view: TraceView) -> dict[str, Any]:
    """Each operator's achieved TFLOP/s and TB/s and its share of the GPU's roofline."""
    w = window(view)
    spec, device, t = w.spec, w.device, w.table
    steps = max(view.step_count, 1)
    total = float(t["kernel_ns"].sum())
    is_model = t["flops"].notna().to_numpy()
    modelled_ns = float(t["kernel_ns"].to_numpy()[is_model].sum())
    roofed = t["roof_ns"].notna().to_numpy()
    roof_ns = float((t["roof_ns"].to_numpy()[roofed] * t["calls"].to_numpy()[roofed]).sum())
    roofed_ns = float(t["kernel_ns"].to_numpy()[roofed].sum())
    return {
        "ops.efficiency": _table_rows(t),
        "ops.efficiency_by_category": records(_by_category(t, steps)),
        "ops.modelled_share": modelled_ns / total if total else 0.0,
        "ops.unmodelled_ms": (total - modelled_ns) / steps / NS_PER_MS,
        "ops.roofline_share": roof_ns / roofed_ns if roofed_ns else None,
        "ops.busy_efficiency": roof_ns / total if total and spec is not None and roofed_ns else None,
        "roofline.gpu": spec.name if spec else "",
        "roofline.device": device,
        "roofline.memory_tb_s": spec.memory_tb_s if spec else None,
        **_peak(t, spec),
        "roofline.source": spec.source if spec else "",
        "roofline.note": _note(t, spec, device, modelled_ns),
        "roofline.ncu_candidates": records(ncu_candidates(w, steps)),
    }


def ncu_candidates(w: Window, steps: int) -> list[dict[str, Any]]:
    """The operators that lose the most kernel time to the roofline, one row per heaviest kernel name.

    An operator's loss is its time x (1 - roofline share): what it would give back at the roof. Operators
    without a share (no model, or no spec) are not ranked: their loss is unknown, and ``kernels.top`` still
    lists their kernels by time.
    """
    t = w.table
    share = t["roofline_share"].to_numpy(dtype="float64")
    known = np.isfinite(share) & (t["kernel"] != "").to_numpy()
    if not known.any():
        return []
    part = t[known].copy()
    part["lost_ms"] = part["ms_per_step"] * (1 - np.minimum(share[known], 1.0))
    part = part.sort_values("lost_ms", ascending=False, kind="stable").drop_duplicates("kernel")
    part = part[part["lost_ms"] > 0].head(NCU_CANDIDATES)
    launches = w.kernels["name"].astype(str).value_counts()
    return [{"name": r.kernel, "op": r.op, "category": r.category, "shape": r.shape, "dtype": r.dtype,
             "ms": float(r.ms_per_step), "share": float(r.share), "roofline_share": float(r.roofline_share),
             "lost_ms": float(r.lost_ms), "calls_per_step": int(launches.get(r.kernel, 0)) / steps, "site": r.site}
            for r in part.itertuples()]
