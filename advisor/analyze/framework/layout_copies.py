"""Copies that only change a tensor's memory layout: ``.contiguous()`` and reshapes of strided views.

A transpose, permute, expand or strided slice is a view: it changes strides,
not data. An op that needs contiguous memory then copies the view into a new
tensor. The trace shows such a copy as

- ``aten::contiguous`` (→ ``aten::clone`` → ``aten::copy_``): called by the
  user's ``.contiguous()`` (*explicit*), or inside another op that needs
  dense input, such as a backward kernel handed a strided gradient
  (*implicit*);
- ``aten::clone`` directly under ``aten::reshape``: a reshape (``view``,
  ``flatten``, a matmul folding batch dims) of a tensor whose strides do not
  allow a view, forward or backward (*implicit*).

Copies made for other reasons (dtype or device conversions, ``addmm``
broadcasting its bias, ``torch.clone``) are not counted. Each copy's cost is
its wall time on a CPU trace and the GPU time of its kernels on a GPU trace
(:mod:`.op_cost`); a copy made in backward is charged to the forward line
whose backward made it.

On a CPU trace that wall time overstates what the copies cost the script:
under the profiler a copy's output often lands on fresh pages, and the
faults are part of the recorded copy (on examples/strided_copies.py the
copies took 4-5 times their unprofiled cost, the step twice its). Where the
collector timed copies in the run's process (:mod:`advisor.collect.copy_costs`)
and the shape steps recorded each copy's input, every copy is also priced by
its bytes and pattern (:mod:`.copy_price`): ``layout_copies.priced_ms_unprofiled``.
``layout_copies.priced_ms`` stretches that as the profiler stretched the
whole step, into the recorded steps' milliseconds, as INF001's autograd time
is (:mod:`.workload`). Copies without a recorded input are priced at the
priced ones' ratio of price to recorded time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.copy_price import copy_prices_us
from advisor.analyze.framework.op_cost import OpRows, by_site, cost_basis, cost_ns, op_rows, outer_op_names, where_text
from advisor.analyze.framework.per_step import NS_PER_MS, profiler_stretch, step_ms
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

SITE_COLUMNS = {
    "file": "text: the user's file", "line": "count: line", "function": "text: function of that line",
    "site": "text: file:line (function)", "module": "text: nn.Module path the copies ran in most",
    "phase": "text: phase they ran in most (forward, backward, ...)",
    "kind": "text: explicit (.contiguous() in the user's code) or implicit (inside another op)",
    "inside": "text: the outermost op the copy ran in (a backward node for backward copies); empty when explicit",
    "calls_per_step": "count: copies per step", "ms": "ms: their time per step", "share": "fraction: of step time",
}

PROVIDES = (
    FactSpec("layout_copies.ms", "ms", "time per step in copies made only to change a tensor's layout"),
    FactSpec("layout_copies.share", "fraction", "that time as a share of the step"),
    FactSpec("layout_copies.calls_per_step", "count", "layout copies per step"),
    FactSpec("layout_copies.explicit_ms", "ms", "of which from .contiguous() calls in the user's code"),
    FactSpec("layout_copies.basis", "text", "what the times count: host (CPU op time) or gpu (kernel time)"),
    FactSpec("layout_copies.priced_ms_unprofiled", "ms", "CPU: the copies per step priced by their bytes and "
             "pattern at what copies cost in the run's process without the profiler (host_costs.copy_us)"),
    FactSpec("layout_copies.priced_ms", "ms", "the same stretched as the profiler stretched the whole step, in "
             "the recorded steps' time (equal to it where the run timed no steps without the profiler)"),
    FactSpec("layout_copies.priced_share", "fraction", "layout_copies.priced_ms as a share of the step"),
    FactSpec("layout_copies.where", "text", "the user's lines with the most copy time, up to three"),
    FactSpec("layout_copies.sites", "table", "layout copies by the user's line that makes them", columns=SITE_COLUMNS),
)


def layout_copy_rows(ops: OpRows) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``view.host`` that are layout copies, and whether each is an explicit ``.contiguous()``."""
    contiguous = ops.named("aten::contiguous")
    clone = ops.named("aten::clone")
    parent = ops.parent_op
    reshape = np.zeros(len(clone), bool)
    has_parent = clone & (parent >= 0)
    reshape[has_parent] = ops.view.host_names(lambda n: n == "aten::reshape", bool)[parent[has_parent]]
    rows = np.flatnonzero(ops.outermost(contiguous | reshape))
    explicit = contiguous[rows] & (parent[rows] < 0)
    return rows, explicit


@analyzer("layout_copies", needs=("cpu_op",), provides=PROVIDES)
def layout_copies(view: TraceView) -> dict[str, Any]:
    """Copies made by .contiguous() and by reshapes of strided views, by the user's line."""
    ops = op_rows(view)
    rows, explicit = layout_copy_rows(ops)
    if len(rows) == 0:
        return {"layout_copies.ms": 0.0, "layout_copies.share": 0.0, "layout_copies.calls_per_step": 0.0}
    cost = cost_ns(view, rows)
    steps = max(view.step_count, 1)
    total = float(cost.sum()) / steps / NS_PER_MS
    mean = step_ms(view)
    kind = np.where(explicit, "explicit", "implicit").astype(object)
    inside = outer_op_names(ops, rows)
    sites = by_site(view, rows, cost, {"kind": kind, "inside": inside})
    out = {
        "layout_copies.ms": total,
        "layout_copies.share": total / mean if mean else 0.0,
        "layout_copies.calls_per_step": len(rows) / steps,
        "layout_copies.explicit_ms": float(cost[explicit].sum()) / steps / NS_PER_MS,
        "layout_copies.basis": cost_basis(view),
        "layout_copies.where": where_text(sites),
        "layout_copies.sites": records(sites),
    }
    if cost_basis(view) == "host":
        out.update(_priced(view, rows, cost, steps, mean))
    return out


def _priced(view: TraceView, rows: np.ndarray, cost: np.ndarray, steps: int, step: float) -> dict[str, Any]:
    """The copies priced without the profiler (see the module docstring); {} without a probe or shapes."""
    prices = copy_prices_us(view, rows)
    if prices is None:
        return {}
    known = np.isfinite(prices)
    if not known.any():
        return {}
    priced_us = float(prices[known].sum())
    recorded_ns = float(cost[known].sum())
    if (~known).any() and recorded_ns > 0:
        priced_us += float(cost[~known].sum()) * priced_us / recorded_ns  # at the priced ones' us per recorded ns
    bare = priced_us / steps / 1e3
    stretch = profiler_stretch(view)
    priced = bare * max(stretch, 1.0) if stretch else bare
    return {"layout_copies.priced_ms_unprofiled": bare, "layout_copies.priced_ms": priced,
            "layout_copies.priced_share": priced / step if step else 0.0}
