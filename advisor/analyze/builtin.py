"""Imports every built-in analyzer module, so that each registers itself."""

from advisor.analyze import (  # noqa: F401
    comm,
    copies,
    dataloader,
    gpu_kernels,
    gpu_memory,
    gpu_ranks,
    gpu_time,
    kernels,
    launch,
    operators,
    optimizer,
    precision,
    source_lines,
    step_split,
    syncs,
    trace_info,
)
