"""The user's source lines that make the most operator calls and take the most time."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze.common import NS_PER_MS, site, step_ms
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.registry import analyzer
from advisor.analyze.view import TraceView

TOP_N = 10

LINE_COLUMNS = {
    "file": "text: the user's file",
    "line": "count: line number",
    "function": "text: function containing the line",
    "site": "text: file:line (function)",
    "exact": "bool: the line is the exact call site (else the function's first line)",
    "ops_per_step": "count: outermost operator calls per step made from this line",
    "ms": "ms: time per step inside those calls",
    "share": "fraction: of step time",
    "avg_op_us": "us: mean duration of one call",
    "top_op": "text: the operator this line calls most",
    "phase": "text: phase the line runs in most",
}

PROVIDES = (
    FactSpec("lines.top", "table", f"the {TOP_N} source lines with the most operator time per step", columns=LINE_COLUMNS),
    FactSpec("lines.by_ops", "table", f"the {TOP_N} source lines with the most operator calls per step",
             columns=LINE_COLUMNS),
)


@analyzer("source_lines", needs=("cpu_op", "source_lines"), provides=PROVIDES)
def source_lines(view: TraceView) -> dict[str, Any]:
    """Group outermost operator calls by the user's line that made them."""
    host = view.host
    rows = np.flatnonzero((host["step"] >= 0).to_numpy() & host["op_top"].to_numpy() & (host["src_line"] >= 0).to_numpy())
    # only the columns used (a filter copies every column it carries); names as text, as the grouping expects
    calls = pd.DataFrame({"name": view.host_name_texts[rows],
                          **{c: host[c].to_numpy()[rows] for c in ("src_file", "src_line", "src_func", "dur",
                                                                   "src_exact", "phase")}})
    if len(calls) == 0:
        return {}
    steps = max(view.step_count, 1)
    mean_step = step_ms(view)
    keys = ["src_file", "src_line", "src_func"]
    grouped = calls.groupby(keys, observed=True, sort=False)
    table = grouped.agg(calls=("dur", "size"), dur=("dur", "sum"), exact=("src_exact", "all")).reset_index()
    top_op = calls.groupby([*keys, "name"], observed=True).size().reset_index(name="n")
    top_op = top_op.sort_values("n", ascending=False).drop_duplicates(keys).set_index(keys)["name"]
    phase = calls.groupby([*keys, "phase"], observed=True)["dur"].sum().reset_index()
    phase = phase.sort_values("dur", ascending=False).drop_duplicates(keys).set_index(keys)["phase"]
    rows = []
    for r in table.itertuples(index=False):
        key = (r.src_file, r.src_line, r.src_func)
        ms = r.dur / steps / NS_PER_MS
        rows.append({
            "file": r.src_file, "line": int(r.src_line), "function": r.src_func,
            "site": site(r.src_file, int(r.src_line), r.src_func), "exact": bool(r.exact),
            "ops_per_step": r.calls / steps, "ms": ms, "share": ms / mean_step if mean_step else 0.0,
            "avg_op_us": r.dur / r.calls / 1e3, "top_op": str(top_op.get(key, "")), "phase": str(phase.get(key, "")),
        })
    by_time = sorted(rows, key=lambda x: x["ms"], reverse=True)[:TOP_N]
    by_ops = sorted(rows, key=lambda x: x["ops_per_step"], reverse=True)[:TOP_N]
    return {"lines.top": records(by_time), "lines.by_ops": records(by_ops)}
