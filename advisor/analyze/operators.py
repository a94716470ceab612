"""The operators that take the CPU's time, and the source lines and modules that call them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze.common import NS_PER_MS, site, step_ms
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.registry import analyzer
from advisor.analyze.view import TraceView

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


def _dominant(frame: pd.DataFrame, key: list[str], weight: str = "self_ns") -> pd.DataFrame:
    """For each op name, the value of ``key`` that carries the most weight."""
    grouped = frame.groupby(["name", *key], observed=True, sort=False)[weight].sum().reset_index()
    grouped = grouped.sort_values(weight, ascending=False, kind="stable")
    totals = grouped.groupby("name", observed=True)[weight].transform("sum")
    grouped["frac"] = np.where(totals > 0, grouped[weight] / totals, 0.0)
    return grouped.drop_duplicates("name").set_index("name")


@analyzer("operators", needs=("cpu_op",), provides=PROVIDES)
def operators(view: TraceView) -> dict[str, Any]:
    """Operators by self time, each with the call site and module that account for most of it."""
    host = view.host
    # only the columns used: a filter copies every column it carries
    ops = host.loc[((host["cat"] == "cpu_op") & (host["step"] >= 0)).to_numpy(),
                   ["name", "self_ns", "dur", "op_top", "src_file", "src_line", "src_func", "module", "phase"]]
    if len(ops) == 0:
        return {}
    steps = max(view.step_count, 1)
    mean_step = step_ms(view)
    top_level = ops[ops["op_top"]]
    by_name = ops.groupby("name", observed=True).agg(self_ns=("self_ns", "sum"), calls=("self_ns", "size"))
    by_name = by_name.sort_values("self_ns", ascending=False).head(TOP_N)
    located = ops[ops["src_line"] >= 0]
    where = _dominant(located, ["src_file", "src_line", "src_func"]) if len(located) else pd.DataFrame()
    module = _dominant(ops[ops["module"] != ""], ["module"]) if (ops["module"] != "").any() else pd.DataFrame()
    phase = _dominant(ops[ops["phase"] != ""], ["phase"]) if (ops["phase"] != "").any() else pd.DataFrame()
    rows = []
    for name, r in by_name.iterrows():
        self_ms = r["self_ns"] / steps / NS_PER_MS
        row = {
            "name": name, "calls_per_step": r["calls"] / steps, "self_ms": self_ms,
            "share": self_ms / mean_step if mean_step else 0.0,
            "avg_us": r["self_ns"] / r["calls"] / 1e3, "file": "", "line": -1, "function": "", "site": "",
            "site_share": 0.0, "module": "", "phase": "",
        }
        if name in where.index:
            w = where.loc[name]
            row.update(file=w["src_file"], line=int(w["src_line"]), function=w["src_func"],
                       site=site(w["src_file"], int(w["src_line"]), w["src_func"]), site_share=float(w["frac"]))
        if name in module.index:
            row["module"] = module.loc[name, "module"]
        if name in phase.index:
            row["phase"] = phase.loc[name, "phase"]
        rows.append(row)
    durs = top_level["dur"].to_numpy()
    return {
        "ops.top": records(rows),
        "ops.per_step": len(top_level) / steps,
        "ops.tiny_per_step": int((durs < TINY_NS).sum()) / steps,
        "ops.cpu_ms": float(durs.sum()) / steps / NS_PER_MS,
        "ops.median_us": float(np.median(durs)) / 1e3 if len(durs) else 0.0,
    }
