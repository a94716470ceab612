"""The user's source lines that make the most operator calls and take the most time, and the loops among them.

``lines.top`` and ``lines.by_ops`` count every outermost operator call charged to a line, including the
calls library code makes below it (a line that calls a whole model is charged the model's ops) and the
backward work autograd charges to the line's forward ops.

``lines.loops`` judges loops, not lines: the Python loops of the user's code whose calls run in the steps, each
with the time a batched form would remove (:mod:`.python_loops`, which reads the loops from the user's files).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.per_step import NS_PER_MS, site, step_ms
from advisor.analyze.framework.python_loops import LOOP_COLUMNS, python_loops
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

TOP_N = 10
_KEYS = ["src_file", "src_line", "src_func"]

_WHERE = {
    "file": "text: the user's file",
    "line": "count: line number",
    "function": "text: function containing the line",
    "site": "text: file:line (function)",
    "exact": "bool: the line is the exact call site (else the function's first line)",
}
LINE_COLUMNS = {
    **_WHERE,
    "ops_per_step": "count: outermost operator calls per step made from this line",
    "direct_ops_per_step": "count: of those, forward calls the line makes itself (not through library code)",
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
    FactSpec("lines.loops", "table", f"the {TOP_N} Python loops of the user's code with the most time per step a "
             "batched form would remove (saved_ms), each with its calls, iterations and cost", columns=LOOP_COLUMNS),
    FactSpec("lines.loops_unread", "texts", "the user's files the loops could not be read from (a trace analysed away "
             "from its code): in lines.loops their lines that call torch directly stand alone, kind 'line'"),
)


def _where(key: tuple[Any, ...], exact: bool) -> dict[str, Any]:
    file, line, func = key[0], int(key[1]), key[2]
    return {"file": file, "line": line, "function": func, "site": site(file, line, func), "exact": bool(exact)}


def _most(calls: pd.DataFrame, column: str, weight: str | None = None) -> pd.Series:
    """Per line, the value of ``column`` with the most calls (or the most ``weight``)."""
    if weight is None:
        counts = calls.groupby([*_KEYS, column], observed=True).size().reset_index(name="n")
    else:
        counts = calls.groupby([*_KEYS, column], observed=True)[weight].sum().reset_index(name="n")
    return counts.sort_values("n", ascending=False).drop_duplicates(_KEYS).set_index(_KEYS)[column]


@analyzer("source_lines", needs=("cpu_op", "source_lines"), provides=PROVIDES)
def source_lines(view: TraceView) -> dict[str, Any]:
    """Group outermost operator calls by the user's line that made them."""
    host = view.host
    rows = np.flatnonzero((host["step"] >= 0).to_numpy() & host["op_top"].to_numpy() & (host["src_line"] >= 0).to_numpy())
    # only the columns used (a filter copies every column it carries); names as text, as the grouping expects
    calls = pd.DataFrame({"name": view.host_name_texts[rows],
                          **{c: host[c].to_numpy()[rows] for c in (*_KEYS, "dur", "src_exact", "phase")},
                          "direct": host["src_direct"].to_numpy()[rows] & (host["src_via"] != "backward").to_numpy()[rows]})
    if len(calls) == 0:
        return {}
    steps = max(view.step_count, 1)
    mean_step = step_ms(view)
    table = calls.groupby(_KEYS, observed=True, sort=False).agg(
        calls=("dur", "size"), dur=("dur", "sum"), exact=("src_exact", "all"), direct=("direct", "sum")).reset_index()
    top_op, phase = _most(calls, "name"), _most(calls, "phase", "dur")
    lines = []
    for r in table.itertuples(index=False):
        key = (r.src_file, r.src_line, r.src_func)
        ms = r.dur / steps / NS_PER_MS
        lines.append({
            **_where(key, r.exact), "ops_per_step": r.calls / steps, "direct_ops_per_step": r.direct / steps,
            "ms": ms, "share": ms / mean_step if mean_step else 0.0, "avg_op_us": r.dur / r.calls / 1e3,
            "top_op": str(top_op.get(key, "")), "phase": str(phase.get(key, "")),
        })
    by_time = sorted(lines, key=lambda x: x["ms"], reverse=True)[:TOP_N]
    by_ops = sorted(lines, key=lambda x: x["ops_per_step"], reverse=True)[:TOP_N]
    loops, unread = python_loops(view)
    return {"lines.top": records(by_time), "lines.by_ops": records(by_ops), "lines.loops": records(loops),
            "lines.loops_unread": unread}

