"""Kernel-stage analyzers: why each profiled kernel is slow, and who launched it.

``ncu_kernels`` publishes one record per profiled kernel (the mean over its launches) with the
figures of :mod:`.metrics`, tied back, where the framework stage saw the kernel, to the
PyTorch operator, source line and ``nn.Module`` that launched it and to its share of GPU time, and,
where that operator is modelled (``ops.efficiency``), the model's FLOPs and bytes per call beside the
measured ones (:mod:`.model_check`).
``ncu_rules`` publishes Nsight Compute's own rule results, marked as ncu's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from advisor.analyze.findings import FactSpec, records
from advisor.analyze.kernel.metrics import per_kernel
from advisor.analyze.kernel.model_check import MODEL_COLUMNS, beside_model
from advisor.analyze.kernel.view import KernelView
from advisor.analyze.registry import analyzer
from advisor.tools.ncu_names import same_kernel

KERNEL_COLUMNS = {
    "report": "text: the file the kernel's results came from",
    "kernel": "text: kernel name as ncu printed it (demangled)",
    "function": "text: function name without scope, templates or parameters",
    "launches": "count: profiled launches (the figures are their mean)",
    "duration_us": "us: duration of one launch",
    "device": "text: GPU name, where the file has it",
    "cc": "text: compute capability",
    "bound": "text: memory, compute, latency or small-grid (see kernel_metrics)",
    "sm_pct": "ratio: compute (SM) throughput, % of peak",
    "mem_pct": "ratio: memory throughput (busiest unit), % of peak",
    "dram_pct": "ratio: DRAM throughput, % of peak",
    "gflops": "ratio: achieved GFLOP/s, all precisions",
    "fp64_share": "fraction: share of the FLOPs done in fp64",
    "arithmetic_intensity": "ratio: FLOPs per DRAM byte",
    "ridge_point": "ratio: FLOPs per byte where the memory roof meets the compute roof",
    "roofline_side": "text: memory or compute: which roof is above the kernel",
    "roof_pct": "ratio: achieved FLOP/s as % of the roof at its arithmetic intensity",
    "precision": "text: the precision with most FLOPs (fp64 or fp32)",
    "fp32_to_fp64": "ratio: the GPU's fp32 to fp64 throughput ratio (2 on datacenter GPUs, 32-64 on others)",
    "theoretical_occ_pct": "ratio: theoretical occupancy, %",
    "achieved_occ_pct": "ratio: achieved occupancy, %",
    "occ_limiter": "text: what limits theoretical occupancy (registers, shared memory, block size...), or none",
    "registers_per_thread": "count: registers per thread",
    "block_size": "count: threads per block",
    "grid_size": "count: blocks per grid",
    "waves_per_sm": "ratio: waves of blocks per SM",
    "last_wave_idle": "fraction: share of block slots left idle by the partial last wave",
    "top_stall": "text: the warp stall reason with most cycles",
    "top_stall_share": "fraction: its share of the cycles between two issued instructions",
    "stalls": "text: the three main stall reasons with their shares",
    "sectors_per_request": "ratio: 32-byte sectors per global load/store request",
    "excess_sector_fraction": "fraction: share of global-access L2 sectors beyond fully coalesced access",
    "smem_excess_fraction": "fraction: share of shared-memory wavefronts caused by bank conflicts",
    "fp64_pipe_pct": "ratio: FP64 pipe busy, % of peak",
    "framework_name": "text: the kernel's name in the framework stage's trace (empty: the trace has no such kernel)",
    "op": "text: PyTorch operator that launched it (framework stage)",
    "site": "text: file:line (function) in the user's code",
    "file": "text: the user's file",
    "line": "count: the line",
    "module": "text: nn.Module path",
    "share": "fraction: share of GPU kernel time (framework stage)",
    "ms_per_step": "ms: GPU time per step (framework stage)",
    "calls_per_step": "count: launches per step (framework stage)",
    "where": "text: the kernel and, where known, the operator, source line and module that launched it",
    **MODEL_COLUMNS,
}
RULE_COLUMNS = {
    "report": "text: the file", "kernel": "text: the kernel",
    "framework_name": "text: the kernel's name in the framework stage's trace (empty: not in it)", "section": "text: ncu section",
    "rule": "text: ncu rule identifier", "type": "text: OPT, WRN, INF or ERR as ncu rated it",
    "message": "text: ncu's own words", "speedup": "ratio: ncu's estimated speedup, %",
}


#: the columns a reader needs first (an evidence table keeps its first columns when the page is narrow): the
#: kernel, its bound class and duration, the model's bytes and FLOPs beside the measured ones, the throughputs
_TELLING = ("kernel", "function", "bound", "duration_us", "model_mb", "ncu_mb", "bytes_ratio", "model_gflop",
            "ncu_gflop", "flop_ratio", "sm_pct", "mem_pct", "dram_pct", "achieved_occ_pct", "occ_limiter", "top_stall")


def _telling_first(row: Mapping[str, Any]) -> dict[str, Any]:
    return {**{k: row[k] for k in _TELLING if k in row}, **{k: v for k, v in row.items() if k not in _TELLING}}


def _origin(kernel: str, function: str, framework: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Where the framework stage saw this kernel: its kernels.top row, joined by :func:`same_kernel`."""
    for row in framework:
        name = str(row.get("name", ""))
        if same_kernel(name, kernel, function):
            return {"framework_name": name, "op": row.get("op", ""), "site": row.get("site", ""),
                    "file": row.get("file", ""), "line": row.get("line", -1), "module": row.get("module", ""),
                    "share": row.get("share"), "ms_per_step": row.get("ms"), "calls_per_step": row.get("calls_per_step")}
    return {"framework_name": "", "op": "", "site": "", "file": "", "line": -1, "module": "", "share": None,
            "ms_per_step": None, "calls_per_step": None}


@analyzer("ncu_kernels", stage="kernel", needs=("launches",), provides=(
    FactSpec("ncu.kernels", "table", "each profiled kernel: bound class, roofline, occupancy, waves, stalls, "
             "coalescing, bank conflicts, fp64, and who launched it", columns=KERNEL_COLUMNS),
    FactSpec("ncu.kernel_count", "count", "kernels profiled with Nsight Compute"),
    FactSpec("ncu.launch_count", "count", "kernel launches profiled"),
    FactSpec("ncu.device", "text", "the GPU the kernels were profiled on"),
))
def ncu_kernels(view: KernelView) -> dict[str, Any]:
    """Per-kernel diagnosis figures from the Nsight Compute counters, tied back to the PyTorch code."""
    table = per_kernel(view.launches)
    if len(table) == 0:
        return {}
    rows = []
    for row in table.to_dict("records"):
        row.update(_origin(row["kernel"], row["function"], view.framework_kernels))
        row.update(beside_model(row["kernel"], row["function"], _value(row.pop("ncu_flops")),
                                _value(row.pop("ncu_bytes")), view.framework_ops))
        row["where"] = _where(row)
        rows.append(_telling_first({k: (None if isinstance(v, float) and pd.isna(v) else v) for k, v in row.items()}))
    rows.sort(key=lambda r: (-(r["share"] or 0), -(r["duration_us"] or 0)))
    devices = [d for d in dict.fromkeys(r["device"] for r in rows) if d]
    return {"ncu.kernels": records(rows), "ncu.kernel_count": len(rows), "ncu.launch_count": len(view.launches),
            "ncu.device": ", ".join(devices) if devices else None}


@analyzer("ncu_rules", stage="kernel", needs=("rules",), provides=(
    FactSpec("ncu.rules", "table", "Nsight Compute's own rule results (ncu's words, not the advisor's)",
             columns=RULE_COLUMNS),
))
def ncu_rules(view: KernelView) -> dict[str, Any]:
    """ncu's rule results that say something (its OK and empty messages are left out)."""
    rules = view.rules
    rules = rules[rules["type"].isin(["OPT", "WRN", "ERR", "INF"]) & (rules["message"].astype(str) != "")]
    keep = ["report", "kernel", "section", "rule", "type", "message", "speedup"]
    out = rules[keep].copy()
    names = _framework_names(view)
    out["framework_name"] = out["kernel"].astype(str).map(lambda k: names.get(k, ""))
    out["message"] = out["message"].astype(str).map(_plain_links)
    return {"ncu.rules": records(out.to_dict("records"))}


def _framework_names(view: KernelView) -> dict[str, str]:
    """ncu's kernel name -> the trace's name of it, for the launches the framework stage saw."""
    launches = view.launches
    if len(launches) == 0 or not view.framework_kernels:
        return {}
    functions = launches["function"] if "function" in launches else launches["kernel"]
    out = {}
    for kernel, function in dict.fromkeys(zip(launches["kernel"].astype(str), functions.astype(str))):
        out[kernel] = str(_origin(kernel, function, view.framework_kernels)["framework_name"])
    return out


def _value(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and pd.isna(x)) else float(x)


def _where(row: Mapping[str, Any]) -> str:
    """``addConstDouble3 (addConstDouble3.ncu-rep), launched by aten::add at train.py:41 (step) in model.fc``."""
    text = f"{row['function']} ({row['report']})"
    if row.get("op"):
        text += f", launched by {row['op']}"
    if row.get("site"):
        text += f" at {row['site']}"
    if row.get("module"):
        text += f" in {row['module']}"
    return text


def _plain_links(text: str) -> str:
    """ncu_report writes links as ``@url:text:link@`` / ``@section:id:text@``; keep the text."""
    text = re.sub(r"@url:([^:@]+):(https?:[^@]+)@", r"\1 (\2)", text)
    return re.sub(r"@\w+:[^:@]+:([^@]+)@", r"\1", text)
