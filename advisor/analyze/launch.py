"""Kernel launch overhead: kernels shorter than the host call that launched them, and launch delays.

For every kernel whose launch call is in the trace: ``call`` is the launch
call's duration on the host, and ``delay`` the time from the call's end to
the kernel's start (large when the GPU still has queued work, small when
the GPU waits for each launch). A kernel shorter than its launch call
finishes before the host can issue the next one, so a stream of them keeps
the GPU waiting on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze.common import NS_PER_MS, site
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.gpu_kernels import kernels_in_window
from advisor.analyze.registry import analyzer
from advisor.analyze.view import TraceView

TOP_N = 10

PROVIDES = (
    FactSpec("launch.host_ms", "ms", "host time per step inside kernel launch calls"),
    FactSpec("launch.call_us_median", "us", "median duration of a kernel launch call"),
    FactSpec("launch.delay_us_median", "us", "median time from a launch call's end to its kernel's start"),
    FactSpec("launch.short_kernels_per_step", "count", "kernels per step that run shorter than their launch call"),
    FactSpec("launch.short_kernel_fraction", "fraction", "share of kernels that run shorter than their launch call"),
    FactSpec("launch.short_kernel_ms", "ms", "kernel time per step in kernels shorter than their launch call"),
    FactSpec("launch.linked_fraction", "fraction", "share of kernels whose launch call is in the trace"),
    FactSpec("launch.top_site", "text", "the user's line (or operator) with the most short kernels"),
    FactSpec("launch.by_op", "table", "operators whose kernels are shortest next to their launch calls", columns={
        "op": "text: outermost operator", "short_per_step": "count: short kernels per step",
        "kernel_us": "us: mean kernel duration", "call_us": "us: mean launch call duration",
        "site": "text: the user's line that calls it most", "file": "text: file", "line": "count: line",
    }),
)


@analyzer("launch", needs=("kernel", "cuda_runtime"), provides=PROVIDES)
def launch(view: TraceView) -> dict[str, Any]:
    """How long launch calls take next to the kernels they launch, and how late kernels start."""
    links = view.gpu
    ks = kernels_in_window(links)
    linked = ks[ks["launch"] >= 0]
    if len(ks) == 0 or len(linked) == 0:
        return {"launch.linked_fraction": 0.0} if len(ks) else {}
    steps = links.steps
    call = (linked["launch_end"] - linked["launch_ts"]).to_numpy()
    delay = (linked["ts"] - linked["launch_end"]).to_numpy()
    short = linked[linked["dur"].to_numpy() < call].assign(call=call[linked["dur"].to_numpy() < call])
    out: dict[str, Any] = {
        "launch.host_ms": float(call.sum()) / steps / NS_PER_MS,
        "launch.call_us_median": float(np.median(call)) / 1e3,
        "launch.delay_us_median": float(np.median(delay)) / 1e3,
        "launch.short_kernels_per_step": len(short) / steps,
        "launch.short_kernel_fraction": len(short) / len(linked),
        "launch.short_kernel_ms": float(short["dur"].sum()) / steps / NS_PER_MS,
        "launch.linked_fraction": len(linked) / len(ks),
    }
    rows = []
    if len(short):
        g = short.groupby(["op", "src_file", "src_line", "src_func"], sort=False).agg(
            n=("dur", "size"), kernel=("dur", "mean"), call=("call", "mean")).reset_index()
        for r in g.sort_values("n", ascending=False).head(TOP_N).itertuples(index=False):
            rows.append({"op": r.op, "short_per_step": r.n / steps, "kernel_us": r.kernel / 1e3, "call_us": r.call / 1e3,
                         "site": site(r.src_file, int(r.src_line), r.src_func), "file": r.src_file,
                         "line": int(r.src_line)})
    out["launch.by_op"] = records(rows)
    if rows:
        out["launch.top_site"] = rows[0]["site"] or rows[0]["op"]
    return out
