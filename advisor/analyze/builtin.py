"""Imports every built-in analyzer module, so that each registers itself."""

from advisor.analyze import (  # noqa: F401
    attention,
    comm,
    compiled,
    copies,
    dataloader,
    elementwise,
    gpu_kernels,
    gpu_memory,
    gpu_ranks,
    gpu_time,
    kernels,
    launch,
    layout_copies,
    operators,
    optimizer,
    precision,
    ranks,
    source_lines,
    step_split,
    syncs,
    system_cuda_api,
    system_gpu,
    system_kernels,
    system_osrt,
    system_timeline,
    trace_info,
<<<<<<< HEAD
    workload,
=======
    zero_grad,
>>>>>>> ktrace
)
