"""Imports every built-in analyzer module, so that each registers itself."""

from advisor.analyze import (  # noqa: F401
    dataloader,
    operators,
    optimizer,
    source_lines,
    step_split,
    system_cuda_api,
    system_gpu,
    system_kernels,
    system_osrt,
    system_timeline,
    trace_info,
)
