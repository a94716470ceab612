"""Host memory handed back to the system and faulted in again, every step.

glibc's malloc serves a block above its mmap threshold with a fresh mapping and unmaps it when it is freed; a loop
whose large temporaries (logits, activations, gradient buffers) are such blocks makes the kernel hand out and zero
those pages again in every step. The collector counts each step's minor page faults without the profiler (run.json
``heap.unprofiled_faults``) and prices one fault in the same process (``host_costs.page_fault_us``,
:mod:`advisor.collect.fault_cost`); their product is the time a step spends on the churn, which an allocator that
keeps freed memory (jemalloc, tcmalloc, glibc with its thresholds fixed) or buffers reused from step to step give
back.

The recorded steps are not used for the count: the collector gives the window heap headroom
(:mod:`advisor.collect.heap_headroom`) so that the profiler's records do not push the script onto fresh pages, and
that headroom also hides the script's own churn (``memory.churn_hidden``).
"""

from __future__ import annotations

from typing import Any

from advisor.analyze.findings import FactSpec
from advisor.analyze.framework.per_step import median_faults, unprofiled_step_ms
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

PROVIDES = (
    FactSpec("memory.churn_bytes", "bytes", "memory each step faulted in without the profiler (minor page faults "
             "times the page size, median of the unprofiled steps): pages handed back to the system and taken again"),
    FactSpec("memory.page_fault_us", "us", "one page fault in the run's process, measured by the collector "
             "(advisor.collect.fault_cost)"),
    FactSpec("memory.churn_ms", "ms", "the unprofiled step's time in those faults: faults per step times "
             "memory.page_fault_us"),
    FactSpec("memory.churn_share", "fraction", "memory.churn_ms of the unprofiled step"),
    FactSpec("memory.churn_hidden", "bool", "the recorded steps faulted in less than half of what the unprofiled "
             "ones did, with the collector's heap headroom in place: the profiled window does not show the churn"),
    FactSpec("memory.window_churn_bytes", "bytes", "memory each recorded step faulted in (median)"),
)


@analyzer("memory_churn", needs=("cpu_op",), provides=PROVIDES)
def memory_churn(view: TraceView) -> dict[str, Any]:
    """The unprofiled steps' page faults, priced by the collector's probe; {} without them (a trace analysed away
    from its run directory, or a run without unprofiled steps)."""
    heap = view.run_meta.get("heap")
    costs = view.run_meta.get("host_costs") or {}
    unprofiled = unprofiled_step_ms(view.run_meta.get("unprofiled_step_ms"))
    if not isinstance(heap, dict) or unprofiled is None:
        return {}
    faults = median_faults(heap, "unprofiled_faults")
    if faults is None:
        return {}
    page = heap.get("page_bytes") or costs.get("page_bytes") or 4096
    window = median_faults(heap, "window_faults")
    headroom = heap.get("headroom")
    out: dict[str, Any] = {
        "memory.churn_bytes": faults * page,
        "memory.window_churn_bytes": window * page if window is not None else None,
        "memory.churn_hidden": bool(isinstance(headroom, dict) and (headroom.get("mb") or 0) > 0
                                    and window is not None and window * 2 < faults),
    }
    fault_us = costs.get("page_fault_us")
    if isinstance(fault_us, (int, float)) and fault_us > 0:
        churn_ms = faults * fault_us / 1e3
        out.update({"memory.page_fault_us": float(fault_us), "memory.churn_ms": churn_ms,
                    "memory.churn_share": min(churn_ms / unprofiled[0], 1.0)})
    return out
