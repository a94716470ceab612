"""Device memory: peak allocated and reserved, and allocator churn.

From the ``[memory]`` events that ``profile_memory=True`` records (one per
allocation or free, with the allocator's running totals), for the device
with the most traffic (a GPU where the trace has one, else the CPU), inside
the analysed steps. Independently of them, ``cudaMalloc``/``cudaFree`` calls
inside the steps mean the caching allocator had to go to the driver: it
grew, or released and re-requested memory, each step.
"""

from __future__ import annotations

from typing import Any

from advisor.analyze.findings import FactSpec
from advisor.analyze.framework.per_step import NS_PER_MS
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

#: Kineto's device types in [memory] events
DEVICE_TYPES = {0: "cpu", 1: "cuda"}
_MALLOC = ("cudaMalloc", "hipMalloc", "cudaMallocAsync")
_FREE = ("cudaFree", "hipFree", "cudaFreeAsync")

PROVIDES = (
    FactSpec("memory.device", "text", "the device the memory figures are for (cuda:0, cpu, ...)"),
    FactSpec("memory.peak_allocated_bytes", "bytes", "most memory allocated by tensors at once in the steps"),
    FactSpec("memory.peak_reserved_bytes", "bytes", "most memory the caching allocator held at once in the steps"),
    FactSpec("memory.allocs_per_step", "count", "tensor allocations per step"),
    FactSpec("memory.alloc_bytes_per_step", "bytes", "bytes allocated per step"),
    FactSpec("memory.churn_ratio", "ratio", "bytes allocated per step / peak allocated: how often memory turns over"),
    FactSpec("memory.reserved_growth_bytes", "bytes", "reserved memory at the end of the steps minus at the start"),
    FactSpec("memory.cuda_malloc_per_step", "count", "cudaMalloc calls per step (the caching allocator grew)"),
    FactSpec("memory.cuda_free_per_step", "count", "cudaFree calls per step (each waits for the whole device)"),
    FactSpec("memory.driver_alloc_ms", "ms", "host time per step in cudaMalloc and cudaFree"),
    FactSpec("memory.cuda_malloc_ms", "ms", "host time per step in cudaMalloc alone"),
)


def _runtime(view: TraceView) -> dict[str, Any]:
    if not view.has("cuda_runtime"):
        return {}
    lo, hi = view.gpu.lo, view.gpu.hi
    steps = view.gpu.steps
    host = view.host
    ts, dur = host["ts"].to_numpy(), host["dur"].to_numpy()
    calls = host["cat"].isin(("cuda_runtime", "cuda_driver")).to_numpy() & (ts >= lo) & (ts < hi)
    malloc = calls & host["name"].isin(_MALLOC).to_numpy()
    free = calls & host["name"].isin(_FREE).to_numpy()
    return {"memory.cuda_malloc_per_step": int(malloc.sum()) / steps, "memory.cuda_free_per_step": int(free.sum()) / steps,
            "memory.driver_alloc_ms": float(dur[malloc].sum() + dur[free].sum()) / steps / NS_PER_MS,
            "memory.cuda_malloc_ms": float(dur[malloc].sum()) / steps / NS_PER_MS}


@analyzer("gpu_memory", needs=(), provides=PROVIDES)
def gpu_memory(view: TraceView) -> dict[str, Any]:
    """Peak memory and allocator churn from [memory] events; driver allocations from runtime calls."""
    out = _runtime(view)
    mem = view.trace.memory
    if len(mem) == 0:
        return out
    mem = mem[view.step_of(mem["ts"].to_numpy()) >= 0]  # the analysed steps may have left-out ones between them
    if len(mem) == 0:
        return out
    gpu = mem[mem["device_type"] == 1]
    part = gpu if len(gpu) else mem
    key = part.groupby(["device_type", "device_id"]).size().idxmax()
    dev = part[(part["device_type"] == key[0]) & (part["device_id"] == key[1])]
    steps = max(view.step_count, 1)
    allocs = dev[dev["bytes"] > 0]
    peak = int(dev["total_allocated"].max())
    per_step = float(allocs["bytes"].sum()) / steps
    kind = DEVICE_TYPES.get(int(key[0]), f"device type {key[0]}")
    out.update({
        "memory.device": kind if kind == "cpu" else f"{kind}:{max(int(key[1]), 0)}",
        "memory.peak_allocated_bytes": peak,
        "memory.peak_reserved_bytes": int(dev["total_reserved"].max()),
        "memory.allocs_per_step": len(allocs) / steps,
        "memory.alloc_bytes_per_step": per_step,
        "memory.churn_ratio": per_step / peak if peak > 0 else 0.0,
        "memory.reserved_growth_bytes": int(dev["total_reserved"].iloc[-1] - dev["total_reserved"].iloc[0]),
    })
    return out
