"""The GPU kernels with the most time, and the operators, source lines and modules that launch them.

Kernel time is the sum of kernel durations (streams that overlap count
twice), over kernels that start in the GPU window; ``share`` is of that
total. Each kernel name gets the operator, line and module that launched
most of its time, through the links in :mod:`.gpu_links`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze import group_by
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.gpu_links import GpuLinks
from advisor.analyze.framework.kernel_names import is_matmul_or_conv, kernel_precision, uses_tensor_cores
from advisor.analyze.framework.per_step import NS_PER_MS, site
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

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
    """The kernels that start inside the GPU window (computed once per trace)."""
    return links.kernels


class _Rows:
    """Some columns of the kernels as arrays, and groupings over them (see :mod:`~advisor.analyze.group_by`)."""

    def __init__(self, kernels: pd.DataFrame, columns: tuple[str, ...]) -> None:
        self.col = {c: kernels[c].to_numpy(dtype=object) if c != "src_line" and c != "dur" else kernels[c].to_numpy()
                    for c in columns}
        self.dur = kernels["dur"].to_numpy()

    def where(self, mask: np.ndarray) -> _Rows:
        out = object.__new__(_Rows)
        out.col = {c: v[mask] for c, v in self.col.items()}
        out.dur = self.dur[mask]
        return out

    def dominant(self, by: str | np.ndarray, keys: list[str]) -> dict[Any, dict[str, Any]]:
        """For each value of ``by``, the values of ``keys`` that carry most of its kernel time (ties: first seen)."""
        by_values = self.col[by] if isinstance(by, str) else by
        by_ids, n_by = group_by.group_ids(by_values)
        ids, n = group_by.group_ids(by_ids, *(self.col[k] for k in keys))
        best = group_by.dominant(by_ids, n_by, ids, n, group_by.sums(ids, n, self.dur))
        first = group_by.first_rows(ids, n)[best]
        return {by_values[r]: {k: self.col[k][r] for k in keys} for r in first}

    def totals(self, *keys: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per group of ``keys`` (in order of first appearance): its first row, summed duration and count."""
        ids, n = group_by.group_ids(*(self.col[k] for k in keys))
        return group_by.first_rows(ids, n), group_by.sums(ids, n, self.dur), np.bincount(ids, minlength=n), ids


def _top(kernels: _Rows, steps: int, total: int) -> list[dict[str, Any]]:
    first, dur, calls, ids = kernels.totals("name")
    top = group_by.by_weight(dur, "stable")[:TOP_N]
    names = kernels.col["name"]
    where = kernels.where(np.isin(ids, top)).dominant(
        "name", ["op", "op_inner", "src_file", "src_line", "src_func", "module", "phase", "kind"])
    rows = []
    for k in top:
        name = names[first[k]]
        w = where[name]
        line = int(w["src_line"])
        rows.append({
            "name": name, "ms": dur[k] / steps / NS_PER_MS, "share": dur[k] / total if total else 0.0,
            "calls_per_step": calls[k] / steps, "avg_us": dur[k] / calls[k] / 1e3, "kind": w["kind"],
            "op": w["op"], "op_inner": w["op_inner"], "site": site(w["src_file"], line, w["src_func"]),
            "file": w["src_file"], "line": line, "function": w["src_func"], "module": w["module"], "phase": w["phase"],
            "matmul": is_matmul_or_conv(name), "tensor_core": uses_tensor_cores(name), "precision": kernel_precision(name),
        })
    return rows


def _by_op(kernels: _Rows, steps: int, total: int) -> list[dict[str, Any]]:
    known = kernels.where(kernels.col["op"] != "")
    if len(known.dur) == 0:
        return []
    first, dur, n, _ = known.totals("op")
    top_kernel = known.dominant("op", ["name"])
    where = known.dominant("op", ["src_file", "src_line", "src_func", "module"])
    rows = []
    for k in group_by.by_weight(dur, "quicksort")[:TOP_N]:
        op = known.col["op"][first[k]]
        w = where[op]
        rows.append({"op": op, "ms": dur[k] / steps / NS_PER_MS, "share": dur[k] / total if total else 0.0,
                     "kernels_per_step": n[k] / steps, "top_kernel": top_kernel[op]["name"],
                     "site": site(w["src_file"], int(w["src_line"]), w["src_func"]), "module": w["module"]})
    return rows


def _by_line(kernels: _Rows, steps: int, total: int) -> list[dict[str, Any]]:
    located = kernels.where(kernels.col["src_line"] >= 0)
    if len(located.dur) == 0:
        return []
    first, dur, n, _ = located.totals("src_file", "src_line", "src_func")
    files, lines, funcs = located.col["src_file"], located.col["src_line"], located.col["src_func"]
    key = np.array([f"{f}:{ln}" for f, ln in zip(files.tolist(), lines.tolist())], dtype=object)
    top_kernel = located.dominant(key, ["name"])
    top_op = located.dominant(key, ["op"])
    rows = []
    for k in group_by.by_weight(dur, "quicksort")[:TOP_N]:
        r = first[k]
        rows.append({"site": site(files[r], int(lines[r]), funcs[r]), "file": files[r], "line": int(lines[r]),
                     "ms": dur[k] / steps / NS_PER_MS, "share": dur[k] / total if total else 0.0,
                     "kernels_per_step": n[k] / steps, "top_kernel": top_kernel[key[r]]["name"],
                     "op": top_op[key[r]]["op"]})
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
    rows = _Rows(ks, ("name", "op", "op_inner", "src_file", "src_line", "src_func", "module", "phase", "kind"))
    top = _top(rows, steps, total)
    _, shares, _, _ = rows.totals("name")
    shares = np.sort(shares)[::-1]
    return {
        "kernels.top": records(top),
        "kernels.count_per_step": len(ks) / steps,
        "kernels.ms": total / steps / NS_PER_MS,
        "kernels.median_us": float(np.median(ks["dur"])) / 1e3,
        "kernels.top_name": top[0]["name"],
        "kernels.top_share": top[0]["share"],
        "kernels.top3_share": float(shares[:3].sum()) / total if total else 0.0,
        "kernels.distinct": int(len(shares)),
        "kernels.by_op": records(_by_op(rows, steps, total)),
        "kernels.by_line": records(_by_line(rows, steps, total)),
    }
