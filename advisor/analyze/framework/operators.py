"""The operators that take the CPU's time, and the source lines and modules that call them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze import group_by
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.per_step import NS_PER_MS, site, step_ms
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

TOP_N = 15
#: a "tiny" op: its whole call takes less than this; thousands of them mean Python-bound code
TINY_NS = 20_000

OP_COLUMNS = {
    "name": "text: operator name",
    "calls_per_step": "count: calls per step",
    "self_ms": "ms: self time per step (children excluded)",
    "share": "fraction: self time as a share of step time",
    "avg_us": "us: mean self time per call",
    "file": "text: the user's file that calls it most (by time)",
    "line": "count: line in that file",
    "function": "text: function containing that line",
    "site": "text: file:line (function)",
    "site_share": "fraction: share of the op's self time from that site",
    "module": "text: nn.Module path it ran in most",
    "phase": "text: phase it ran in most",
}

PROVIDES = (
    FactSpec("ops.top", "table", f"the {TOP_N} operators with the most self time per step", columns=OP_COLUMNS),
    FactSpec("ops.per_step", "count", "outermost CPU operator calls per step (one per call from Python)"),
    FactSpec("ops.tiny_per_step", "count", f"outermost operator calls per step shorter than {TINY_NS // 1000} us"),
    FactSpec("ops.cpu_ms", "ms", "time per step inside outermost operators"),
    FactSpec("ops.median_us", "us", "median duration of an outermost operator call"),
)


def _dominant(name: np.ndarray, weight: np.ndarray, keys: list[np.ndarray], mask: np.ndarray
              ) -> dict[Any, tuple[tuple[Any, ...], float]]:
    """For each op name among the rows in ``mask``: the ``keys`` values that carry the most weight, and their share.

    Ties go to the values seen first (a stable sort of the groups in order of appearance).
    """
    name, weight, keys = name[mask], weight[mask], [k[mask] for k in keys]
    by, n_by = group_by.group_ids(name)
    ids, n = group_by.group_ids(by, *keys)
    per_group = group_by.sums(ids, n, weight)
    totals = group_by.sums(by, n_by, weight)
    best = group_by.dominant(by, n_by, ids, n, per_group)
    first = group_by.first_rows(ids, n)
    out = {}
    for b, g in enumerate(best):
        r = first[g]
        out[name[r]] = (tuple(k[r] for k in keys), per_group[g] / totals[b] if totals[b] > 0 else 0.0)
    return out


def _codes(column: pd.Series, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A Categorical column's codes at ``rows`` and its categories (texts are looked up only for the results)."""
    return column.cat.codes.to_numpy()[rows], np.asarray(column.cat.categories, dtype=object)


@analyzer("operators", needs=("cpu_op",), provides=PROVIDES)
def operators(view: TraceView) -> dict[str, Any]:
    """Operators by self time, each with the call site and module that account for most of it."""
    host = view.host
    rows = np.flatnonzero(((host["cat"] == "cpu_op") & (host["step"] >= 0)).to_numpy())
    if len(rows) == 0:
        return {}
    steps = max(view.step_count, 1)
    mean_step = step_ms(view)
    codes, labels = _codes(host["name"], rows)
    self_ns = host["self_ns"].to_numpy()[rows]
    (file, files), (func, funcs) = _codes(host["src_file"], rows), _codes(host["src_func"], rows)
    (module, modules), (phase, phases) = _codes(host["module"], rows), _codes(host["phase"], rows)
    line = host["src_line"].to_numpy()[rows]
    # by name, in name order (a sorted groupby), then by self time (pandas' default sort, for the same ties)
    count = np.bincount(codes, minlength=len(labels))
    seen = np.flatnonzero(count)
    total = group_by.sums(codes, len(labels), self_ns)[seen]
    calls = count[seen]
    top = group_by.by_weight(total, "quicksort")[:TOP_N]
    located = line >= 0
    where = _dominant(codes, self_ns, [file, line, func], located) if located.any() else {}
    in_module = modules[module] != ""
    by_module = _dominant(codes, self_ns, [module], in_module) if in_module.any() else {}
    in_phase = phases[phase] != ""
    by_phase = _dominant(codes, self_ns, [phase], in_phase) if in_phase.any() else {}
    out_rows = []
    for k in top:
        op = seen[k]
        self_ms = total[k] / steps / NS_PER_MS
        row = {
            "name": labels[op], "calls_per_step": calls[k] / steps, "self_ms": self_ms,
            "share": self_ms / mean_step if mean_step else 0.0,
            "avg_us": total[k] / calls[k] / 1e3, "file": "", "line": -1, "function": "", "site": "",
            "site_share": 0.0, "module": "", "phase": "",
        }
        if op in where:
            (f, ln, fn), frac = where[op]
            row.update(file=files[f], line=int(ln), function=funcs[fn], site=site(files[f], int(ln), funcs[fn]),
                       site_share=float(frac))
        if op in by_module:
            row["module"] = modules[by_module[op][0][0]]
        if op in by_phase:
            row["phase"] = phases[by_phase[op][0][0]]
        out_rows.append(row)
    durs = host["dur"].to_numpy()[rows][host["op_top"].to_numpy()[rows]]
    return {
        "ops.top": records(out_rows),
        "ops.per_step": len(durs) / steps,
        "ops.tiny_per_step": int((durs < TINY_NS).sum()) / steps,
        "ops.cpu_ms": float(durs.sum()) / steps / NS_PER_MS,
        "ops.median_us": float(np.median(durs)) / 1e3 if len(durs) else 0.0,
    }
