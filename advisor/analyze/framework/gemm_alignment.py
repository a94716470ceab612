"""GEMMs whose dimensions are not multiples of what the tensor cores load, and what that costs them.

Tensor cores (and AMD's matrix cores) multiply fixed tiles, and the fastest GEMM kernels load operands in
16-byte vectors: 8 elements of fp16/bf16, 16 of fp8/int8, 4 of TF32 (NVIDIA's *Matrix Multiplication
Background* guide). A GEMM with M, N or K off that multiple runs on narrower loads or wastes part of the
last tile. :data:`MULTIPLE` holds the multiples; the GEMM's dimensions come from its shapes
(:func:`.op_model.gemm_dims`), its time and roofline share from :mod:`.roofline` (all rows of the window).

The cost is not taken from a datasheet but from the run itself. For each misaligned GEMM the *reference*
is the GEMMs of the same run and data type with every dimension aligned and a similar amount of work
(FLOPs per call within a factor :data:`SIMILAR` either way: tiles filled alike); their time-weighted
roofline share is what the misaligned one could reach. It is counted only when

- its calls last :data:`MIN_US` or more (shorter ones are bound by launch latency, not by their tiles), and
- it reaches under :data:`SLOWER` of the reference share (a smaller gap is within the spread of GEMMs of
  one run: TimeSformer's [25089, 768] and [25088, 768] GEMMs run at 35.6% and 36.4% of the roof);

its gain is then its time x (1 - share / reference share): what it gives back at the reference's share.
A misaligned GEMM with no aligned GEMM of its size in the run has no estimate: its row says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.op_model import OpCall, gemm_dims
from advisor.analyze.framework.per_step import step_ms
from advisor.analyze.framework.roofline import window
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

#: data type -> the multiple its tensor-core loads need (16 bytes)
MULTIPLE = {"fp16": 8, "bf16": 8, "fp8": 16, "int8": 16, "tf32": 4}
#: the reference GEMMs do between 1/SIMILAR and SIMILAR times the work per call
SIMILAR = 2.0
#: calls shorter than this (us) are launch-bound: their share says nothing about their tiles
MIN_US = 20.0
#: a misaligned GEMM counts when under this fraction of the reference share
SLOWER = 0.8
TOP_N = 10

ROW_COLUMNS = {
    "op": "text: operator", "shape": "text: its Input Dims", "dtype": "text: data type",
    "dims": "text: the dimensions off the multiple, e.g. 'N=30522'", "multiple": "count: the multiple its dtype needs",
    "ms": "ms: kernel time per step", "share": "fraction: of all compute kernel time", "us_per_call": "us: per call",
    "gflops": "ratio: GFLOP per call",
    "roofline_share": "fraction: of its roofline",
    "reference_share": "fraction: time-weighted roofline share of the aligned GEMMs of its size and dtype (null: none)",
    "references": "count: how many aligned GEMM shapes that share comes from",
    "gain_ms": "ms: per step, its time x (1 - share / reference share), when counted",
    "site": "text: user file:line (function)", "kernel": "text: its heaviest kernel",
}

PROVIDES = (
    FactSpec("gemm_alignment.count", "count", "GEMM shapes with M, N or K off the multiple of their dtype"),
    FactSpec("gemm_alignment.ms", "ms", "their kernel time per step"),
    FactSpec("gemm_alignment.share", "fraction", "that time's share of all compute kernel time"),
    FactSpec("gemm_alignment.gain_ms", "ms", "per step, what they give back at the roofline share of the run's "
             "aligned GEMMs of their size (counted ones only)"),
    FactSpec("gemm_alignment.gain_share", "fraction", "that gain as a share of the step"),
    FactSpec("gemm_alignment.rows", "table", "misaligned GEMMs, the counted ones first, then by time",
             columns=ROW_COLUMNS),
)


def misaligned_dims(op: str, shape: str, dtype: str) -> str | None:
    """``"M=141 N=30522"`` for the GEMM dimensions off the dtype's multiple, "" when all are on it, None when
    the row is not a GEMM of a tensor-core dtype."""
    multiple = MULTIPLE.get(dtype)
    call = OpCall.parse(op, shape, "", "") if multiple else None
    dims = gemm_dims(call) if call is not None else None
    if dims is None:
        return None
    _, m, n, k = dims
    return " ".join(f"{name}={v}" for name, v in (("M", m), ("N", n), ("K", k)) if v % multiple)


@analyzer("gemm_alignment", needs=("kernel",), provides=PROVIDES)
def gemm_alignment(view: TraceView) -> dict[str, Any]:
    """GEMMs off the tensor cores' multiple, against the run's aligned GEMMs of their size."""
    t = window(view).table
    gemm = t[(t["category"] == "GEMM").to_numpy() & t["flops"].notna().to_numpy()]
    off = np.array([misaligned_dims(r.op, r.shape, r.dtype) for r in gemm.itertuples()], dtype=object)
    if not len(gemm) or not any(off):
        return {"gemm_alignment.count": 0, "gemm_alignment.ms": 0.0, "gemm_alignment.gain_ms": 0.0,
                "gemm_alignment.gain_share": 0.0}
    aligned = gemm[off == ""]
    rows = [_row(r, str(dims), aligned) for r, dims in zip(gemm.itertuples(), off) if dims]
    rows.sort(key=lambda r: (r["gain_ms"] is None, -(r["gain_ms"] or 0), -r["ms"]))
    ms = sum(r["ms"] for r in rows)
    gain = sum(r["gain_ms"] or 0.0 for r in rows)
    mean = step_ms(view)
    return {
        "gemm_alignment.count": len(rows),
        "gemm_alignment.ms": ms,
        "gemm_alignment.share": float(sum(r["share"] for r in rows)),
        "gemm_alignment.gain_ms": gain,
        "gemm_alignment.gain_share": gain / mean if mean else 0.0,
        "gemm_alignment.rows": records(rows[:TOP_N]),
    }


def _row(r: Any, dims: str, aligned: pd.DataFrame) -> dict[str, Any]:
    share = _finite(r.roofline_share)
    ref, n = _reference(r, aligned)
    counted = (share is not None and ref is not None and r.us_per_call >= MIN_US and share < SLOWER * ref)
    return {"op": r.op, "shape": r.shape, "dtype": r.dtype, "dims": dims, "multiple": MULTIPLE[r.dtype],
            "ms": float(r.ms_per_step), "share": float(r.share), "us_per_call": float(r.us_per_call),
            "gflops": float(r.gflops), "roofline_share": share, "reference_share": ref, "references": n,
            "gain_ms": float(r.ms_per_step) * (1 - share / ref) if counted else None,
            "site": r.site, "kernel": r.kernel}


def _reference(r: Any, aligned: pd.DataFrame) -> tuple[float | None, int]:
    """The time-weighted roofline share of the aligned GEMMs of the same dtype and similar FLOPs per call."""
    flops = aligned["flops"].to_numpy(dtype="float64")
    share = aligned["roofline_share"].to_numpy(dtype="float64")
    near = ((aligned["dtype"] == r.dtype).to_numpy() & (flops >= r.flops / SIMILAR) & (flops <= r.flops * SIMILAR)
            & np.isfinite(share))
    weight = aligned["kernel_ns"].to_numpy(dtype="float64")[near]
    if not near.any() or not weight.sum():
        return None, 0
    return float((share[near] * weight).sum() / weight.sum()), int(near.sum())


def _finite(x: Any) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None
