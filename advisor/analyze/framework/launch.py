"""Kernel launch overhead: kernels shorter than the host call that launched them, and launch delays.

For every kernel whose launch call is in the trace: ``call`` is the launch
call's duration on the host, and ``delay`` the time from the call's end to
the kernel's start (large when the GPU still has queued work, small when
the GPU waits for each launch). A kernel shorter than its launch call
finishes before the host can issue the next one, so a stream of them keeps
the GPU waiting on the host.

Kernels replayed from a CUDA or HIP graph are left out of these figures:
one ``cudaGraphLaunch`` issues all of a graph's kernels, so comparing each
of them with that one call would call a graphed step launch-bound, which is
the problem graphs solve. ``launch.graph_kernel_fraction`` says how many.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze import group_by
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.gpu_kernels import kernels_in_window
from advisor.analyze.framework.per_step import NS_PER_MS, site
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

TOP_N = 10

PROVIDES = (
    FactSpec("launch.host_ms", "ms", "host time per step inside kernel launch calls"),
    FactSpec("launch.call_us_median", "us", "median duration of a kernel launch call"),
    FactSpec("launch.delay_us_median", "us", "median time from a launch call's end to its kernel's start"),
    FactSpec("launch.short_kernels_per_step", "count", "kernels per step that run shorter than their launch call"),
    FactSpec("launch.short_kernel_fraction", "fraction", "share of kernels that run shorter than their launch call"),
    FactSpec("launch.short_kernel_ms", "ms", "kernel time per step in kernels shorter than their launch call"),
    FactSpec("launch.linked_fraction", "fraction", "share of kernels whose launch call is in the trace"),
    FactSpec("launch.graph_kernel_fraction", "fraction", "share of kernels replayed from CUDA/HIP graphs "
             "(one graph launch call issues them all; left out of the other launch figures)"),
    FactSpec("launch.top_site", "text", "the user's line (or operator) with the most short kernels"),
    FactSpec("launch.by_op", "table", "operators whose kernels are shortest next to their launch calls", columns={
        "op": "text: outermost operator", "short_per_step": "count: short kernels per step",
        "kernel_us": "us: mean kernel duration", "call_us": "us: mean launch call duration",
        "site": "text: the user's line that calls it most", "file": "text: file", "line": "count: line",
    }),
)


def _is_graph_launch(name: str) -> bool:
    """cudaGraphLaunch, hipGraphLaunch, cuGraphLaunch (and their _ptsz / _v2 forms)."""
    return "GraphLaunch" in name


@analyzer("launch", needs=("kernel", "cuda_runtime"), provides=PROVIDES)
def launch(view: TraceView) -> dict[str, Any]:
    """How long launch calls take next to the kernels they launch, and how late kernels start."""
    links = view.gpu
    ks = kernels_in_window(links)
    linked = ks["launch"].to_numpy() >= 0
    graphed = linked & np.array([_is_graph_launch(str(n)) for n in ks["launch_name"].to_numpy(dtype=object)], bool)
    rows_linked = np.flatnonzero(linked & ~graphed)
    if len(ks) == 0 or len(rows_linked) == 0:
        if len(ks) == 0:
            return {}
        return {"launch.linked_fraction": float(linked.mean()), "launch.graph_kernel_fraction": float(graphed.mean())}
    steps = links.steps
    col = {c: ks[c].to_numpy()[rows_linked] for c in ("ts", "dur", "launch_ts", "launch_end", "src_line")}
    call = col["launch_end"] - col["launch_ts"]
    delay = col["ts"] - col["launch_end"]
    short = np.flatnonzero(col["dur"] < call)
    out: dict[str, Any] = {
        "launch.host_ms": float(call.sum()) / steps / NS_PER_MS,
        "launch.call_us_median": float(np.median(call)) / 1e3,
        "launch.delay_us_median": float(np.median(delay)) / 1e3,
        "launch.short_kernels_per_step": len(short) / steps,
        "launch.short_kernel_fraction": len(short) / len(rows_linked),
        "launch.short_kernel_ms": float(col["dur"][short].sum()) / steps / NS_PER_MS,
        "launch.linked_fraction": float(linked.mean()),
        "launch.graph_kernel_fraction": float(graphed.mean()),
    }
    rows = []
    if len(short):
        keys = [ks[c].to_numpy(dtype=object)[rows_linked][short] for c in ("op", "src_file")]
        keys += [col["src_line"][short], ks["src_func"].to_numpy(dtype=object)[rows_linked][short]]
        ids, n_groups = group_by.group_ids(*keys)
        n = np.bincount(ids, minlength=n_groups)
        kernel = group_by.sums(ids, n_groups, col["dur"][short]) / n
        calls = group_by.sums(ids, n_groups, call[short]) / n
        first = group_by.first_rows(ids, n_groups)
        for k in group_by.by_weight(n, "quicksort")[:TOP_N]:
            op, file, line, func = (key[first[k]] for key in keys)
            rows.append({"op": op, "short_per_step": n[k] / steps, "kernel_us": kernel[k] / 1e3,
                         "call_us": calls[k] / 1e3, "site": site(file, int(line), func), "file": file,
                         "line": int(line)})
    out["launch.by_op"] = records(rows)
    if rows:
        out["launch.top_site"] = rows[0]["site"] or rows[0]["op"]
    return out
