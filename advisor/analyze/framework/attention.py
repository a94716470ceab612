"""Attention written out by hand: matmul, scale and mask, softmax, dropout, matmul.

``F.scaled_dot_product_attention`` runs attention as one fused kernel. Written
by hand (or through ``nn.MultiheadAttention`` with ``need_weights=True``, or
a Hugging Face model with ``attn_implementation="eager"``), it is a *chain*
of the user's calls, which this analyzer finds among the outermost operators
of each thread, in time order:

    matmul/bmm/einsum → up to 8 ops (scale, mask, casts, views) → softmax
    → up to 4 ops (dropout, casts, views) → matmul/bmm/einsum

all inside the nn.Module the softmax runs in (a dropout module of its own, ``self.attn_drop =
nn.Dropout(p)``, is inside it), or all outside modules. Softmax inside
``scaled_dot_product_attention``'s own math fallback is not outermost, so it
is never counted. Each chain's time is its forward operators plus the
backward nodes that autograd ran for them (matched by sequence number), split
into the two matmuls' part and the *pointwise* part: the scale, mask,
softmax and dropout passes over the score matrix, forward and backward. A
dropout counts only when it did work (it called an op of its own): in
evaluation mode ``F.dropout`` returns its input and launches nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.op_cost import OpRows, backward_nodes, by_site, cost_basis, cost_ns, op_rows, where_text
from advisor.analyze import intervals
from advisor.analyze.framework.attention_scores import score_traffic
from advisor.analyze.framework.gpu_spec import device_spec
from advisor.analyze.framework.per_step import NS_PER_MS, step_ms
from advisor.analyze.framework.source_labels import parse_module_name
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

MATMUL = frozenset({"aten::matmul", "aten::bmm", "aten::einsum", "aten::baddbmm", "aten::mm"})
SOFTMAX = frozenset({"aten::softmax", "aten::_softmax", "aten::_safe_softmax"})
DROPOUT = frozenset({"aten::dropout", "aten::native_dropout", "aten::feature_dropout", "aten::dropout_"})
#: ops before the softmax that mask the scores (a causal or padding mask, or an additive bias)
MASK = frozenset({"aten::masked_fill", "aten::masked_fill_", "aten::where", "aten::add", "aten::add_"})
#: most ops between the first matmul and the softmax (scale, mask, casts, views), and after it
BEFORE, AFTER = 8, 4

SITE_COLUMNS = {
    "file": "text: the user's file", "line": "count: line of the softmax", "function": "text: function of that line",
    "site": "text: file:line (function)", "module": "text: nn.Module path the chain runs in",
    "phase": "text: phase it runs in most", "calls_per_step": "count: chains per step",
    "ms": "ms: forward and backward time per step", "share": "fraction: of step time",
    "pointwise_ms": "ms: of which scale, mask, softmax and dropout over the scores, forward and backward",
    "dropout": "bool: the chain applies dropout to the attention weights",
}

PROVIDES = (
    FactSpec("attention.unfused_per_step", "count", "hand-written attention chains (matmul, softmax, matmul) per step"),
    FactSpec("attention.ms", "ms", "their forward and backward time per step"),
    FactSpec("attention.share", "fraction", "that time as a share of the step"),
    FactSpec("attention.matmul_ms", "ms", "of which the two matmuls (Q·Kᵀ and ·V), forward and backward"),
    FactSpec("attention.pointwise_ms", "ms",
             "of which the passes over the score matrix (scale, mask, softmax, dropout), forward and backward"),
    FactSpec("attention.pointwise_dropout_ms", "ms", "of the pointwise time, chains with dropout on the attention weights"),
    FactSpec("attention.pointwise_unmasked_ms", "ms", "of the pointwise time, chains with neither a mask nor dropout"),
    FactSpec("attention.dropout", "bool", "some chain applies dropout to the attention weights"),
    FactSpec("attention.module", "text", "the nn.Module the heaviest chain runs in"),
    FactSpec("attention.where", "text", "the user's lines of the heaviest chains' softmax, up to three"),
    FactSpec("attention.basis", "text", "what the times count: host (CPU op time) or gpu (kernel time)"),
    FactSpec("attention.pointwise_share", "fraction", "the pointwise time as a share of the step"),
    FactSpec("attention.scores_shape", "text", "the heaviest chain's score matrix (the softmax input's dims)"),
    FactSpec("attention.scores_bytes", "bytes", "that matrix's size per call"),
    FactSpec("attention.scores_tb_s", "ratio", "TB/s the forward passes over the score matrices reach on the GPU "
             "(their modelled bytes over their kernel time)"),
    FactSpec("attention.scores_bandwidth_share", "fraction", "that rate over the GPU's memory bandwidth"),
    FactSpec("attention.sites", "table", "hand-written attention chains by the line of their softmax",
             columns=SITE_COLUMNS),
)


def find_chains(view: TraceView, ops: OpRows) -> list[tuple[np.ndarray, int]]:
    """Each chain's outermost forward op rows (first matmul to second matmul), and the row of its softmax."""
    host = view.host
    top = ops.in_step & host["op_top"].to_numpy() & (host["phase"] != "backward").to_numpy()
    top &= ~view.host_names(lambda n: n.startswith("autograd::"), bool)
    names = list(host["module"].cat.categories)
    outside = host["module"].cat.codes.to_numpy() == (names.index("") if "" in names else -2)
    inside = _inside_module_of(view)
    tids = host["tid"].to_numpy()
    chains = []
    kinds = np.where(view.host_names(SOFTMAX.__contains__, bool), 2,
                     np.where(view.host_names(MATMUL.__contains__, bool), 1, 0)).astype("int8")
    for tid in np.unique(tids[top]):
        seq = np.flatnonzero(top & (tids == tid))
        kind = kinds[seq]
        for i in np.flatnonzero(kind == 2):
            first = _nearest(kind, i, -1, BEFORE)
            last = _nearest(kind, i, 1, AFTER)
            if first < 0 or last < 0:
                continue
            rows = seq[first:last + 1]
            if outside[rows].all() if outside[seq[i]] else inside(rows, int(seq[i])):
                chains.append((rows, int(seq[i])))
    return chains


def _inside_module_of(view: TraceView):  # noqa: ANN202
    """A test: are all these host rows inside the nn.Module range that encloses row ``softmax``?"""
    host = view.host
    is_module = view.host_names(lambda n: parse_module_name(n) is not None, bool)
    around = intervals.enclosing(host["parent"].to_numpy(), host["depth"].to_numpy(), is_module)
    ts, end = host["ts"].to_numpy(), host["end"].to_numpy()

    def inside(rows: np.ndarray, softmax: int) -> bool:
        m = around[softmax]
        return m >= 0 and bool(((ts[rows] >= ts[m]) & (end[rows] <= end[m])).all())
    return inside


def _nearest(kind: np.ndarray, i: int, step: int, limit: int) -> int:
    """Index of the nearest matmul from ``i`` in direction ``step`` within ``limit`` ops, with no softmax or
    matmul in between; -1 when there is none."""
    for j in range(i + step, i + step * (limit + 2), step):
        if j < 0 or j >= len(kind) or kind[j] == 2:
            return -1
        if kind[j] == 1:
            return j
    return -1


@analyzer("attention", needs=("cpu_op",), provides=PROVIDES)
def attention(view: TraceView) -> dict[str, Any]:
    """Hand-written attention chains (matmul, softmax, matmul) and their forward and backward time."""
    ops = op_rows(view)
    chains = find_chains(view, ops)
    if not chains:
        return {"attention.unfused_per_step": 0.0, "attention.ms": 0.0, "attention.share": 0.0}
    steps = max(view.step_count, 1)
    fwd_rows = np.concatenate([rows for rows, _ in chains])
    fwd_cost = dict(zip(fwd_rows.tolist(), cost_ns(view, fwd_rows).tolist()))
    of_row = backward_nodes(view, ops, fwd_rows)
    nodes = np.asarray(sorted(n for ns in of_row.values() for n in ns), "int64")
    node_cost = dict(zip(nodes.tolist(), cost_ns(view, nodes).tolist())) if len(nodes) else {}
    # a row's cost: its forward time and its backward nodes'
    row_cost = {r: fwd_cost[r] + sum(node_cost[n] for n in of_row[r]) for r in fwd_cost}
    matmul = np.array([sum(row_cost[r] for r in rows.tolist() if ops.names[r] in MATMUL) for rows, _ in chains])
    other = np.array([sum(row_cost[r] for r in rows.tolist() if ops.names[r] not in MATMUL) for rows, _ in chains])
    total = matmul + other
    softmax_rows = np.array([s for _, s in chains])
    worked = np.zeros(len(view.host), bool)
    worked[ops.parent_op[ops.parent_op >= 0]] = True  # an op that called another did work
    dropout = np.array([any(ops.names[r] in DROPOUT and worked[r] for r in rows) for rows, _ in chains])
    masked = np.array([any(ops.names[r] in MASK for r in rows[rows < s]) for rows, s in chains])
    sites = by_site(view, softmax_rows, total, {"dropout": dropout.astype(object)}, sums={"pointwise_ms": other})
    ms = float(total.sum()) / steps / NS_PER_MS
    mean = step_ms(view)
    pointwise_ms = float(other.sum()) / steps / NS_PER_MS
    return {
        **_scores(view, chains, [rows[~np.isin(ops.names[rows], list(MATMUL))] for rows, _ in chains],
                  int(np.argmax(total))),
        "attention.pointwise_share": pointwise_ms / mean if mean else 0.0,
        "attention.unfused_per_step": len(chains) / steps,
        "attention.ms": ms,
        "attention.share": ms / mean if mean else 0.0,
        "attention.matmul_ms": float(matmul.sum()) / steps / NS_PER_MS,
        "attention.pointwise_ms": pointwise_ms,
        "attention.pointwise_dropout_ms": float(other[dropout].sum()) / steps / NS_PER_MS,
        "attention.pointwise_unmasked_ms": float(other[~dropout & ~masked].sum()) / steps / NS_PER_MS,
        "attention.dropout": bool(dropout.any()),
        "attention.module": sites[0]["module"] if sites else "",
        "attention.where": where_text(sites),
        "attention.basis": cost_basis(view),
        "attention.sites": records(sites),
    }


def _scores(view: TraceView, chains: list[tuple[np.ndarray, int]], pointwise: list[np.ndarray],
            heaviest: int) -> dict[str, Any]:
    """The score-matrix facts (:mod:`.attention_scores`); the bandwidth only on a GPU trace."""
    t = score_traffic(view, chains, pointwise, heaviest)
    out: dict[str, Any] = {"attention.scores_shape": t.shape, "attention.scores_bytes": t.nbytes}
    if cost_basis(view) == "gpu" and t.tb_s is not None:
        spec, _ = device_spec(view)
        out["attention.scores_tb_s"] = t.tb_s
        out["attention.scores_bandwidth_share"] = t.tb_s / spec.memory_tb_s if spec else None
    return out
