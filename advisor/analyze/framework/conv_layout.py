"""Layout conversions around convolutions: the NCHW <-> NHWC transposes a channels-first model pays for.

Tensor-core convolution kernels read the channels of a pixel as one vector,
the NHWC (channels-last) layout. Given NCHW tensors, cuDNN wraps such a
kernel in ``nchwToNhwcKernel`` / ``nhwcToNchwKernel`` transposes, and MIOpen's
NHWC kernels (``igemm_*_nhwc_*``) in ``batched_transpose_*`` kernels; each
reads and writes the whole activation once more. ``memory_format=
torch.channels_last`` keeps activations in NHWC end to end, so the
transposes go away.

A conversion counts when it was launched by a convolution (``aten::conv2d``,
``aten::cudnn_convolution``, ``aten::miopen_convolution``,
``aten::convolution_backward``), or when the trace does not say what launched
it but has convolutions. Times are kernel time per step (sum of durations).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from advisor.analyze import group_by
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework import event_names
from advisor.analyze.framework.per_step import NS_PER_MS, site
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

__all__ = ["is_layout_conversion"]

TOP_N = 10
_CONVERSION = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|NCHW2NHWC|NHWC2NCHW|batched_transpose_",
                         re.IGNORECASE)
_CONV_OP = re.compile(r"conv\dd\b|conv_transpose|convolution", re.IGNORECASE)

PROVIDES = (
    FactSpec("conv_layout.convert_ms", "ms", "kernel time per step of NCHW<->NHWC conversions around convolutions"),
    FactSpec("conv_layout.convert_per_step", "count", "those conversion kernels per step"),
    FactSpec("conv_layout.window_share", "fraction", "their kernel time as a share of the GPU window"),
    FactSpec("conv_layout.conv_ms", "ms", "kernel time per step launched by convolution operators, conversions included"),
    FactSpec("conv_layout.conv_share", "fraction", "conversions' share of that convolution time"),
    FactSpec("conv_layout.site", "text", "the user's line (or operator) whose convolutions convert the most"),
    FactSpec("conv_layout.kernels", "table", "the conversion kernels", columns={
        "name": "text: kernel", "per_step": "count: per step", "ms": "ms: kernel time per step",
        "op": "text: operator that launched them", "site": "text: the user's line", "file": "text: file",
        "line": "count: line",
    }),
)


def is_layout_conversion(name: str) -> bool:
    """A cuDNN or MIOpen kernel that converts between NCHW and NHWC."""
    return bool(_CONVERSION.search(name))


def _is_conv_op(name: str) -> bool:
    return bool(_CONV_OP.search(name))


@analyzer("conv_layout", needs=("kernel",), provides=PROVIDES)
def conv_layout(view: TraceView) -> dict[str, Any]:
    """Kernel time of NCHW<->NHWC conversions around convolutions, and of the convolutions themselves."""
    links = view.gpu
    ks = links.kernels
    if len(ks) == 0 or links.window_ns <= 0:
        return {}
    by_conv = event_names.where(ks["op"], _is_conv_op) | event_names.where(ks["op_inner"], _is_conv_op)
    if not by_conv.any():
        return {}
    unlinked = (ks["op"] == "").to_numpy()
    conversion = event_names.where(ks["name"], is_layout_conversion) & (by_conv | unlinked)
    steps = links.steps
    dur = ks["dur"].to_numpy()
    conv_ns = int(dur[by_conv | conversion].sum())
    convert_ns = int(dur[conversion].sum())
    out: dict[str, Any] = {
        "conv_layout.convert_ms": convert_ns / steps / NS_PER_MS,
        "conv_layout.convert_per_step": int(conversion.sum()) / steps,
        "conv_layout.window_share": convert_ns / links.window_ns,
        "conv_layout.conv_ms": conv_ns / steps / NS_PER_MS,
        "conv_layout.conv_share": convert_ns / conv_ns if conv_ns else 0.0,
    }
    rows = _kernels(ks, conversion, steps)
    out["conv_layout.kernels"] = records(rows)
    if rows:
        linked = [r for r in rows if r["op"]] or rows
        best = max(linked, key=lambda r: r["ms"])
        out["conv_layout.site"] = best["site"] or best["op"] or best["name"]
    return out


def _kernels(ks: Any, conversion: np.ndarray, steps: int) -> list[dict[str, Any]]:
    rows = np.flatnonzero(conversion)
    if len(rows) == 0:
        return []
    keys = [ks[c].to_numpy(dtype=object if c != "src_line" else "int64")[rows]
            for c in ("name", "op", "src_file", "src_line", "src_func")]
    ids, n = group_by.group_ids(*keys)
    ns = group_by.sums(ids, n, ks["dur"].to_numpy()[rows])
    count = np.bincount(ids, minlength=n)
    first = group_by.first_rows(ids, n)
    out = []
    for k in group_by.by_weight(ns, "quicksort")[:TOP_N]:
        name, op, file, line, func = (key[first[k]] for key in keys)
        out.append({"name": name, "per_step": count[k] / steps, "ms": ns[k] / steps / NS_PER_MS, "op": op,
                    "site": site(file, int(line), func), "file": file, "line": int(line)})
    return out
