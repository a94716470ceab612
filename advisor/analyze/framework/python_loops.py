"""The Python loops of the user's code that run inside the steps, and what a batched form of each would remove.

A loop over samples or elements is judged as a loop, not line by line: its body is spread over several lines
(a Linear on the row, then the arithmetic), and often over a helper it calls per row. Each outermost operator
call is charged to the innermost ``for``, ``while`` or comprehension around its line, read from the user's file
(:mod:`.source_loops`); when the line is in no loop of its function, to the loop around the user's line that
called the function (the collector's label names those callers, as far as the user's code called itself: a
model called through ``nn.Module`` does its own work, not the loop's). Autograd's backward functions follow
their forward call. Where a file cannot be read (a trace analysed away from the code), each line that calls
torch directly stands alone, as a loop of one line, and ``lines.loops_unread`` names the file.

Per loop, in its median step (a recorded step held up two or three times over, the profiler's first, would
otherwise count its slower loop as a gain of every step):

- ``loop_ms``: the wall time of its calls, first to last in each unbroken run of them on the main thread, forward
  and backward, the Python between them included;
- ``work_ms``: the part of that the calls' arithmetic takes, which a batched call still does: of each
  (line, operator)'s calls, the share of their median beyond the operator's fixed cost, taken as its cheapest
  typical call in the steps (the least median over the lines that call it, so the smallest input it was given)
  and never more than :data:`FIXED_COST_CAP_US`, since a longer call does arithmetic;
- ``iterations``: how many times the body runs per run, the most common count of one (line, operator) of the
  body per step over the runs per step;
- ``batched_ms``: the batched form, the work plus one iteration's share of the rest, ``work + (loop - work) / n``;
  so ``saved_ms`` is ``(loop - work) * (1 - 1/n)``: nothing for a loop of one iteration (the training loop), and
  little for a loop whose iterations do real work (``for layer in self.layers`` over big layers).

A run breaks at any call the loop does not hold: a model's forward, library code, the other direction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze.framework.per_step import NS_PER_MS, median_step_ms, site
from advisor.analyze.framework.source_loops import find_source, loops_of
from advisor.analyze.framework.view import TraceView
from advisor.naming import parse_caller_chain

__all__ = ["FIXED_COST_CAP_US", "LOOP_COLUMNS", "python_loops"]

TOP_N = 10
#: a call this long does arithmetic: no operator's fixed cost (Python binding, dispatcher, autograd, a kernel
#: launch) reaches it, even under the profiler, where a Linear's is about 10 us on a CPU
FIXED_COST_CAP_US = 50.0
_SITE = ["src_file", "src_line", "src_func"]

LOOP_COLUMNS = {
    "file": "text: the user's file",
    "line": "count: the loop's header line (for a line standing alone, that line)",
    "function": "text: function holding the loop",
    "site": "text: file:line (function) of the loop's header",
    "kind": "text: for, while, comprehension; line: the file could not be read, so the line stands alone",
    "busiest": "text: file:line (function) of the body's line with the most operator time",
    "exact": "bool: the lines are exact call sites (else functions' first lines)",
    "saved_ms": "ms: in the median step, what the batched form removes: loop_ms - batched_ms",
    "saved_share": "fraction: saved_ms of the median step",
    "loop_ms": "ms: span_ms + backward_ms, what the loop's calls and the Python around them cost in the median step",
    "span_ms": "ms: in the median step, wall time from the first to the last of the loop's calls in each run, Python "
               "between them included",
    "backward_ms": "ms: in the median step, wall time of autograd's backward functions for those calls, first to last in "
                   "each run",
    "work_ms": "ms: in the median step, the calls' time beyond their operators' fixed cost (arithmetic a batched call "
               "still does)",
    "batched_ms": "ms: estimated cost of the batched form in the median step: work_ms + (loop_ms - work_ms) / iterations",
    "iterations": "count: times the body runs per run of the loop (most common count of one line's operator)",
    "runs_per_step": "count: unbroken runs of the loop's forward calls in the median step",
    "ops_per_step": "count: forward operator calls per step charged to the loop's body",
    "ops_per_iteration": "count: ops_per_step per iteration",
    "direct_ops_per_step": "count: of those, calls the body's lines made themselves (not through library code)",
    "avg_op_us": "us: mean duration of one forward call",
    "share": "fraction: loop_ms of the median step",
    "top_op": "text: the operator the loop calls most",
    "phase": "text: phase the loop's forward calls run in most",
}


def python_loops(view: TraceView) -> tuple[list[dict[str, Any]], list[str]]:
    """The loops with the most to gain from a batched form, and the files that could not be read."""
    ops = _main_thread_ops(view)
    if not len(ops):
        return [], []
    ops["unit"], alone, units, unread = _assign_units(ops, [str(r) for r in view.run_meta.get("source_roots") or []])
    ops = _mark_runs(ops, alone)
    mine = ops[ops["unit"] >= 0]
    forward = mine[~mine["backward"]]
    if not len(forward):
        return [], unread
    typical = _typical_step(mine, _work(ops), np.arange(max(view.step_count, 1)))
    iterations = _iterations(forward)
    steps, median_step = max(view.step_count, 1), median_step_ms(view)
    rows = [_row(group, unit_key=units[unit], typical=typical.loc[unit], iterations=iterations.get(unit, 1.0),
                 steps=steps, median_step=median_step) for unit, group in forward.groupby("unit")]
    rows.sort(key=lambda r: r["saved_ms"], reverse=True)
    return rows[:TOP_N], unread


def _main_thread_ops(view: TraceView) -> pd.DataFrame:
    """The main thread's outermost operators in the steps, in time order, with their site and callers."""
    host = view.host
    on_main = (host["tid"] == view.main_tid).to_numpy()
    rows = np.flatnonzero((host["step"] >= 0).to_numpy() & host["op_top"].to_numpy() & on_main)
    rows = rows[np.argsort(host["ts"].to_numpy()[rows], kind="stable")]
    frame = pd.DataFrame({"name": view.host_name_texts[rows],
                          **{c: host[c].to_numpy()[rows] for c in (*_SITE, "step", "ts", "end", "dur", "src_exact",
                                                                    "src_direct", "phase")},
                          "callers": host["src_callers"].to_numpy()[rows] if "src_callers" in host else "",
                          "backward": (host["src_via"] == "backward").to_numpy()[rows]})
    return frame.reset_index(drop=True)


_Unit = tuple[str, int, str, str]  # file, header line, function, kind


def _assign_units(ops: pd.DataFrame, roots: list[str]) -> tuple[np.ndarray, np.ndarray, list[_Unit], list[str]]:
    """Each call's loop (an index into the units returned), -1 for none; which calls are on lines of files that
    could not be read; the units; those files.

    A call whose file could not be read stands in a unit of its own line, when the line called torch directly."""
    keys = ops[[*_SITE, "callers"]].astype({"callers": str})
    codes, uniques = pd.MultiIndex.from_frame(keys).factorize()
    table: dict[_Unit, int] = {}
    per_key = np.full(len(uniques) + 1, -1, "int64")
    is_line = np.zeros(len(uniques) + 1, bool)
    unread: set[str] = set()
    for i, (file, line, func, callers) in enumerate(uniques):
        if int(line) < 0:
            continue
        frames = [(str(file), int(line), str(func))]
        frames += parse_caller_chain(str(callers))
        unit, missing = _loop_of(frames, roots)
        if missing:
            unread.add(missing)
            unit, is_line[i] = (str(file), int(line), str(func), "line"), True
        if unit is not None:
            per_key[i] = table.setdefault(unit, len(table))
    codes = np.where(codes >= 0, codes, len(uniques))
    unit = per_key[codes]
    unit[is_line[codes] & ~ops["src_direct"].to_numpy()] = -1  # a line standing alone: only its own calls
    # The optimizer's per-parameter calls are charged to the optimizer.step() line by the collector's hook, twelve
    # of them in one run of the line: they are not a loop of the user's code (OPT001 judges them).
    unit[(ops["phase"] == "optimizer").to_numpy() & ~ops["src_direct"].to_numpy()] = -1
    return unit, is_line[codes], list(table), sorted(unread)


def _loop_of(frames: list[tuple[str, int, str]], roots: list[str]) -> tuple[_Unit | None, str]:
    """The innermost loop around the first frame in a loop (the call's own line, then its callers'), and the
    file that could not be read, if one stopped the search."""
    for file, line, func in frames:
        path = find_source(file, roots)
        loops = loops_of(path) if path is not None else None
        if loops is None or not loops.holds(line, func):
            return None, file
        loop = loops.innermost(line, func)
        if loop is not None:
            return (file, loop.line, loop.function, loop.kind), ""
    return None, ""


def _work(ops: pd.DataFrame) -> pd.Series:
    """Per unit and step, the time (ns) its calls spend beyond their operators' fixed cost.

    An operator's fixed cost is its cheapest typical call in the steps: the least median over the lines (and
    callers) that call it, so over the sizes it is given, and never more than :data:`FIXED_COST_CAP_US`. Medians,
    as a call's jitter is not arithmetic: the fastest of 1,280 calls of a tiny op is a quarter below their median.
    A (line, operator) of the unit works for the share of its median beyond that, of all its calls' time; a share,
    not each call less the fixed cost, as a call the scheduler or a page fault held up is work where the calls do
    arithmetic (a big layer slowed by a cold cache) and overhead where they are tiny (the batched form, taking
    less time, is held up less)."""
    sited = ops[ops["src_line"] >= 0]
    keys = [*_SITE, "callers", "name"]
    per_key = sited.groupby(keys, observed=True)["dur"].median().rename("median").reset_index()
    fixed = per_key.groupby("name", observed=True)["median"].min().clip(upper=FIXED_COST_CAP_US * 1e3)
    share = (1 - per_key["name"].map(fixed).astype(float) / per_key["median"].clip(lower=1)).clip(0, 1)
    per_key = per_key.assign(share=share.to_numpy())
    mine = sited[sited["unit"] >= 0].merge(per_key[[*keys, "share"]], on=keys, how="left")
    return (mine["share"] * mine["dur"]).groupby([mine["unit"], mine["step"]]).sum()


def _mark_runs(ops: pd.DataFrame, alone: np.ndarray) -> pd.DataFrame:
    """Number the unbroken runs: consecutive calls of one unit, one direction and one step.

    The calls on lines of files that could not be read (``alone``) share their runs, as a loop's body lines
    do: the run around a line then covers the loop it is in (a Linear on the row as well as the arithmetic),
    and the line's first-to-last span in each run takes that loop's Python too."""
    unit, step, back = ops["unit"].to_numpy(), ops["step"].to_numpy(), ops["backward"].to_numpy()
    key = np.where(alone, -2, unit)
    new = np.ones(len(ops), bool)
    new[1:] = (key[1:] != key[:-1]) | (step[1:] != step[:-1]) | (back[1:] != back[:-1])
    ops["run"] = np.cumsum(new)
    return ops


def _typical_step(mine: pd.DataFrame, work: pd.Series, steps: np.ndarray) -> pd.DataFrame:
    """Per unit, its median step (ns): ``span`` (forward), ``back`` (backward), ``work`` and forward ``runs``.

    The median over the analysed steps, a step the loop did not run in counted as nothing: a recorded step held
    up two or three times over (the profiler's first, a collection) holds a slower loop, which the fix removes
    from no other step."""
    per_run = mine.groupby(["unit", "step", "backward", "run"]).agg(first=("ts", "min"), last=("end", "max"))
    per_run["span"] = per_run["last"] - per_run["first"]
    per_step = per_run.groupby(level=["unit", "step", "backward"])["span"].agg(["sum", "size"]).unstack(
        "backward", fill_value=0)
    table = pd.DataFrame({"span": per_step.get(("sum", False), 0), "back": per_step.get(("sum", True), 0),
                          "runs": per_step.get(("size", False), 0)}, index=per_step.index)
    table["work"] = work.reindex(table.index, fill_value=0.0)
    every = pd.MultiIndex.from_product([table.index.unique("unit"), steps], names=["unit", "step"])
    return table.reindex(every, fill_value=0).astype(float).groupby(level="unit").median()


def _iterations(forward: pd.DataFrame) -> pd.Series:
    """Per unit, how many times its body runs in one run.

    Each (line, callers, operator) of a body runs once per iteration, or a fixed number of times (two ``x[i]``
    on one line), or less under a branch, or once per run (the iterable in a ``for`` header): the most common of
    their counts in a step, the larger on a tie, is the iterations per step, leaving out the calls made once per
    run where the body made more (a ``torch.stack`` and a ``.mean()`` around a comprehension of one
    ``cross_entropy`` a sample outnumbered its one key); the median over steps, over the runs per step, is the
    count per run. Only the calls the body's lines make themselves count where there are any:
    one execution of a line that calls library code (``optimizer.step()``, a model) makes many calls of one
    operator, one per parameter or layer."""
    has_direct = forward.groupby("unit")["src_direct"].transform("any").to_numpy()
    counted = forward[forward["src_direct"].to_numpy() | ~has_direct]
    keys = [*_SITE, "callers", "name"]
    counts = counted.groupby(["unit", "step", *keys], observed=True).size().rename("n").reset_index()
    runs_in_step = forward.groupby(["unit", "step"])["run"].nunique().rename("runs").reset_index()
    counts = counts.merge(runs_in_step, on=["unit", "step"], how="left")
    # Calls made once per run (the iterable of a for header, a torch.stack around a comprehension, the .mean()
    # after it) are not the body's: where the body made more, they must not outvote a body of few operators.
    counts["body"] = counts["n"] > counts["runs"]
    counts = counts[counts["body"] | ~counts.groupby(["unit", "step"])["body"].transform("any")]
    popular = counts.groupby(["unit", "step", "n"]).size().rename("keys").reset_index()
    popular = popular.sort_values(["keys", "n"]).drop_duplicates(["unit", "step"], keep="last")
    per_step = popular.groupby("unit")["n"].median()
    runs = forward.groupby(["unit", "step"])["run"].nunique().groupby("unit").median()
    return (per_step / runs).clip(lower=1.0)


def _row(calls: pd.DataFrame, *, unit_key: _Unit, typical: pd.Series, iterations: float, steps: int,
         median_step: float) -> dict[str, Any]:
    """One loop's record: times in ms in its median step, counts per step."""
    file, line, function, kind = unit_key
    span, back = typical["span"] / NS_PER_MS, typical["back"] / NS_PER_MS
    loop_ms = span + back
    work_ms = min(typical["work"] / NS_PER_MS, loop_ms)
    batched_ms = work_ms + (loop_ms - work_ms) / iterations
    by_line = calls.groupby(_SITE, observed=True)["dur"].sum()
    busiest = by_line.idxmax() if len(by_line) else (file, line, function)
    calls_per_step = len(calls) / steps
    return {  # the telling columns first: a report shows as many as fit
        "site": site(file, line, function), "kind": kind, "busiest": site(*busiest),
        "saved_ms": loop_ms - batched_ms,
        "saved_share": (loop_ms - batched_ms) / median_step if median_step else 0.0,
        "loop_ms": loop_ms, "batched_ms": batched_ms, "work_ms": work_ms, "iterations": iterations,
        "ops_per_iteration": calls_per_step / (iterations * max(typical["runs"], 1.0)),
        "span_ms": span, "backward_ms": back, "runs_per_step": typical["runs"],
        "ops_per_step": calls_per_step, "direct_ops_per_step": float(calls["src_direct"].sum()) / steps,
        "avg_op_us": float(calls["dur"].mean()) / 1e3, "share": loop_ms / median_step if median_step else 0.0,
        "top_op": str(calls["name"].value_counts().index[0]),
        "phase": str(calls.groupby("phase", observed=True)["dur"].sum().idxmax()),
        "file": file, "line": int(line), "function": function, "exact": bool(calls["src_exact"].all()),
    }
