"""Tensor-core and precision use of matrix multiplies and convolutions.

Matmul/conv kernels are found by name (:mod:`.kernel_names`). Their time is
split into tensor-core kernels and fp32 kernels on the ordinary cores, and
by the dtype of the operator's inputs where the trace recorded shapes
(``record_shapes=True``), else by what the kernel name says. Mixed precision
(AMP) counts as in use when most matmul/conv time runs in fp16 or bf16.
Whether the device could do better comes from ``deviceProperties``: NVIDIA
tensor cores from compute capability 7.0 (fp16), TF32 from 8.0; AMD matrix
cores on CDNA (gfx908 and later).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze import group_by
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework import event_names
from advisor.analyze.framework.gpu_kernels import kernels_in_window
from advisor.analyze.framework.kernel_names import is_matmul_or_conv, kernel_precision, uses_tensor_cores
from advisor.analyze.framework.per_step import NS_PER_MS, site
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

TOP_N = 10
LOW = ("fp16", "bf16")
#: most matmul/conv time in fp16/bf16: mixed precision is on
AMP_SHARE = 0.5
_DTYPES = {"float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16", "double": "fp64",
           "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8"}
_FIRST_TYPE = re.compile(r'"([^"]+)"')

PROVIDES = (
    FactSpec("precision.matmul_ms", "ms", "matmul/conv kernel time per step"),
    FactSpec("precision.matmul_share", "fraction", "share of kernel time in matmul/conv kernels"),
    FactSpec("precision.tensor_core_share", "fraction", "share of matmul/conv time in tensor-core kernels"),
    FactSpec("precision.fp32_share", "fraction", "share of matmul/conv time in fp32 kernels on the ordinary cores"),
    FactSpec("precision.fp32_ms", "ms", "fp32 non-tensor-core matmul/conv time per step"),
    FactSpec("precision.fp32_window_share", "fraction", "share of the GPU window in those fp32 kernels (sum of durations)"),
    FactSpec("precision.tf32_share", "fraction", "share of matmul/conv time in TF32 tensor-core kernels"),
    FactSpec("precision.low_share", "fraction", "share of matmul/conv time in fp16 or bf16"),
    FactSpec("precision.amp", "bool", f"mixed precision in use: at least {AMP_SHARE:.0%} of matmul/conv time in fp16/bf16"),
    FactSpec("precision.dtype_source", "text", "where dtypes come from: operator inputs or kernel names"),
    FactSpec("precision.compute_capability", "text", "the device's compute capability (major.minor)"),
    FactSpec("precision.tensor_cores", "bool", "the device has tensor or matrix cores"),
    FactSpec("precision.tf32_capable", "bool", "the device runs fp32 matmuls as TF32 on tensor cores (NVIDIA 8.0+)"),
    FactSpec("precision.dtypes", "table", "matmul/conv time by input dtype", columns={
        "dtype": "text: fp32, tf32, fp16, bf16, ...", "ms": "ms: per step", "share": "fraction: of matmul/conv time",
    }),
    FactSpec("precision.fp32_kernels", "table", "fp32 matmul/conv kernels not on tensor cores", columns={
        "name": "text: kernel", "ms": "ms: per step", "share": "fraction: of matmul/conv time",
        "op": "text: operator", "site": "text: the user's line", "file": "text: file", "line": "count: line",
    }),
)


def _input_dtype(types: str) -> str:
    m = _FIRST_TYPE.search(types or "")
    return _DTYPES.get(m.group(1), "") if m else ""


def device_caps(view: TraceView) -> tuple[str, bool, bool]:
    """(compute capability, has tensor/matrix cores, TF32 capable)."""
    devices = view.trace.devices
    if not devices:
        return "", False, False
    d = devices[0]
    major, minor = int(d.get("computeMajor", 0) or 0), int(d.get("computeMinor", 0) or 0)
    amd = any(s in str(d.get("name", "")) for s in ("AMD", "Radeon", "Instinct")) or int(d.get("warpSize", 32)) == 64
    cores = major >= 9 if amd else major >= 7
    return f"{major}.{minor}", cores, (not amd) and major >= 8


def _classified(view: TraceView) -> dict[str, np.ndarray]:
    """The matmul/conv kernels in the window, as arrays: name, dur, op, source, and how each is classified."""
    return classify(kernels_in_window(view.gpu))


def classify(ks: pd.DataFrame) -> dict[str, np.ndarray]:
    """The matmul/conv kernels of ``ks`` as arrays (``rows``: their positions in ``ks``; name, dur, op,
    source), with ``tc`` (a tensor-core kernel), ``dtype`` and ``fp32`` (an fp32 kernel on the ordinary
    cores, what ``precision.fp32_*`` counts)."""
    rows = np.flatnonzero(event_names.where(ks["name"], is_matmul_or_conv))
    mm = {"rows": rows, "name": ks["name"].iloc[rows], "dur": ks["dur"].to_numpy()[rows]}
    mm["tc"] = event_names.mapped(mm["name"], uses_tensor_cores, bool)
    mm["named"] = event_names.mapped(mm["name"], kernel_precision)
    mm["name"] = mm["name"].to_numpy(dtype=object)
    mm["input"] = event_names.mapped(ks["input_types"].to_numpy(dtype=object)[rows], _input_dtype)
    for c in ("op", "src_file", "src_func"):
        mm[c] = ks[c].to_numpy(dtype=object)[rows]
    mm["src_line"] = ks["src_line"].to_numpy()[rows]
    # The kernel name is more specific than the input dtype for TF32 (fp32 inputs, tensor cores).
    given, named = mm["input"], mm["named"]
    mm["dtype"] = np.where(given != "", np.where(named == "tf32", "tf32", given), named).astype(object)
    mm["fp32"] = ~mm["tc"] & np.isin(mm["dtype"], ("fp32", "")) & (named != "fp16")
    return mm


@analyzer("precision", needs=("kernel",), provides=PROVIDES)
def precision(view: TraceView) -> dict[str, Any]:
    """Share of matmul/conv time on tensor cores and in low precision, and whether the device could do more."""
    cc, cores, tf32 = device_caps(view)
    out: dict[str, Any] = {"precision.compute_capability": cc or None, "precision.tensor_cores": cores if cc else None,
                           "precision.tf32_capable": tf32 if cc else None}
    mm = _classified(view)
    total = int(mm["dur"].sum())
    if total == 0:  # no matmul kernels, or none that lasts any time (a trace without `dur`): no shares to give
        return out
    steps = view.gpu.steps
    dur, dtype = mm["dur"], mm["dtype"]
    all_kernels = int(kernels_in_window(view.gpu)["dur"].sum())
    is_fp32 = mm["fp32"]
    fp32_ns = int(dur[is_fp32].sum())
    low = int(dur[np.isin(dtype, LOW)].sum())
    out.update({
        "precision.matmul_ms": total / steps / NS_PER_MS, "precision.matmul_share": total / max(all_kernels, total),
        "precision.tensor_core_share": int(dur[mm["tc"]].sum()) / total,
        "precision.fp32_share": fp32_ns / total, "precision.fp32_ms": fp32_ns / steps / NS_PER_MS,
        "precision.fp32_window_share": fp32_ns / view.gpu.window_ns if view.gpu.window_ns else 0.0,
        "precision.tf32_share": int(dur[dtype == "tf32"].sum()) / total,
        "precision.low_share": low / total, "precision.amp": low / total >= AMP_SHARE,
        "precision.dtype_source": "operator inputs" if (mm["input"] != "").any() else "kernel names",
    })
    labels, inverse = np.unique(np.where(dtype == "", "unknown", dtype).astype(str), return_inverse=True)
    by_dtype = group_by.sums(inverse, len(labels), dur)
    out["precision.dtypes"] = records({"dtype": labels[k], "ms": by_dtype[k] / steps / NS_PER_MS,
                                       "share": by_dtype[k] / total} for k in group_by.by_weight(by_dtype, "quicksort"))
    rows = []
    if is_fp32.any():
        keys = [mm[c][is_fp32] for c in ("name", "op", "src_file", "src_line", "src_func")]
        ids, n = group_by.group_ids(*keys)
        ns = group_by.sums(ids, n, dur[is_fp32])
        first = group_by.first_rows(ids, n)
        for k in group_by.by_weight(ns, "quicksort")[:TOP_N]:
            name, op, file, line, func = (key[first[k]] for key in keys)
            rows.append({"name": name, "ms": ns[k] / steps / NS_PER_MS, "share": ns[k] / total, "op": op,
                         "site": site(file, int(line), func), "file": file, "line": int(line)})
    out["precision.fp32_kernels"] = records(rows)
    return out
