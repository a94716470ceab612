"""A profiled kernel's measured FLOPs and DRAM bytes beside what the framework stage's model says its
operator must do: the kernel stage confirming (or not) the roofline position the shapes gave.

The framework stage's ``ops.efficiency`` rows carry, per (operator, shape, dtype), the model's FLOPs and
bytes per call (``gflops``, ``mbytes``: from the recorded shapes, each tensor read or written once) and
the operator's heaviest kernel. :func:`beside_model` joins an ncu kernel to the heaviest modelled row
whose kernel it is (:func:`~advisor.tools.ncu_names.same_kernel`) and puts the two side by side, with
measured / model ratios:

- ``bytes_ratio`` well above 1: the kernel moves more DRAM bytes than its tensors hold (re-reads that
  miss the cache, a layout copy inside it, spilled partial sums); well below 1: the inputs were
  already in L2 (reuse across calls), or writes still sat in L2 when the kernel ended.
- ``flop_ratio`` above 1: work beyond the model's (padding to tile sizes, recomputation, a split-K
  reduction); below 1: FLOPs the counters did not see (see :mod:`.metrics`) or a kernel that does
  only part of the operator's work.

The model is per operator *call* and ncu measures one kernel *launch*: for an operator that launches
several kernels per call, the ratio compares one of them to the whole call. ``model_rows`` says how many
modelled (operator, shape) rows ran this kernel: above 1, the profiled launch may be of another shape
than the compared (heaviest) one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from advisor.tools.ncu_names import same_kernel

__all__ = ["MODEL_COLUMNS", "beside_model"]

#: the ncu.kernels columns this module fills
MODEL_COLUMNS = {
    "model_op": "text: the operator whose model is compared (framework stage's ops.efficiency; empty: none)",
    "model_shape": "text: its Input Dims",
    "model_dtype": "text: its data type",
    "model_rows": "count: modelled (operator, shape, dtype) rows that ran this kernel (the heaviest is compared)",
    "model_gflop": "ratio: GFLOP per operator call, from its shapes",
    "ncu_gflop": "ratio: GFLOP of one launch, as ncu counted them (empty: the report has no FLOP counters)",
    "flop_ratio": "ratio: measured FLOPs over the model's",
    "model_mb": "ratio: MB (2**20 bytes) per operator call, from its shapes, each tensor moved once",
    "ncu_mb": "ratio: DRAM MB (2**20 bytes) read and written by one launch, as ncu measured them",
    "bytes_ratio": "ratio: measured DRAM bytes over the model's",
}
_MB = 2**20


def _ratio(measured: float | None, model: float | None) -> float | None:
    return measured / model if measured is not None and model else None


def beside_model(kernel: str, function: str, ncu_flops: float | None, ncu_bytes: float | None,
                 ops: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The :data:`MODEL_COLUMNS` of one ncu kernel (its name and function, its measured FLOPs and bytes)."""
    ncu_gflop = ncu_flops / 1e9 if ncu_flops is not None else None
    ncu_mb = ncu_bytes / _MB if ncu_bytes is not None else None
    matches = [r for r in ops if r.get("gflops") is not None and r.get("kernel")
               and same_kernel(str(r["kernel"]), kernel, function)]
    if not matches:
        return {"model_op": "", "model_shape": "", "model_dtype": "", "model_rows": 0, "model_gflop": None,
                "ncu_gflop": ncu_gflop, "flop_ratio": None, "model_mb": None, "ncu_mb": ncu_mb, "bytes_ratio": None}
    row = max(matches, key=lambda r: float(r.get("kernel_ms") or 0.0))
    model_gflop, model_mb = float(row["gflops"]), row.get("mbytes")
    return {"model_op": str(row.get("op", "")), "model_shape": str(row.get("shape", "")),
            "model_dtype": str(row.get("dtype", "")), "model_rows": len(matches), "model_gflop": model_gflop,
            "ncu_gflop": ncu_gflop, "flop_ratio": _ratio(ncu_gflop, model_gflop),
            "model_mb": None if model_mb is None else float(model_mb), "ncu_mb": ncu_mb,
            "bytes_ratio": _ratio(ncu_mb, None if model_mb is None else float(model_mb))}
