"""What a set of host operator calls costs, and where in the user's code they come from.

Shared by the analyzers that find a pattern of operators (layout copies,
gradient zeroing, hand-written attention, elementwise chains) and must say
how much time the pattern takes and which lines make it:

- :func:`op_rows`: the ``cpu_op`` rows of :attr:`TraceView.host` inside the
  analysed steps, and each row's nearest enclosing operator.
- :func:`cost_ns`: each matched call's cost. On a CPU trace that is the
  call's wall time (its operators run inline); on a trace with GPU activity it
  is the GPU time of the kernels, copies and memsets launched under it, since
  there the host call only queues the work.
- :func:`by_site`: the calls grouped by the user's line, heaviest first.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from advisor.analyze import group_by, intervals
from advisor.analyze.framework.per_step import NS_PER_MS, site
from advisor.analyze.framework.view import TraceView

__all__ = ["OpRows", "backward_nodes", "by_site", "cost_basis", "cost_ns", "op_rows", "outer_op_names", "where_text"]

BACKWARD_PREFIX = "autograd::engine::evaluate_function: "


class OpRows:
    """The operator rows of one view in the analysed steps, with their enclosing operators."""

    def __init__(self, view: TraceView) -> None:
        host = view.host
        self.view = view
        self.names = view.host_name_texts
        is_op = (host["cat"] == "cpu_op").to_numpy()
        self.is_op = is_op
        self.in_step = is_op & (host["step"] >= 0).to_numpy()
        parent, depth = host["parent"].to_numpy(), host["depth"].to_numpy()
        self.parent, self.depth = parent, depth
        #: row of the nearest enclosing cpu_op, -1 for outermost operators
        self.parent_op = intervals.enclosing(parent, depth, is_op)

    def named(self, *names: str) -> np.ndarray:
        """Mask of operator rows in steps whose name is one of ``names``."""
        wanted = frozenset(names)
        return self.in_step & self.view.host_names(lambda n: n in wanted, bool)

    def outermost(self, mask: np.ndarray) -> np.ndarray:
        """The rows of ``mask`` that have no ancestor in ``mask``."""
        return mask & (intervals.enclosing(self.parent, self.depth, mask) < 0)


def op_rows(view: TraceView) -> OpRows:
    """The view's :class:`OpRows`, built once: six analyzers read them, and each build walks every host row."""
    rows = view.__dict__.get("_op_rows")
    if rows is None:
        rows = view.__dict__["_op_rows"] = OpRows(view)
    return rows


def cost_basis(view: TraceView) -> str:
    """What :func:`cost_ns` counts in this trace: ``host`` time or ``gpu`` time."""
    return "gpu" if view.trace.has_gpu and len(view.gpu.ops) else "host"


def cost_ns(view: TraceView, rows: np.ndarray) -> np.ndarray:
    """The cost of each host row in ``rows`` (int64 ns): wall time on a CPU trace, GPU time under it on a GPU trace."""
    host = view.host
    if cost_basis(view) == "host":
        return host["dur"].to_numpy()[rows].astype("int64")
    ops = view.gpu.ops
    launch = ops["launch"].to_numpy()
    linked = launch >= 0
    mask = np.zeros(len(host), bool)
    mask[rows] = True
    owner = intervals.enclosing(host["parent"].to_numpy(), host["depth"].to_numpy(), mask)
    at = np.where(linked, owner[np.maximum(launch, 0)], -1)
    total = np.zeros(len(host), "int64")
    ok = at >= 0
    np.add.at(total, at[ok], ops["dur"].to_numpy()[ok])
    return total[rows]


def backward_nodes(view: TraceView, ops: OpRows, rows: np.ndarray) -> dict[int, list[int]]:
    """For each forward op row in ``rows``: the backward nodes autograd ran for it or for the ops inside it.

    A backward node (``autograd::engine::evaluate_function: XBackward0``) carries the sequence number
    of the forward op that recorded it; a composite op (``aten::matmul``) records its nodes in the ops
    it calls, so every sequence number under the row counts. Sequence numbers are counted per thread
    and ops that record no node still take one, so a node is matched only when it is named after the
    op (``aten::masked_fill`` → ``MaskedFillBackward0``).
    """
    host = view.host
    seq = host["seq"].to_numpy()
    mask = np.zeros(len(host), bool)
    mask[rows] = True
    owner = np.where(mask, np.arange(len(host)), intervals.enclosing(ops.parent, ops.depth, mask))
    is_node = ops.in_step & view.host_names(lambda n: n.startswith(BACKWARD_PREFIX), bool) & (seq >= 0)
    forward = np.flatnonzero(ops.is_op & (owner >= 0) & (seq >= 0) & ~is_node)
    row_of_seq = {int(q): (int(o), _op_stem(str(ops.names[f]))) for q, o, f in zip(seq[forward], owner[forward], forward)}
    out: dict[int, list[int]] = {int(r): [] for r in rows}
    for n in np.flatnonzero(is_node):
        hit = row_of_seq.get(int(seq[n]))
        if hit is not None and hit[1] == _node_stem(str(ops.names[n])):
            out[hit[0]].append(int(n))
    return out


def _op_stem(name: str) -> str:
    """``aten::masked_fill_`` → ``maskedfill``: an op's name as its backward node spells it."""
    return name.split("::")[-1].strip("_").replace("_", "").lower()


def _node_stem(name: str) -> str:
    """``autograd::engine::evaluate_function: MaskedFillBackward0`` → ``maskedfill``."""
    node = name[len(BACKWARD_PREFIX):]
    return re.sub(r"Backward\d*$", "", node).lower()


def outer_op_names(ops: OpRows, rows: np.ndarray) -> np.ndarray:
    """For each row, the name of the outermost operator around it ("" when it is outermost itself);
    a backward node is named by its function (``ViewBackward0``)."""
    out = np.empty(len(rows), dtype=object)
    for i, r in enumerate(rows):
        top, p = -1, ops.parent_op[r]
        while p >= 0:
            top, p = p, ops.parent_op[p]
        name = str(ops.names[top]) if top >= 0 else ""
        out[i] = name[len(BACKWARD_PREFIX):] if name.startswith(BACKWARD_PREFIX) else name
    return out


def by_site(view: TraceView, rows: np.ndarray, cost: np.ndarray, extra: dict[str, np.ndarray] | None = None,
            top: int = 10, sums: dict[str, np.ndarray] | None = None) -> list[dict[str, Any]]:
    """The calls at ``rows`` grouped by the user's line (and by each ``extra`` key), heaviest first.

    Each record: file, line, function, site, module and phase (those carrying the most cost),
    calls_per_step, ms (per step), share (of the mean step), the ``extra`` keys, and for each
    ``sums`` column (ns per row) its total in ms per step.
    """
    host = view.host
    steps = max(view.step_count, 1)
    mean_step = float(view.steps["dur"].mean()) if view.step_count else 0.0
    cols = {c: host[c].to_numpy(dtype=object)[rows] for c in ("src_file", "src_func", "module", "phase")}
    line = host["src_line"].to_numpy()[rows]
    extra = extra or {}
    keys = [cols["src_file"], line, cols["src_func"], *extra.values()]
    ids, n = group_by.group_ids(*keys)
    calls = np.bincount(ids, minlength=n)
    total = group_by.sums(ids, n, cost.astype("float64"))
    first = group_by.first_rows(ids, n)
    out = []
    for g in group_by.by_weight(total, "stable")[:top]:
        r = first[g]
        members = ids == g
        rec = {
            "file": str(cols["src_file"][r]), "line": int(line[r]), "function": str(cols["src_func"][r]),
            "site": site(str(cols["src_file"][r]), int(line[r]), str(cols["src_func"][r])),
            "module": _modules(cols["module"][members], cost[members]),
            "phase": _heaviest(cols["phase"][members], cost[members]),
            "calls_per_step": calls[g] / steps, "ms": total[g] / steps / NS_PER_MS,
            "share": total[g] / steps / mean_step if mean_step else 0.0,
        }
        rec.update({k: v[r] for k, v in extra.items()})
        rec.update({k: float(v[members].sum()) / steps / NS_PER_MS for k, v in (sums or {}).items()})
        out.append(rec)
    return out


def _heaviest(values: np.ndarray, weights: np.ndarray) -> str:
    if len(values) == 0:
        return ""
    uniq, inverse = np.unique(values.astype(str), return_inverse=True)
    return str(uniq[int(np.argmax(np.bincount(inverse, weights=weights.astype("float64"))))])


def _modules(values: np.ndarray, weights: np.ndarray) -> str:
    """The module with the most cost, and how many others share the line (one block class, many layers)."""
    best = _heaviest(values, weights)
    others = len({str(v) for v in values if v}) - (1 if best else 0)
    return f"{best} (and {others} more)" if best and others > 0 else best


def where_text(sites: list[dict[str, Any]], limit: int = 3) -> str:
    """The first few distinct sites, "a.py:3 (f); a.py:9 (g)", or "" when none is known."""
    seen: list[str] = []
    for rec in sites:
        if rec["site"] and rec["site"] not in seen:
            seen.append(rec["site"])
        if len(seen) == limit:
            break
    return "; ".join(seen)
