"""Why the host synchronised: each sync point's cause, and the GPU idle time each cause leaves behind.

:mod:`.syncs` lists the sync points by runtime call; this module says which
line of Python made each one and why, so that a diagnosis can name the fix:

``print``
    A tensor formatted for printing or logging (``print(t)``, ``str(t)``,
    ``f"{t}"`` of a tensor with more than one element): the line also runs
    ``aten::isfinite`` and ``aten::masked_select``, which
    ``torch/_tensor_str.py`` runs on every floating-point tensor it formats.
``data_dependent``
    Inside an op whose output size depends on the values (``nonzero``,
    boolean-mask indexing, ``masked_select``, ``unique``,
    ``repeat_interleave`` without ``output_size``, ``bincount``).
``item``
    A scalar read on the host: ``.item()`` (``aten::_local_scalar_dense``),
    ``float(t)``, ``bool(t)`` and ``if t:`` (``aten::is_nonzero``),
    ``torch.equal``.
``empty_cache``
    ``cudaFree`` outside any operator: ``torch.cuda.empty_cache()`` (or an
    allocator with caching turned off).
``cudnn_autotune``
    ``cudaFree`` inside a cuDNN or MIOpen convolution: with
    ``torch.backends.cudnn.benchmark = True`` the autotuner empties the
    caching allocator before it times the algorithms for a new input shape
    (once per shape: in steady-state steps, a sign that shapes keep changing).
``allocator``
    ``cudaFree`` inside another operator: the caching allocator releasing
    its cache to retry an allocation that failed.
``to_host``
    A copy from the GPU to the host (``.cpu()``, ``.tolist()``, ``.numpy()``).
``created_on_cpu``
    A copy to the GPU from a line that also creates a tensor on the host
    (``torch.tensor(...)``, ``torch.zeros(n)``, ``torch.arange(n)`` followed
    by ``.to(device)`` or ``.cuda()``).
``to_device``
    Another blocking copy to the GPU (a batch moved without pinned memory).
``explicit``
    A device, stream or event synchronize outside any operator:
    ``torch.cuda.synchronize()``, ``stream.synchronize()``,
    ``event.synchronize()``.
``other``
    Anything else.

The checks run in that order. ``print`` and ``created_on_cpu`` need the
user's lines (the collector's source labels, or Python stacks); traces
without them fall back to the other causes.

The GPU idle time after syncs (``gpu.idle.sync.ms``, see :mod:`.gpu_idle`)
is split between the causes: each cause's syncs alone are run through the
same gap analysis, and each gap's sync time is shared out in proportion to
what each cause alone would be charged, so the causes add up to the whole.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze import group_by, intervals
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework import event_names
from advisor.analyze.framework.copies import copy_direction
from advisor.analyze.framework.gpu_idle import idle_gaps
from advisor.analyze.framework.per_step import NS_PER_MS, site
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

__all__ = ["CAUSES", "classify"]

CAUSES = ("print", "data_dependent", "item", "empty_cache", "cudnn_autotune", "allocator", "to_host",
          "created_on_cpu", "to_device", "explicit", "other")
CAUSE_TEXT = {
    "print": "a tensor formatted for printing or logging",
    "data_dependent": "an op whose output size depends on the data",
    "item": "a scalar read on the host (.item(), float(t), bool(t), if t:)",
    "empty_cache": "cudaFree outside any operator (torch.cuda.empty_cache())",
    "cudnn_autotune": "cudaFree inside a convolution (cuDNN's autotuner emptying the cache for a new input shape)",
    "allocator": "cudaFree inside an operator (the caching allocator releasing its cache)",
    "to_host": "a tensor copied to the host (.cpu(), .tolist(), .numpy())",
    "created_on_cpu": "a tensor created on the CPU in the step, then copied to the GPU",
    "to_device": "a blocking copy from host memory to the GPU",
    "explicit": "an explicit synchronize (torch.cuda.synchronize(), stream or event synchronize)",
    "other": "another synchronising call",
}
ITEM_OPS = frozenset({"aten::_local_scalar_dense", "aten::item", "aten::is_nonzero", "aten::equal"})
DATA_DEPENDENT_OPS = frozenset({
    "aten::nonzero", "aten::nonzero_numpy", "aten::argwhere", "aten::masked_select", "aten::unique",
    "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
    "aten::unique_dim_consecutive", "aten::repeat_interleave", "aten::bincount",
})
#: the convolutions whose autotuning (torch.backends.cudnn.benchmark) empties the caching allocator first
CONV_OPS = frozenset({"aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::miopen_convolution",
                      "aten::miopen_convolution_transpose", "aten::miopen_depthwise_convolution",
                      "aten::convolution_backward", "aten::cudnn_convolution_relu",
                      "aten::cudnn_convolution_add_relu"})
#: torch/_tensor_str.py's _Formatter runs both on every floating-point tensor it formats
PRINT_OPS = ("aten::isfinite", "aten::masked_select")
#: top-level ops that make a new tensor (on the host, unless given device=)
FACTORY_OPS = frozenset({
    "aten::zeros", "aten::ones", "aten::full", "aten::arange", "aten::rand", "aten::randn", "aten::randint",
    "aten::randperm", "aten::eye", "aten::linspace", "aten::logspace", "aten::lift_fresh", "aten::scalar_tensor",
    "aten::tensor", "aten::zeros_like", "aten::ones_like", "aten::full_like", "aten::rand_like", "aten::randn_like",
})

PROVIDES = (
    FactSpec("sync.cause", "text", "the cause of the syncs after which the GPU idles longest: " + ", ".join(CAUSES)),
    FactSpec("sync.cause_text", "text", "that cause in words"),
    FactSpec("sync.cause_ms", "ms", "GPU idle time per step after the syncs of that cause"),
    FactSpec("sync.cause_share", "fraction", "that time as a share of the GPU idle time after all syncs"),
    FactSpec("sync.other_causes_ms", "ms", "GPU idle time per step after syncs of the other causes"),
    FactSpec("sync.cause_calls_per_step", "count", "sync calls per step of that cause"),
    FactSpec("sync.cause_blocked_ms", "ms", "host time per step blocked in the syncs of that cause"),
    FactSpec("sync.cause_op", "text", "the operator around that cause's costliest sync point"),
    FactSpec("sync.cause_site", "text",
             "the user's line of that sync point, or its operator when the trace has no lines"),
    FactSpec("sync.cause_file", "text", "file of that line"),
    FactSpec("sync.cause_line", "count", "number of that line"),
    FactSpec("sync.causes", "table", "sync points by cause", columns={
        "cause": "text: " + ", ".join(CAUSES), "what": "text: the cause in words",
        "idle_ms": "ms: GPU idle per step after these syncs", "share": "fraction: of the idle after all syncs",
        "calls_per_step": "count: sync calls per step", "blocked_ms": "ms: host time blocked per step",
        "op": "text: operator of the costliest sync point", "site": "text: its user file:line (function)",
        "file": "text: file", "line": "count: line",
    }),
)


def _sites_running(view: TraceView, wanted: frozenset[str] | tuple[str, ...]) -> dict[tuple[str, int], set[str]]:
    """(file, line) -> which of ``wanted`` top-level operators that user line ran."""
    host = view.host
    rows = np.flatnonzero(((host["cat"] == "cpu_op") & host["op_top"]).to_numpy()
                          & view.host_names(lambda n: n in wanted, bool) & (host["src_line"].to_numpy() >= 0))
    out: dict[tuple[str, int], set[str]] = {}
    files = host["src_file"].to_numpy(dtype=object)[rows]
    lines = host["src_line"].to_numpy()[rows]
    for file, line, name in zip(files, lines, view.host_name_texts[rows]):
        out.setdefault((str(file), int(line)), set()).add(str(name))
    return out


def _directions(ops: pd.DataFrame) -> tuple[dict[int, str], dict[int, str]]:
    """Copy direction by the runtime call's correlation, and by the innermost operator that launched it."""
    copies = ops[(ops["kind"] == "memcpy").to_numpy()]
    direction = event_names.mapped(copies["name"], copy_direction)
    kind = copies["copy_kind"].to_numpy(dtype=object)
    direction = np.where(direction != "", direction, kind)
    by_corr = {int(c): str(d) for c, d in zip(copies["correlation"].to_numpy(), direction) if c >= 0 and d}
    by_op = {int(r): str(d) for r, d in zip(copies["op_row"].to_numpy(), direction) if r >= 0 and d}
    return by_corr, by_op


def classify(syncs: pd.DataFrame, view: TraceView) -> np.ndarray:
    """The cause (one of :data:`CAUSES`) of every row of ``view.gpu.host_syncs``-shaped ``syncs``."""
    printing = {k for k, ops in _sites_running(view, PRINT_OPS).items() if ops >= set(PRINT_OPS)}
    factories = set(_sites_running(view, FACTORY_OPS))
    by_corr, by_op = _directions(view.gpu.ops)
    out = []
    for row in syncs[["sync", "op", "op_inner", "item", "src_file", "src_line", "correlation", "op_row"]].itertuples(
            index=False):
        where = (str(row.src_file), int(row.src_line))
        ops = {str(row.op), str(row.op_inner)}
        direction = by_corr.get(int(row.correlation)) or by_op.get(int(row.op_row), "")
        if where in printing:
            cause = "print"
        elif ops & DATA_DEPENDENT_OPS:
            cause = "data_dependent"
        elif row.item or ops & ITEM_OPS:
            cause = "item"
        elif row.sync == "free":
            cause = "empty_cache" if not row.op else "cudnn_autotune" if ops & CONV_OPS else "allocator"
        elif direction == "DtoH":
            cause = "to_host"
        elif direction == "HtoD":
            cause = "created_on_cpu" if where in factories else "to_device"
        elif row.sync in ("device", "stream", "event") and not row.op:
            cause = "explicit"
        else:
            cause = "other"
        out.append(cause)
    return np.array(out, dtype=object)


def _idle_by_cause(view: TraceView, syncs: pd.DataFrame, causes: np.ndarray) -> dict[str, int]:
    """ns of GPU idle time charged to the syncs of each cause; they add up to the idle charged to all syncs."""
    links = view.gpu
    ops = links.device_ops
    loading = view.phase_intervals.get("dataloader", (np.empty(0, "int64"), np.empty(0, "int64")))
    ts, end = syncs["ts"].to_numpy("int64"), syncs["end"].to_numpy("int64")
    whole = idle_gaps(ops, links.lo, links.hi, intervals.union(ts, end), loading)["sync"].to_numpy()
    present = [c for c in CAUSES if (causes == c).any()]
    alone = np.stack([idle_gaps(ops, links.lo, links.hi, intervals.union(ts[causes == c], end[causes == c]),
                                loading)["sync"].to_numpy() for c in present]) if present else np.zeros((0, len(whole)))
    charged = alone.sum(axis=0)
    shares = np.divide(alone, charged, out=np.zeros_like(alone, dtype=float), where=charged > 0)
    return {c: int(round(float((shares[i] * whole).sum()))) for i, c in enumerate(present)}


def _rows(syncs: pd.DataFrame, causes: np.ndarray, idle: dict[str, int], steps: int) -> list[dict[str, Any]]:
    total_idle = sum(idle.values())
    dur = syncs["dur"].to_numpy()
    keys = [syncs[c].to_numpy(dtype=object if c != "src_line" else "int64") for c in ("op", "src_file", "src_line",
                                                                                       "src_func")]
    rows = []
    for cause in CAUSES:
        part = np.flatnonzero(causes == cause)
        if len(part) == 0:
            continue
        ids, n = group_by.group_ids(*(k[part] for k in keys))
        best = group_by.first_rows(ids, n)[int(np.argmax(group_by.sums(ids, n, dur[part])))]
        op, file, line, func = (k[part][best] for k in keys)
        rows.append({
            "cause": cause, "what": CAUSE_TEXT[cause], "idle_ms": idle.get(cause, 0) / steps / NS_PER_MS,
            "share": idle.get(cause, 0) / total_idle if total_idle else 0.0, "calls_per_step": len(part) / steps,
            "blocked_ms": float(dur[part].sum()) / steps / NS_PER_MS, "op": op, "site": site(file, int(line), func),
            "file": file, "line": int(line),
        })
    return sorted(rows, key=lambda r: (-r["idle_ms"], -r["blocked_ms"]))


@analyzer("sync_causes", needs=("gpu",), provides=PROVIDES)
def sync_causes(view: TraceView) -> dict[str, Any]:
    """The cause of each sync point and the GPU idle time each cause leaves behind."""
    links = view.gpu
    syncs = links.host_syncs
    if len(syncs) == 0 or len(links.in_window) == 0 or links.window_ns <= 0:
        return {}
    causes = classify(syncs, view)
    inside = ((syncs["ts"] >= links.lo) & (syncs["ts"] < links.hi)).to_numpy()
    if not inside.any():
        return {}
    idle = _idle_by_cause(view, syncs, causes)
    rows = _rows(syncs[inside], causes[inside], idle, links.steps)
    top = rows[0]
    out: dict[str, Any] = {
        "sync.causes": records(rows), "sync.cause": top["cause"], "sync.cause_text": top["what"],
        "sync.cause_ms": top["idle_ms"], "sync.cause_share": top["share"],
        "sync.other_causes_ms": sum(r["idle_ms"] for r in rows[1:]),
        "sync.cause_calls_per_step": top["calls_per_step"], "sync.cause_blocked_ms": top["blocked_ms"],
        "sync.cause_op": top["op"],
        "sync.cause_site": top["site"] or top["op"] or CAUSE_TEXT[top["cause"]],
    }
    if top["site"]:
        out["sync.cause_file"], out["sync.cause_line"] = top["file"], top["line"]
    return out
