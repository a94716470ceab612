"""Each operator's kernel time next to what its shapes say it must do: the rows of ``ops.efficiency``.

:func:`efficiency_table` joins three things:

- the **kernels** in the GPU window (``TraceView.gpu.kernels``, compute kernels only: communication is
  not bounded by this roofline), each linked to the innermost operator around its launch;
- the **model** of each operator call (:mod:`.op_model`): FLOPs and bytes from its recorded shapes;
- the **roof** (:mod:`.gpu_spec`): the GPU's peak for the call's dtype and unit, and its bandwidth.

A kernel belongs to the innermost *modelled* operator around its launch, and an operator that has a
modelled operator inside it is not one (``aten::linear`` launches nothing of its own; its ``addmm``
does), so every kernel is counted once and never against two models. Kernels with no modelled operator
around them are grouped by their innermost operator as ``unmodelled`` (``triton`` for Inductor's
kernels), with their time: never dropped. An Inductor kernel whose launch carries Inductor's estimate of its bytes
and FLOPs (``kernel_num_gb``, ``kernel_flop``) is modelled by that estimate (:mod:`.op_model_triton`), in category
``triton``.

Per row (one per operator, shape, dtype and scalar arguments): ``calls`` (operator calls that launched
kernels in the window), ``kernel_ns`` (their kernels' total time), ``flops`` and ``bytes`` per call, and,
where the spec is known, ``roof_ns`` per call = max(FLOPs / peak, bytes / bandwidth): the least time the
call can take, so ``roofline_share`` = calls · roof_ns / kernel_ns is 1 at the roof and small far below it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze import group_by, intervals
from advisor.analyze.framework.gpu_spec import GpuSpec
from advisor.analyze.framework.kernel_names import kernel_precision
from advisor.analyze.framework.op_model import OpCall, OpCost, model, modelled_names
from advisor.analyze.framework.op_model_triton import triton_cost
from advisor.analyze.framework.per_step import site
from advisor.analyze.framework.view import TraceView

__all__ = ["COLUMNS", "call_bytes", "efficiency_join", "efficiency_table"]

#: the table's columns, in order
COLUMNS = ("op", "category", "shape", "dtype", "concrete", "calls", "kernel_ns", "flops", "bytes", "unit",
           "roof_ns", "bound", "site", "kernel")
NO_OP = "(no operator)"


def _codes(view: TraceView, column: str) -> tuple[np.ndarray, np.ndarray]:
    """An events text column at the host rows: its codes (-1 where absent) and its labels."""
    col = view.events[column]
    rows = view.host["event"].to_numpy()
    if not isinstance(col.dtype, pd.CategoricalDtype):
        values = col.to_numpy(dtype=object)[rows]
        labels, codes = np.unique(values.astype(str), return_inverse=True)
        return codes.astype("int64"), labels.astype(object)
    return col.cat.codes.to_numpy()[rows].astype("int64"), np.asarray(col.cat.categories, dtype=object)


def _label(labels: np.ndarray, code: int) -> str:
    return str(labels[code]) if code >= 0 else ""


class _Calls:
    """The host rows of modelled operators, each with the cost of its call (one model per distinct call):
    the operators :mod:`.op_model` knows, and Inductor's Triton kernel launches that carry Inductor's own
    estimate of their bytes and FLOPs (:mod:`.op_model_triton`)."""

    def __init__(self, view: TraceView) -> None:
        host = view.host
        names = view.host_name_texts
        known = modelled_names()
        meta = [view.host_column(c).astype("float64") if c in view.events else np.full(len(host), np.nan)
                for c in ("kernel_num_gb", "kernel_flop")]
        # only Inductor's launch ranges: torch._inductor.analysis.profile_analysis writes the same args on
        # the aten ops it augments, which the shape models cover (or, unknown to them, stay unmodelled)
        measured = (np.isfinite(meta[0]) | np.isfinite(meta[1])) & view.host_names(_is_triton_name, bool)
        cand = (host["cat"] == "cpu_op").to_numpy() & (view.host_names(known.__contains__, bool) | measured)
        self.cost: dict[int, OpCost] = {}
        self.key = np.full(len(host), -1, "int64")
        has_args = all(c in view.events for c in ("input_dims", "input_types", "concrete_inputs"))
        self.texts: list[tuple[str, str, str, str]] = []
        if not cand.any() or not has_args:
            self.valid = np.zeros(len(host), bool)
            return
        (dims, dl), (types, tl), (conc, cl) = (_codes(view, c) for c in ("input_dims", "input_types",
                                                                          "concrete_inputs"))
        rows = np.flatnonzero(cand)
        ids, n = group_by.group_ids(names[rows], dims[rows], types[rows], conc[rows])
        first = group_by.first_rows(ids, n)
        ok = np.zeros(n, bool)
        for g in range(n):
            r = rows[first[g]]
            texts = (str(names[r]), _label(dl, dims[r]), _label(tl, types[r]), _label(cl, conc[r]))
            self.texts.append(texts)
            call = OpCall.parse(*texts)
            cost = model(call) if call is not None else None
            if cost is None and measured[r]:
                cost = triton_cost(texts[0], meta[0][r], meta[1][r], call.types if call is not None else [])
            if cost is not None:
                self.cost[g] = cost
                ok[g] = True
        self.key[rows] = ids
        self.valid = np.zeros(len(host), bool)
        self.valid[rows] = ok[ids]


def _effective(view: TraceView, valid: np.ndarray) -> np.ndarray:
    """The modelled operator rows with no modelled operator inside them: those whose kernels count."""
    host = view.host
    above = intervals.enclosing(host["parent"].to_numpy(), host["depth"].to_numpy(), valid)
    container = np.zeros(len(host), bool)
    container[above[valid & (above >= 0)]] = True
    return valid & ~container


def call_bytes(view: TraceView) -> np.ndarray:
    """Per host row, the bytes one call of it moves (from its shapes), for the modelled operators whose
    kernels count (the innermost modelled ones, as in the table); NaN on every other row."""
    calls = _Calls(view)
    out = np.full(len(view.host), np.nan)
    rows = np.flatnonzero(_effective(view, calls.valid))
    out[rows] = [calls.cost[int(k)].bytes for k in calls.key[rows]]
    return out


def _owners(view: TraceView, valid: np.ndarray, op_row: np.ndarray) -> np.ndarray:
    """For each kernel's operator row, the innermost modelled operator at or around it (-1 when none)."""
    host = view.host
    parent, depth = host["parent"].to_numpy(), host["depth"].to_numpy()
    effective = _effective(view, valid)
    around = intervals.enclosing(parent, depth, effective)
    r = np.maximum(op_row, 0)
    owner = np.where(effective[r], r, around[r]) if len(host) else np.full(len(op_row), -1)
    return np.where(op_row >= 0, owner, -1)


def efficiency_table(view: TraceView, spec: GpuSpec | None, kernels: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (operator, shape, dtype, scalar arguments), in :data:`COLUMNS`, heaviest first.

    ``kernels``: rows of ``view.gpu.ops`` to count (default: the kernels in the GPU window).
    """
    return efficiency_join(view, spec, kernels)[0]


def efficiency_join(view: TraceView, spec: GpuSpec | None,
                    kernels: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """:func:`efficiency_table`, with the compute kernels it counted (in GPU order, as ``view.gpu`` holds
    them) and, for each of those kernels, the position of its row in the table: for the analyses that
    follow kernels one by one (runs of elementwise kernels on a stream) with the model of their operator."""
    kernels = view.gpu.kernels if kernels is None else kernels[(kernels["cat"] == "kernel").to_numpy()]
    kernels = kernels[(kernels["kind"] == "compute").to_numpy()]
    if kernels.empty:
        return pd.DataFrame({c: [] for c in COLUMNS}), kernels, np.zeros(0, "int64")
    calls = _Calls(view)
    op_row = kernels["op_row"].to_numpy().astype("int64")
    owner = _owners(view, calls.valid, op_row)
    modelled = owner >= 0
    key = np.where(modelled, calls.key[np.maximum(owner, 0)], -1)
    inner = kernels["op_inner"].to_numpy(dtype=object)
    kname = kernels["name"].to_numpy(dtype=object)
    # unmodelled kernels: grouped by their innermost operator (or kernel family, without one)
    unknown = np.where(inner == "", np.where(_triton(kname), "triton", NO_OP), inner)
    group_key = np.where(modelled, key.astype(str), np.char.add("u:", unknown.astype(str)))
    ids, n = group_by.group_ids(group_key)
    dur = kernels["dur"].to_numpy().astype("int64")
    kernel_ns = group_by.sums(ids, n, dur)
    ncalls = _calls_per_group(ids, n, np.where(modelled, owner, np.where(op_row >= 0, op_row, -1 - np.arange(len(owner)))))
    heaviest = _heaviest_rows(ids, n, dur)
    src = {c: kernels[c].to_numpy(dtype=object) if c != "src_line" else kernels[c].to_numpy()
           for c in ("src_file", "src_line", "src_func")}
    rows = []
    for g in range(n):
        h = heaviest[g]
        where = site(str(src["src_file"][h]), int(src["src_line"][h]), str(src["src_func"][h]))
        if modelled[h]:
            rows.append(_modelled_row(calls, int(key[h]), spec, str(kname[h]), where))
        else:
            category = "triton" if _triton(np.array([kname[h]]))[0] else "unmodelled"
            rows.append({"op": str(unknown[h]), "category": category, "shape": "", "dtype": "", "concrete": "",
                         "flops": np.nan, "bytes": np.nan, "unit": "", "roof_ns": np.nan, "bound": "",
                         "site": where, "kernel": str(kname[h])})
        rows[-1].update(calls=int(ncalls[g]), kernel_ns=int(kernel_ns[g]))
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    order = np.argsort(-table["kernel_ns"].to_numpy(), kind="stable")
    position = np.empty(n, "int64")
    position[order] = np.arange(n)
    return table.iloc[order].reset_index(drop=True), kernels, position[ids]


def _is_triton_name(name: str) -> bool:
    return name.startswith("triton")


def _triton(names: np.ndarray) -> np.ndarray:
    return np.array([str(n).startswith("triton") for n in names], dtype=bool)


def _calls_per_group(ids: np.ndarray, n: int, call: np.ndarray) -> np.ndarray:
    """Distinct calls per group (a kernel without an operator is its own call: each has a distinct negative id)."""
    pairs = np.unique(np.stack([ids, call]), axis=1)
    return np.bincount(pairs[0], minlength=n)


def _heaviest_rows(ids: np.ndarray, n: int, dur: np.ndarray) -> np.ndarray:
    order = np.lexsort((-dur, ids))
    first = np.ones(len(order), bool)
    first[1:] = ids[order][1:] != ids[order][:-1]
    out = np.zeros(n, "int64")
    out[ids[order][first]] = order[first]
    return out


def _modelled_row(calls: _Calls, key: int, spec: GpuSpec | None, kernel: str, where: str) -> dict[str, Any]:
    name, dims, _types, concrete = calls.texts[key]
    cost = calls.cost[key]
    dtype = cost.dtype
    # cuBLAS/cutlass name the TF32 path; an fp32 GEMM on it is bounded by the TF32 peak
    if dtype == "fp32" and cost.unit == "matrix" and kernel_precision(kernel) == "tf32":
        dtype = "tf32"
    roof, bound = _roof(cost, dtype, spec)
    return {"op": name, "category": cost.category, "shape": dims, "dtype": dtype, "concrete": concrete,
            "flops": cost.flops, "bytes": cost.bytes, "unit": cost.unit, "roof_ns": roof, "bound": bound,
            "site": where, "kernel": kernel}


def _roof(cost: OpCost, dtype: str, spec: GpuSpec | None) -> tuple[float, str]:
    """The least time of one call (ns) on this GPU, and what bounds it; NaN and "" without a spec or peak."""
    if spec is None:
        return np.nan, ""
    peak = spec.peak_tflops(cost.unit, dtype)
    if peak is None and cost.flops:
        return np.nan, ""
    # no FLOPs to bound (a Triton kernel with bytes only): the memory roof alone, whatever the dtype
    compute_ns = cost.flops / (peak * 1e3) if peak else 0.0  # TFLOP/s = 1e3 FLOP per ns
    memory_ns = cost.bytes / (spec.memory_tb_s * 1e3)  # TB/s = 1e3 bytes per ns
    return max(compute_ns, memory_ns), "compute" if compute_ns >= memory_ns else "memory"
