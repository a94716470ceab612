"""fp32 matmuls and convolutions on the ordinary cores, with what their shapes say the tensor cores would give.

:mod:`.precision` finds the fp32 kernels off the tensor cores (by kernel name and input dtype) and
GPU005 / GPU006 tell them; this module adds the per-operator evidence of the roofline model
(:mod:`.roofline`'s :func:`~.roofline.window`): which operators and shapes they are, their FLOPs, bytes and
achieved TFLOP/s, and, for each, the time the fix would leave.

The fix's data type (``precision.fp32_target``): TF32 on NVIDIA GPUs that have it (GPU005's fix, one
setting), else the 16-bit type of mixed precision, bf16 where the matrix units take it, fp16 otherwise
(GPU006's fix). For one operator row with measured fp32 time ``t``:

    roof_fp32   = max(FLOPs / fp32 peak, bytes / bandwidth)           (the row's roof_ns)
    roof_target = max(FLOPs / target peak, bytes' / bandwidth)        bytes' = bytes (TF32 reads fp32),
                                                                      bytes / 2 (16-bit operands)
    gain        = t · (1 - max(roof_target / roof_fp32, 1/2))

so a compute-bound GEMM gives back half its time, the conservative figure GPU005 and GPU006 always used
(the tensor-core roof is 4-16x higher, but the same kernel efficiency there is not assured), and one
that is memory-bound at the new roof gives back only what its bytes allow: with TF32 its traffic does
not shrink at all. fp32 kernels whose operator has no model (or no spec for the GPU) count half their
time, as before. ``precision.fp32_gain_ms`` is the sum, the two rules' impact.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze import group_by
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.gpu_spec import GpuSpec
from advisor.analyze.framework.per_step import NS_PER_MS
from advisor.analyze.framework.precision import classify, device_caps
from advisor.analyze.framework.roofline import window
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

TOP_N = 10
#: the most a change of data type is taken to give back of a compute-bound operator's time
MAX_GAIN = 0.5
MATRIX = ("GEMM", "CONV_fwd", "CONV_bwd")

ROW_COLUMNS = {
    "op": "text: operator", "category": "text: GEMM, CONV_fwd or CONV_bwd", "shape": "text: its Input Dims",
    "dtype": "text: fp32 (the operator's inputs)", "ms": "ms: its fp32 kernels' time per step",
    "share": "fraction: of all fp32 matmul/conv time", "gflops": "ratio: GFLOP per call",
    "tflops_s": "ratio: achieved TFLOP/s", "roofline_share": "fraction: of its fp32 roofline",
    "bound": "text: compute or memory, at the fp32 roof",
    "speedup_at_roof": "ratio: its fp32 roof time over its roof time in the target type",
    "gain_ms": "ms: per step, what the target type is taken to give back",
    "site": "text: user file:line (function)", "kernel": "text: its heaviest kernel",
}

PROVIDES = (
    FactSpec("precision.fp32_target", "text", "the data type the fix would run fp32 matmuls in: tf32, bf16 or fp16"),
    FactSpec("precision.fp32_modelled_ms", "ms", "fp32 matmul/conv kernel time per step whose operator has a model"),
    FactSpec("precision.fp32_gain_ms", "ms", "what the target type is taken to give back per step: per operator "
             "from its roofline, half the time of the unmodelled rest"),
    FactSpec("precision.fp32_gemms", "table", "fp32 matmuls and convolutions off the tensor cores by operator and "
             "shape, with their roofline and the gain in the target type", columns=ROW_COLUMNS),
)


def target_dtype(spec: GpuSpec, tf32_capable: bool) -> str | None:
    """The fix's data type on this GPU, or None when its matrix units take none of them."""
    if tf32_capable and "tf32" in spec.matrix:
        return "tf32"
    return next((d for d in ("bf16", "fp16") if d in spec.matrix), None)


@analyzer("fp32_gemms", needs=("kernel",), provides=PROVIDES)
def fp32_gemms(view: TraceView) -> dict[str, Any]:
    """fp32 matmuls/convs off the tensor cores, by operator and shape, and their gain in the fix's dtype."""
    w = window(view)
    mm = classify(w.kernels)
    fp32 = mm["fp32"]
    if not fp32.any():
        return {}
    steps = max(view.step_count, 1)
    dur = mm["dur"][fp32].astype("float64")
    row = w.row[mm["rows"][fp32]]
    t = w.table
    modelled = (np.isin(t["category"].to_numpy()[row], MATRIX) & t["flops"].notna().to_numpy()[row]
                & (t["dtype"].to_numpy()[row] == "fp32"))
    _, cores, tf32 = device_caps(view)
    target = target_dtype(w.spec, tf32) if w.spec is not None and cores else None
    ids, n = group_by.group_ids(np.where(modelled, row, -1))
    ns = group_by.sums(ids, n, dur)
    first = group_by.first_rows(ids, n)
    total = float(dur.sum())
    rows, gain_ns, modelled_ns = [], 0.0, 0.0
    for g in group_by.by_weight(ns, "stable"):
        if not modelled[first[g]]:
            gain_ns += MAX_GAIN * ns[g]
            continue
        r = t.iloc[int(row[first[g]])]
        speedup = _speedup(r, w.spec, target) if target else None
        gain = ns[g] * max(0.0, 1 - max(1 / speedup, MAX_GAIN)) if speedup else MAX_GAIN * ns[g]
        gain_ns += gain
        modelled_ns += ns[g]
        rows.append({"op": r["op"], "category": r["category"], "shape": r["shape"], "dtype": "fp32",
                     "ms": float(ns[g]) / steps / NS_PER_MS, "share": float(ns[g]) / total, "gflops": r["gflops"],
                     "tflops_s": r["tflops_s"], "roofline_share": _num(r["roofline_share"]), "bound": r["bound"],
                     "speedup_at_roof": speedup, "gain_ms": float(gain) / steps / NS_PER_MS, "site": r["site"],
                     "kernel": r["kernel"]})
    out: dict[str, Any] = {"precision.fp32_modelled_ms": float(modelled_ns) / steps / NS_PER_MS,
                           "precision.fp32_gemms": records(rows[:TOP_N])}
    if target:
        out["precision.fp32_target"] = target
        out["precision.fp32_gain_ms"] = float(gain_ns) / steps / NS_PER_MS
    return out


def _speedup(r: Any, spec: GpuSpec, target: str) -> float | None:
    """The row's roof time in fp32 over its roof time in ``target`` (>= 1 where the target is faster)."""
    peak = spec.peak_tflops("matrix", target)
    if peak is None or not np.isfinite(r["roof_ns"]) or not r["roof_ns"]:
        return None
    moved = r["bytes"] if target == "tf32" else r["bytes"] / 2
    roof = max(r["flops"] / (peak * 1e3), moved / (spec.memory_tb_s * 1e3))
    return float(r["roof_ns"] / roof) if roof else None


def _num(x: Any) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None
