"""What one profiled kernel's counters mean: bound class, roofline, occupancy limiter, waves, stalls,
coalescing, bank conflicts, floating-point mix.

Pure functions of the per-launch table (:mod:`advisor.load.ncu_tables`); the analyzers in
:mod:`.kernels` call :func:`per_kernel` and publish the result. Definitions:

bound
    ``memory`` when the busiest memory unit is at least :data:`BUSY_PCT` of its peak and busier
    than the SMs; ``compute`` when the SMs are at least :data:`BUSY_PCT` and busier than memory;
    otherwise ``small-grid`` when the grid does not fill the GPU once (under one wave per SM), else
    ``latency`` (neither unit busy: warps wait, on dependencies or on too few of them). This is the
    usual reading of Nsight Compute's Speed Of Light section; 60% is where NVIDIA's guidance calls
    a unit well used.
roofline
    Achieved FLOP/s = (add + mul + 2 x fma) per cycle x the SM clock, per precision. Arithmetic
    intensity = FLOP/s over DRAM bytes/s. The ridge point = peak FLOP/s (2 x peak FMA per cycle x
    the SM clock) over peak DRAM bytes/s (peak bytes per DRAM cycle x the DRAM clock), for the
    precision the kernel mostly uses. Below the ridge the kernel sits under the memory roof.
occupancy limiter
    The block limit(s) (registers, shared memory, warps, block slots, barriers) that equal the
    smallest one, when theoretical occupancy is below 100%.
tail (last_wave_idle)
    With W waves per SM, the share of block slots idle over the kernel's waves:
    (ceil(W) - W) / ceil(W). A grid of 1.2 waves leaves 40% of the slots idle.
stalls
    Cycles per issued instruction by reason, as a share of all cycles between two issues
    ("selected" and "not_selected" are not stalls and are left out).
excess_sector_fraction
    Share of the L2 sectors of global accesses beyond what fully coalesced accesses would need.
smem_excess_fraction
    Share of shared-memory wavefronts beyond the ideal, i.e. caused by bank conflicts.
measured FLOPs and bytes of one launch (``ncu_flops``, ``ncu_bytes``)
    Bytes: DRAM bytes read + written (``dram__bytes_read.sum`` + ``dram__bytes_write.sum``), else the DRAM
    bandwidth x the duration. FLOPs: ncu's per-precision counts (``flop_count_{dp,sp,hp}``) where the
    collection asked for them, else the SASS add/mul/fma rates above x the duration; plus the math ops
    of the tensor-core path (``sm__ops_path_tensor_*``), which the instruction counts do not see. Where
    neither exists the FLOPs are unknown (None), not zero (a tensor-path count of 0 alone says nothing of
    the FLOPs done off that path).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["BUSY_PCT", "bound_class", "per_kernel"]

BUSY_PCT = 60.0
_LIMITS = {"block_limit_registers": "registers", "block_limit_shared_mem": "shared memory",
           "block_limit_warps": "block size (warps)", "block_limit_sm": "block slots",
           "block_limit_barriers": "barriers"}
_NOT_STALLS = {"stall_selected", "stall_not_selected"}


def _num(row: pd.Series, key: str) -> float | None:
    value = row.get(key)
    if value is None or isinstance(value, str):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def bound_class(sm_pct: float | None, mem_pct: float | None, waves: float | None) -> str:
    """memory / compute / small-grid / latency, or unknown without the Speed Of Light numbers."""
    if sm_pct is None or mem_pct is None:
        return "unknown"
    if mem_pct >= BUSY_PCT and mem_pct >= sm_pct:
        return "memory"
    if sm_pct >= BUSY_PCT:
        return "compute"
    if waves is not None and waves < 1:
        return "small-grid"
    return "latency"


def _flops(row: pd.Series, prefix: str) -> float | None:
    parts = [_num(row, f"{prefix}{op}_per_cycle") for op in ("add", "mul", "fma")]
    hz = _num(row, "sm_hz")
    if hz is None or all(p is None for p in parts):
        return None
    add, mul, fma = (p or 0.0 for p in parts)
    return (add + mul + 2 * fma) * hz


def _roofline(row: pd.Series) -> dict[str, Any]:
    fp64, fp32, fp16 = _flops(row, "d"), _flops(row, "f"), _flops(row, "h")
    total = sum(v for v in (fp64, fp32, fp16) if v is not None) if any(v is not None for v in (fp64, fp32, fp16)) \
        else None
    hz, dram_hz = _num(row, "sm_hz"), _num(row, "dram_hz")
    bw, bw_peak_cycle = _num(row, "dram_bytes_per_s"), _num(row, "dram_peak_bytes_per_cycle")
    bw_peak = bw_peak_cycle * dram_hz if bw_peak_cycle and dram_hz else None
    d_peak, f_peak = _num(row, "dfma_peak_per_cycle"), _num(row, "ffma_peak_per_cycle")
    use_fp64 = (fp64 or 0.0) > (fp32 or 0.0)
    peak_fma = d_peak if use_fp64 else f_peak
    peak = 2 * peak_fma * hz if peak_fma and hz else None
    ai = total / bw if total is not None and bw else None
    ridge = peak / bw_peak if peak and bw_peak else None
    roof = min(peak, ai * bw_peak) if peak and ai is not None and bw_peak else None
    ratio = f_peak / d_peak if f_peak and d_peak else _num(row, "fp32_to_fp64_ratio")
    return {
        "gflops": None if total is None else total / 1e9, "fp64_share": (fp64 or 0.0) / total if total else None,
        "arithmetic_intensity": ai, "ridge_point": ridge,
        "roofline_side": None if ai is None or ridge is None else ("memory" if ai < ridge else "compute"),
        "roof_pct": 100 * total / roof if roof and total is not None else None,
        "precision": None if total is None else ("fp64" if use_fp64 else "fp32"), "fp32_to_fp64": ratio,
    }


def _occupancy(row: pd.Series) -> str:
    theoretical = _num(row, "theoretical_occ_pct")
    limits = {name: _num(row, col) for col, name in _LIMITS.items() if _num(row, col) is not None}
    if theoretical is None or not limits:
        return ""
    if theoretical >= 99.99:
        return "none"
    low = min(limits.values())
    return ", ".join(name for name, value in limits.items() if value == low)


def _stalls(row: pd.Series) -> tuple[str, float | None, str]:
    total = _num(row, "warp_cycles_per_issue")
    stalls = {k[len("stall_"):]: _num(row, k) for k in row.index if k.startswith("stall_") and k not in _NOT_STALLS}
    stalls = {k: v for k, v in stalls.items() if v is not None}
    if not stalls:
        return "", None, ""
    total = total or sum(stalls.values())
    ranked = sorted(stalls.items(), key=lambda kv: kv[1], reverse=True)
    top, cycles = ranked[0]
    text = ", ".join(f"{name} {value / total:.0%}" for name, value in ranked[:3] if total)
    return top, (cycles / total if total else None), text


def _measured(row: pd.Series, flop_rate: float | None) -> dict[str, Any]:
    """FLOPs and DRAM bytes of one launch as the counters measured them (see the module docstring)."""
    seconds = (_num(row, "duration_ns") or 0.0) / 1e9
    read, write = _num(row, "dram_read_bytes"), _num(row, "dram_write_bytes")
    rate = _num(row, "dram_bytes_per_s")
    if read is not None or write is not None:
        nbytes: float | None = (read or 0.0) + (write or 0.0)
    else:
        nbytes = rate * seconds if rate is not None and seconds else None
    counted = [_num(row, f"flop_count_{p}") for p in ("dp", "sp", "hp")]
    tensor = [_num(row, k) for k in row.index if k.startswith("tensor_ops_")]
    if any(c is not None for c in counted):
        flops: float | None = sum(c for c in counted if c is not None)
    else:
        flops = flop_rate * seconds if flop_rate is not None and seconds else None
    on_tensor = sum(t for t in tensor if t is not None)
    if on_tensor:  # a zero here alone says nothing of the FLOPs off the tensor path: they stay unknown
        flops = (flops or 0.0) + on_tensor
    return {"ncu_flops": flops, "ncu_bytes": nbytes}


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def derive(row: pd.Series) -> dict[str, Any]:
    """Every derived figure of one launch (or the mean of one kernel's launches)."""
    sm, mem, waves = _num(row, "sm_pct"), _num(row, "mem_pct"), _num(row, "waves_per_sm")
    top, top_share, stalls = _stalls(row)
    global_sectors, ideal = _num(row, "l2_global_sectors"), _num(row, "l2_global_sectors_ideal")
    smem_total = _num(row, "smem_wavefronts")
    smem_excess = _num(row, "smem_excess_wavefronts")
    if smem_excess is None:
        conflicts = sum(v for v in (_num(row, "smem_conflicts_ld"), _num(row, "smem_conflicts_st")) if v)
        smem_excess = conflicts if conflicts else None
    requests = sum(v for v in (_num(row, "gld_requests"), _num(row, "gst_requests")) if v) or None
    sectors = sum(v for v in (_num(row, "gld_sectors"), _num(row, "gst_sectors")) if v) or None
    roofline = _roofline(row)
    rate = roofline["gflops"] * 1e9 if roofline["gflops"] is not None else None
    return {
        "bound": bound_class(sm, mem, waves), "sm_pct": sm, "mem_pct": mem, "dram_pct": _num(row, "dram_pct"),
        **roofline, **_measured(row, rate),
        "theoretical_occ_pct": _num(row, "theoretical_occ_pct"), "achieved_occ_pct": _num(row, "achieved_occ_pct"),
        "occ_limiter": _occupancy(row), "registers_per_thread": _num(row, "registers_per_thread"),
        "block_size": _num(row, "block_size"), "grid_size": _num(row, "grid_size"), "waves_per_sm": waves,
        "last_wave_idle": (math.ceil(waves) - waves) / math.ceil(waves) if waves else None,
        "top_stall": top, "top_stall_share": top_share, "stalls": stalls,
        "sectors_per_request": _ratio(sectors, requests),
        "excess_sector_fraction": _ratio(None if global_sectors is None or ideal is None else global_sectors - ideal,
                                         global_sectors),
        "smem_excess_fraction": _ratio(smem_excess, smem_total),
        "fp64_pipe_pct": _num(row, "fp64_pipe_pct"),
    }


def per_kernel(launches: pd.DataFrame) -> pd.DataFrame:
    """One row per (report, kernel): the mean of its launches' metrics, then :func:`derive`."""
    if len(launches) == 0:
        return pd.DataFrame()
    numeric = launches.select_dtypes(include="number").columns.difference(["launch", "pid", "stream"])
    grouped = launches.groupby(["report", "kernel"], sort=False)
    means = grouped[list(numeric)].mean()
    first = grouped[["function", "mangled", "device_name", "cc", "block_dim", "grid_dim"]].first()
    counts = grouped.size().rename("launches")
    table = pd.concat([first, counts, means], axis=1).reset_index()
    rows = []
    for _, row in table.iterrows():
        out = {"report": row["report"], "kernel": row["kernel"], "function": row["function"],
               "launches": int(row["launches"]),
               "duration_us": None if pd.isna(row.get("duration_ns", np.nan)) else row["duration_ns"] / 1e3,
               "device": row["device_name"], "cc": row["cc"] or _cc(row)}
        out.update(derive(row))
        rows.append(out)
    return pd.DataFrame(rows)


def _cc(row: pd.Series) -> str:
    major, minor = _num(row, "cc_major"), _num(row, "cc_minor")
    return f"{int(major)}.{int(minor)}" if major is not None and minor is not None else ""
