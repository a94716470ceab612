"""The cost of one Inductor-generated Triton kernel call, from the metadata Inductor records in the trace.

Inductor launches each Triton kernel inside a profiler range named after the kernel
(``triton_poi_fused_add_0``), whose args are the launcher's (``torch/_inductor/runtime/triton_heuristics.py``,
``get_profiler_kwargs``): ``kernel_backend: "triton"``, ``kernel_file``, ``kernel_hash``, ``num_warps``, ... and,
when the kernel's ``inductor_meta`` has them, ``kernel_num_gb`` and ``kernel_flop``. Inductor puts them in
``inductor_meta`` when it is asked to measure its kernels (``torch._inductor.config.benchmark_kernel`` or
``profile_bandwidth``; ``kernel_flop`` for template kernels such as mm, under ``benchmark_kernel``).
``torch._inductor.analysis.profile_analysis`` writes the same two args into a trace after the fact.

- ``kernel_num_gb``: the bytes Inductor's codegen estimates the kernel moves (its
  ``estimate_kernel_num_bytes``: every input and output buffer once, in-place buffers twice), in GB
  of 1e9 bytes: bytes = kernel_num_gb x 1e9.
- ``kernel_flop``: the FLOPs of the kernel (Inductor's ``estimate_flops``, template kernels).

A pointwise or reduction kernel records bytes only: its FLOPs are taken as 0, so its roof is its bytes
over the memory bandwidth (how Inductor itself reads such a kernel, in GB/s). The bound's data type is
that of the call's first tensor argument (``Input type``); the unit is ``matrix`` for template kernels
(``triton_tem_*``: mm, bmm, conv) and ``vector`` for the others. Without either arg the call stays
unmodelled (category ``triton``, its time kept).
"""

from __future__ import annotations

import math

from advisor.analyze.framework.op_call import OpCost, dtype_name

__all__ = ["GB", "triton_cost"]

#: Inductor's GB
GB = 1e9


def _first_tensor_dtype(types: list[str]) -> str:
    for t in types:
        name = dtype_name(t)
        if name and name != t:  # a known tensor dtype (Scalar, "" and unknown names are skipped)
            return name
    return ""


def triton_cost(name: str, num_gb: float, flop: float, types: list[str]) -> OpCost | None:
    """The cost of one call of Triton kernel ``name`` from its ``kernel_num_gb`` and ``kernel_flop`` args
    (NaN where absent); ``None`` when neither was recorded."""
    has_bytes, has_flop = math.isfinite(num_gb) and num_gb >= 0, math.isfinite(flop) and flop >= 0
    if not (has_bytes or has_flop):
        return None
    unit = "matrix" if name.startswith("triton_tem") else "vector"
    return OpCost("triton", float(flop) if has_flop else 0.0, float(num_gb) * GB if has_bytes else 0.0,
                  _first_tensor_dtype(types), unit)
