"""The GPU kernels with the most time, and the operators, source lines and modules that launch them.

Kernel time is the sum of kernel durations (streams that overlap count
twice), over kernels that start in the GPU window; ``share`` is of that
total. Each kernel name gets the operator, line and module that launched
most of its time, through the links in :mod:`.gpu_ops`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze.common import NS_PER_MS, site
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.gpu_ops import GpuLinks
from advisor.analyze.kernel_names import is_matmul_or_conv, kernel_precision, uses_tensor_cores
from advisor.analyze.registry import analyzer
from advisor.analyze.view import TraceView

__all__ = ["kernels_in_window"]

TOP_N = 15

KERNEL_COLUMNS = {
    "name": "text: kernel name",
    "ms": "ms: kernel time per step",
    "share": "fraction: of total GPU kernel time",
    "calls_per_step": "count: launches per step",
    "avg_us": "us: mean duration",
    "kind": "text: compute or comm",
    "op": "text: outermost operator that launched most of its time",
    "op_inner": "text: innermost operator that launched it",
    "site": "text: user file:line (function) that launched most of its time",
    "file": "text: that file", "line": "count: that line", "function": "text: function of that line",
    "module": "text: nn.Module path it ran in most",
    "phase": "text: phase it was launched in most",
    "matmul": "bool: a matrix multiply or convolution kernel",
    "tensor_core": "bool: its name says it runs on tensor (matrix) cores",
    "precision": "text: fp32, tf32, fp16, bf16 or '' as far as the name says",
}

PROVIDES = (
    FactSpec("kernels.top", "table", f"the {TOP_N} kernels with the most time per step", columns=KERNEL_COLUMNS),
    FactSpec("kernels.count_per_step", "count", "kernel launches per step"),
    FactSpec("kernels.ms", "ms", "kernel time per step (sum of durations)"),
    FactSpec("kernels.median_us", "us", "median kernel duration"),
    FactSpec("kernels.top_name", "text", "the kernel with the most time"),
    FactSpec("kernels.top_share", "fraction", "share of kernel time in the top kernel"),
    FactSpec("kernels.top3_share", "fraction", "share of kernel time held by the 3 kernels with the most time"),
    FactSpec("kernels.distinct", "count", "number of distinct kernel names"),
    FactSpec("kernels.by_op", "table", "operators by the GPU kernel time they launch", columns={
        "op": "text: outermost operator", "ms": "ms: kernel time per step", "share": "fraction: of kernel time",
        "kernels_per_step": "count: kernels per step", "top_kernel": "text: its kernel with the most time",
        "site": "text: the user's line that calls it most", "module": "text: nn.Module path",
    }),
    FactSpec("kernels.by_line", "table", "source lines by the GPU kernel time they launch", columns={
        "site": "text: user file:line (function)", "file": "text: file", "line": "count: line",
        "ms": "ms: kernel time per step", "share": "fraction: of kernel time",
        "kernels_per_step": "count: kernels per step", "top_kernel": "text: its kernel with the most time",
        "op": "text: its operator with the most kernel time",
    }),
)


def kernels_in_window(links: GpuLinks) -> pd.DataFrame:
    """The kernels that start inside the GPU window."""
    ops = links.ops
    return ops[(ops["cat"] == "kernel") & (ops["ts"] >= links.lo) & (ops["ts"] < links.hi)]


def _dominant(frame: pd.DataFrame, by: str, keys: list[str]) -> pd.DataFrame:
    """For each value of ``by``, the ``keys`` that carry most of its kernel time."""
    g = frame.groupby([by, *keys], sort=False, observed=True)["dur"].sum().reset_index()
    return g.sort_values("dur", ascending=False, kind="stable").drop_duplicates(by).set_index(by)


def _top(kernels: pd.DataFrame, steps: int, total: int) -> list[dict[str, Any]]:
    by_name = kernels.groupby("name", sort=False).agg(dur=("dur", "sum"), calls=("dur", "size"))
    by_name = by_name.sort_values("dur", ascending=False, kind="stable").head(TOP_N)
    top = kernels[kernels["name"].isin(by_name.index)]
    where = _dominant(top, "name", ["op", "op_inner", "src_file", "src_line", "src_func", "module", "phase", "kind"])
    rows = []
    for name, r in by_name.iterrows():
        w = where.loc[name]
        line = int(w["src_line"])
        rows.append({
            "name": name, "ms": r["dur"] / steps / NS_PER_MS, "share": r["dur"] / total if total else 0.0,
            "calls_per_step": r["calls"] / steps, "avg_us": r["dur"] / r["calls"] / 1e3, "kind": w["kind"],
            "op": w["op"], "op_inner": w["op_inner"], "site": site(w["src_file"], line, w["src_func"]),
            "file": w["src_file"], "line": line, "function": w["src_func"], "module": w["module"], "phase": w["phase"],
            "matmul": is_matmul_or_conv(name), "tensor_core": uses_tensor_cores(name), "precision": kernel_precision(name),
        })
    return rows


def _by_op(kernels: pd.DataFrame, steps: int, total: int) -> list[dict[str, Any]]:
    known = kernels[kernels["op"] != ""]
    if len(known) == 0:
        return []
    g = known.groupby("op", sort=False).agg(dur=("dur", "sum"), n=("dur", "size"))
    g = g.sort_values("dur", ascending=False).head(TOP_N)
    top_kernel = _dominant(known, "op", ["name"])["name"]
    where = _dominant(known, "op", ["src_file", "src_line", "src_func", "module"])
    return [{
        "op": op, "ms": r["dur"] / steps / NS_PER_MS, "share": r["dur"] / total if total else 0.0,
        "kernels_per_step": r["n"] / steps, "top_kernel": top_kernel.get(op, ""),
        "site": site(where.loc[op, "src_file"], int(where.loc[op, "src_line"]), where.loc[op, "src_func"]),
        "module": where.loc[op, "module"],
    } for op, r in g.iterrows()]


def _by_line(kernels: pd.DataFrame, steps: int, total: int) -> list[dict[str, Any]]:
    located = kernels[kernels["src_line"] >= 0]
    if len(located) == 0:
        return []
    keys = ["src_file", "src_line", "src_func"]
    g = located.groupby(keys, sort=False).agg(dur=("dur", "sum"), n=("dur", "size")).reset_index()
    g = g.sort_values("dur", ascending=False).head(TOP_N)
    located = located.assign(key=located["src_file"] + ":" + located["src_line"].astype(str))
    top_kernel = _dominant(located, "key", ["name"])["name"]
    top_op = _dominant(located, "key", ["op"])["op"]
    rows = []
    for r in g.itertuples(index=False):
        key = f"{r.src_file}:{r.src_line}"
        rows.append({"site": site(r.src_file, int(r.src_line), r.src_func), "file": r.src_file, "line": int(r.src_line),
                     "ms": r.dur / steps / NS_PER_MS, "share": r.dur / total if total else 0.0,
                     "kernels_per_step": r.n / steps, "top_kernel": top_kernel.get(key, ""), "op": top_op.get(key, "")})
    return rows


@analyzer("gpu_kernels", needs=("kernel",), provides=PROVIDES)
def gpu_kernels(view: TraceView) -> dict[str, Any]:
    """Top kernels by time, with the operator, line and module that launch them."""
    links = view.gpu
    ks = kernels_in_window(links)
    if len(ks) == 0:
        return {}
    steps = links.steps
    total = int(ks["dur"].sum())
    top = _top(ks, steps, total)
    shares = ks.groupby("name", sort=False)["dur"].sum().sort_values(ascending=False)
    return {
        "kernels.top": records(top),
        "kernels.count_per_step": len(ks) / steps,
        "kernels.ms": total / steps / NS_PER_MS,
        "kernels.median_us": float(np.median(ks["dur"])) / 1e3,
        "kernels.top_name": top[0]["name"],
        "kernels.top_share": top[0]["share"],
        "kernels.top3_share": float(shares.head(3).sum()) / total if total else 0.0,
        "kernels.distinct": int(len(shares)),
        "kernels.by_op": records(_by_op(ks, steps, total)),
        "kernels.by_line": records(_by_line(ks, steps, total)),
    }
