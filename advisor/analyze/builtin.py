"""Imports every built-in analyzer module, so that each registers itself.

Analyzers run, and their findings are listed, in the order they register. This
list keeps the order the modules had when analyze/ was one flat folder
(alphabetical by their old names: ``gpu_ranks`` for :mod:`.ranks.gpu`,
``system_gpu`` for :mod:`.system.gpu_gaps`, ...), so that ``findings.json``
stays as it was; a module that imports another analyzer module registers
after it (``comm`` after ``gpu_time``).
"""

from advisor.analyze.framework import attention  # noqa: F401
from advisor.analyze.ranks import comm, comm_sizes, nccl_bandwidth  # noqa: F401
from advisor.analyze.framework import compiled, conv_layout, copies, data_quality, dataloader  # noqa: F401
from advisor.analyze.ranks import ddp_sync  # noqa: F401
from advisor.analyze.framework import elementwise, gpu_kernels, gpu_memory  # noqa: F401
from advisor.analyze.ranks import gpu as gpu_ranks  # noqa: F401
from advisor.analyze.framework import gpu_time, host, host_events  # noqa: F401
from advisor.analyze.kernel import kernels  # noqa: F401
from advisor.analyze.framework import launch, layout_copies, operators, optimizer, precision  # noqa: F401
from advisor.analyze.framework import roofline  # noqa: F401
from advisor.analyze.framework import elementwise_runs, fp32_gemms, gemm_alignment  # noqa: F401
from advisor.analyze.ranks import host as ranks  # noqa: F401
from advisor.analyze.framework import source_lines, step_split, sync_causes, syncs  # noqa: F401
from advisor.analyze.ranks import skew  # noqa: F401
from advisor.analyze.system import cuda_api, gpu_gaps, kernels as system_kernels, osrt, timeline  # noqa: F401
from advisor.analyze.framework import trace_info, workload, zero_grad  # noqa: F401
