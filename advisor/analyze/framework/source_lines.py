"""The user's source lines that make the most operator calls and take the most time, and the loops among them.

``lines.top`` and ``lines.by_ops`` count every outermost operator call charged to a line, including the
calls library code makes below it (a line that calls a whole model is charged the model's ops) and the
backward work autograd charges to the line's forward ops.

``lines.loops`` keeps only the calls a line makes *directly* (``src_direct``: the user's line called the
torch function itself), which is what a Python loop over samples or elements does, and measures what
a vectorised form of the loop would remove:

- ``span_ms``: the wall time the line's direct calls occupy per step, from the first to the last of them
  in each unbroken run of direct calls (the loop body's other lines are direct calls too, so the run
  covers the whole loop), the Python interpreter's time between the calls included;
- ``backward_ms``: the same for the backward functions autograd runs for those calls (host rows with
  ``src_via == "backward"``), which a loop records one per tiny forward op;
- ``batched_ms``: the cost of the few batched calls that replace them, approximated as each distinct
  operator of the loop called once per run, forward and backward, at its median duration in the loop:
  the loop's calls are tiny, so their fixed cost, not their arithmetic, is what they take.

A run breaks at any other outermost operator on the main thread: one library code made (a model's
forward, the optimizer), one without a source line, or the other direction (forward calls against
backward work).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.per_step import NS_PER_MS, site, step_ms
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
LOOP_COLUMNS = {
    **_WHERE,
    "loop_ms": "ms: span_ms + backward_ms, what the calls and the Python around them cost per step",
    "span_ms": "ms: per step, wall time from the first to the last of the line's direct calls in each run, "
               "Python between them included",
    "backward_ms": "ms: per step, wall time of autograd's backward functions for those calls, first to last in "
                   "each run",
    "batched_ms": "ms: estimated cost per step of batched calls replacing them (each distinct operator once per "
                  "run, forward and backward, at its median duration here)",
    "direct_ops_per_step": "count: forward operator calls per step the line makes itself (not through library code)",
    "avg_op_us": "us: mean duration of one of those calls",
    "runs_per_step": "count: unbroken runs of direct calls per step that hold the line's calls",
    "share": "fraction: loop_ms of the step time",
    "top_op": "text: the operator this line calls directly most",
    "phase": "text: phase the line's direct calls run in most",
}

PROVIDES = (
    FactSpec("lines.top", "table", f"the {TOP_N} source lines with the most operator time per step", columns=LINE_COLUMNS),
    FactSpec("lines.by_ops", "table", f"the {TOP_N} source lines with the most operator calls per step",
             columns=LINE_COLUMNS),
    FactSpec("lines.loops", "table", f"the {TOP_N} source lines that call torch directly most often per step, "
             "with the time a vectorised form would remove", columns=LOOP_COLUMNS),
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
    return {"lines.top": records(by_time), "lines.by_ops": records(by_ops),
            "lines.loops": records(_loops(view, steps, mean_step))}


def _runs(view: TraceView) -> pd.DataFrame:
    """The main thread's outermost operators in the steps, in time order, each with its run number and kind.

    Kind 0: a forward call a user's line made directly; 1: backward work autograd charged to such a call;
    2: anything else. A run is a stretch of consecutive operators of one kind within one step.
    """
    host = view.host
    on_main = (host["tid"] == view.main_tid).to_numpy()
    rows = np.flatnonzero((host["step"] >= 0).to_numpy() & host["op_top"].to_numpy() & on_main)
    rows = rows[np.argsort(host["ts"].to_numpy()[rows], kind="stable")]
    direct = host["src_direct"].to_numpy()[rows] & (host["src_line"].to_numpy()[rows] >= 0)
    backward = (host["src_via"] == "backward").to_numpy()[rows]
    kind = np.where(direct, np.where(backward, 1, 0), 2).astype("int8")
    step = host["step"].to_numpy()[rows]
    new = np.ones(len(rows), bool)
    new[1:] = (kind[1:] != kind[:-1]) | (step[1:] != step[:-1])
    frame = pd.DataFrame({"name": view.host_name_texts[rows], "kind": kind, "run": np.cumsum(new),
                          **{c: host[c].to_numpy()[rows] for c in (*_KEYS, "ts", "end", "dur", "src_exact", "phase")}})
    return frame[frame["kind"] < 2]


def _spans(calls: pd.DataFrame) -> pd.DataFrame:
    """Per line: the summed first-to-last span of its calls in each run, the runs, and the batched cost."""
    per_run = calls.groupby([*_KEYS, "run"], observed=True).agg(first=("ts", "min"), last=("end", "max"))
    per_run["span"] = per_run["last"] - per_run["first"]
    out = per_run.groupby(level=_KEYS, observed=True).agg(span=("span", "sum"), runs=("span", "size"))
    medians = calls.groupby([*_KEYS, "name"], observed=True)["dur"].median()
    out["once"] = medians.groupby(level=_KEYS, observed=True).sum()  # each distinct operator once
    out["batched"] = out["once"] * out["runs"]
    return out


def _loops(view: TraceView, steps: int, mean_step: float) -> list[dict[str, Any]]:
    """The lines with the most direct calls per step, with what a vectorised form would remove."""
    ops = _runs(view)
    forward, backward = ops[ops["kind"] == 0], ops[ops["kind"] == 1]
    if len(forward) == 0:
        return []
    fwd, bwd = _spans(forward), _spans(backward)
    counts = forward.groupby(_KEYS, observed=True).agg(calls=("dur", "size"), dur=("dur", "sum"),
                                                       exact=("src_exact", "all"))
    top_op, phase = _most(forward, "name"), _most(forward, "phase", "dur")
    out = []
    for key, r in counts.sort_values("calls", ascending=False).head(TOP_N).iterrows():
        span = float(fwd.at[key, "span"])
        back = float(bwd.at[key, "span"]) if key in bwd.index else 0.0
        batched = float(fwd.at[key, "batched"]) + (float(bwd.at[key, "batched"]) if key in bwd.index else 0.0)
        loop_ms = (span + back) / steps / NS_PER_MS
        out.append({  # the telling columns first: a report shows as many as fit
            **_where(key, r["exact"]), "loop_ms": loop_ms, "span_ms": span / steps / NS_PER_MS,
            "backward_ms": back / steps / NS_PER_MS, "batched_ms": batched / steps / NS_PER_MS,
            "direct_ops_per_step": r["calls"] / steps, "avg_op_us": r["dur"] / r["calls"] / 1e3,
            "runs_per_step": float(fwd.at[key, "runs"]) / steps, "share": loop_ms / mean_step if mean_step else 0.0,
            "top_op": str(top_op.get(key, "")), "phase": str(phase.get(key, "")),
        })
    return out
