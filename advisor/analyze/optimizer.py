"""The optimizer step: which optimizer, how many ops it launches, and which implementation."""

from __future__ import annotations

import re
from typing import Any

from advisor.analyze import names as by_name
from advisor.analyze.common import call_site_of, in_steps, site
from advisor.analyze.findings import FactSpec
from advisor.analyze.registry import analyzer
from advisor.analyze.view import TraceView
from advisor.naming import PHASE_NAMES

_STEP = re.compile(r"^Optimizer\.step#(?P<cls>[^.]+)\.step$")

PROVIDES = (
    FactSpec("optimizer.name", "text", "class of the optimizer that steps (Adam, SGD, ...)"),
    FactSpec("optimizer.ops_per_step", "count", "outermost operator calls inside optimizer.step() per step"),
    FactSpec("optimizer.foreach", "bool", "the step uses multi-tensor (_foreach_) kernels"),
    FactSpec("optimizer.fused", "bool", "the step uses a fused optimizer kernel"),
    FactSpec("optimizer.site", "text", "the user's line that calls optimizer.step()"),
    FactSpec("optimizer.file", "text", "file of that line"),
    FactSpec("optimizer.line", "count", "line number of that line"),
)


@analyzer("optimizer", needs=("user_annotation",), provides=PROVIDES)
def optimizer(view: TraceView) -> dict[str, Any]:
    """Describe optimizer.step(): class, op count, foreach/fused, call site."""
    host = in_steps(view.host)
    names = host["name"]
    steps = host[by_name.where(names, _STEP.match)]
    if len(steps) == 0:
        return {}
    out: dict[str, Any] = {"optimizer.name": _STEP.match(steps["name"].mode().iloc[0])["cls"]}
    in_step = host[(host["phase"] == "optimizer") & (host["cat"] == "cpu_op")]
    out["optimizer.ops_per_step"] = int(in_step["op_top"].sum()) / max(view.step_count, 1)
    out["optimizer.foreach"] = bool(in_step["name"].str.startswith("aten::_foreach_").any())
    out["optimizer.fused"] = bool(in_step["name"].str.contains("_fused_").any())
    where = call_site_of(view, host[names == PHASE_NAMES["optimizer"]])
    if where:
        out["optimizer.site"] = site(*where)
        out["optimizer.file"], out["optimizer.line"] = where[0], where[1]
    return out
