"""The optimizer step: which optimizer, how many ops it launches, and which implementation."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from advisor.analyze.findings import FactSpec
from advisor.analyze.framework.per_step import call_site_of_rows, site
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer
from advisor.naming import PHASE_NAMES

_STEP = re.compile(r"^Optimizer\.step#(?P<cls>[^.]+)\.step$")

PROVIDES = (
    FactSpec("optimizer.name", "text", "class of the optimizer that steps (Adam, SGD, ...)"),
    FactSpec("optimizer.ops_per_step", "count", "outermost operator calls inside optimizer.step() per step"),
    FactSpec("optimizer.foreach", "bool", "the step uses multi-tensor (_foreach_) kernels"),
    FactSpec("optimizer.fused", "bool", "the step uses a fused optimizer kernel"),
    FactSpec("optimizer.per_param_calls", "count",
             "outermost operator calls per parameter tensor (for-loop) or per group of tensors (foreach, fused): "
             "the calls per step over the per-step count most of its operators share"),
    FactSpec("optimizer.site", "text", "the user's line that calls optimizer.step()"),
    FactSpec("optimizer.file", "text", "file of that line"),
    FactSpec("optimizer.line", "count", "line number of that line"),
)


@analyzer("optimizer", needs=("user_annotation",), provides=PROVIDES)
def optimizer(view: TraceView) -> dict[str, Any]:
    """Describe optimizer.step(): class, op count, foreach/fused, call site."""
    host = view.host
    in_steps = (host["step"] >= 0).to_numpy()
    steps = in_steps & view.host_names(_STEP.match, bool)
    if not steps.any():
        return {}
    unique, counts = np.unique(view.host_name_texts[steps].astype(str), return_counts=True)
    out: dict[str, Any] = {"optimizer.name": _STEP.match(str(unique[np.argmax(counts)]))["cls"]}
    in_step = in_steps & (host["phase"] == "optimizer").to_numpy() & (host["cat"] == "cpu_op").to_numpy()
    top = in_step & host["op_top"].to_numpy()
    out["optimizer.ops_per_step"] = int(top.sum()) / max(view.step_count, 1)
    if top.any():
        out["optimizer.per_param_calls"] = _per_param_calls(view.host_name_texts[top].astype(str))
    out["optimizer.foreach"] = bool((in_step & view.host_names(lambda n: n.startswith("aten::_foreach_"), bool)).any())
    out["optimizer.fused"] = bool((in_step & view.host_names(lambda n: "_fused_" in n, bool)).any())
    where = call_site_of_rows(view, np.flatnonzero(in_steps & (host["name"] == PHASE_NAMES["optimizer"]).to_numpy()))
    if where:
        out["optimizer.site"] = site(*where)
        out["optimizer.file"], out["optimizer.line"] = where[0], where[1]
    return out


def _per_param_calls(names: np.ndarray) -> float:
    """Calls per parameter tensor: the for-loop implementation runs the same operators once per tensor, so
    the count most of them share is the number of tensors (a foreach or fused step runs each once per group)."""
    _, counts = np.unique(names, return_counts=True)
    values, shared = np.unique(counts, return_counts=True)
    tensors = values[np.argmax(shared)]  # on a tie, the smaller count
    return float(len(names) / tensors)
