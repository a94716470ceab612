"""Runs of small elementwise ops that a compiler would fuse into one kernel.

A hand-written activation (GELU, Swish), normalisation (LayerNorm, RMSNorm) or
loss term is a run of pointwise ops, each of which reads and writes the whole
tensor in eager mode. This analyzer finds *chains*: on each thread, in time
order, a run of at least :data:`MIN_OPS` consecutive outermost operators of
the forward pass (or of the loss, outside any phase) that are all elementwise
or small reductions (:data:`ELEMENTWISE`), from one function of the user's
code in one nn.Module. Views and casts (:data:`TRANSPARENT`) may sit between
them without ending the chain and are not counted as its ops.

A chain's time is its forward ops plus the backward nodes autograd ran for
them (matched by sequence number). Fused, a chain is one kernel forward and
one backward, each about as dear as the dearest kernel it replaces on its
side (the transcendental: tanh, erf, exp), since the cheap ones only add
memory passes that fusion removes: ``fused_ms`` is, per chain, its most
expensive forward op plus the most expensive op its backward nodes ran. A
node is not one kernel: ``PowBackward0`` runs a pow and two multiplies, and
pricing the fused backward at the dearest whole node priced the fused chain
at 43% more than ``F.gelu`` and its backward took in the same runs (8.2 ms a
step against 5.7 on examples/unfused_gelu.py), which put the estimate a
third under the gain. Priced by its dearest op, a node with no op recorded
under it counts whole.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze import group_by, intervals
from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.op_cost import OpRows, backward_nodes, by_site, cost_basis, cost_ns, op_rows, where_text
from advisor.analyze.framework.per_step import NS_PER_MS, step_ms
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer

MIN_OPS = 5

_POINTWISE = (
    "abs", "neg", "exp", "exp2", "expm1", "log", "log1p", "log2", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh",
    "erf", "erfc", "sin", "cos", "relu", "silu", "square", "pow", "clamp", "clamp_min", "clamp_max", "sign",
    "floor", "ceil", "round", "trunc", "add", "sub", "mul", "div", "rsub", "true_divide", "maximum", "minimum",
    "where", "lerp", "addcmul", "addcdiv", "hardtanh", "leaky_relu", "softplus", "elu", "gelu", "mish",
)
_REDUCTIONS = ("mean", "var", "std", "sum", "amax", "amin", "var_mean", "std_mean")
ELEMENTWISE = frozenset(f"aten::{n}{s}" for n in (*_POINTWISE, *_REDUCTIONS) for s in ("", "_"))
TRANSPARENT = frozenset({
    "aten::view", "aten::reshape", "aten::unsqueeze", "aten::squeeze", "aten::expand", "aten::to", "aten::type_as",
    "aten::_to_copy", "aten::detach", "aten::alias", "aten::slice", "aten::select", "aten::t", "aten::transpose",
    "aten::lift_fresh", "aten::result_type",
})
#: phases whose elementwise runs are someone else's concern (the optimizer's update, the input pipeline)
SKIPPED_PHASES = ("backward", "optimizer", "dataloader")

SITE_COLUMNS = {
    "file": "text: the user's file", "line": "count: first line of the chain", "function": "text: function",
    "site": "text: file:line (function)", "module": "text: nn.Module path the chain runs in",
    "phase": "text: phase it runs in most", "calls_per_step": "count: times the chain runs per step",
    "ops": "count: elementwise ops in the chain", "ms": "ms: forward and backward time per step",
    "share": "fraction: of step time", "forward_ms": "ms: of which forward",
    "fused_ms": "ms: its dearest forward op and dearest backward op, per step",
    "top_ops": "text: the chain's ops, in order (first eight)",
}

PROVIDES = (
    FactSpec("elementwise.chains_per_step", "count", f"runs of {MIN_OPS}+ consecutive elementwise ops per step"),
    FactSpec("elementwise.ops_per_step", "count", "elementwise ops in those runs per step"),
    FactSpec("elementwise.max_ops", "count", "ops in the longest run"),
    FactSpec("elementwise.ms", "ms", "the runs' forward and backward time per step"),
    FactSpec("elementwise.share", "fraction", "that time as a share of the step"),
    FactSpec("elementwise.forward_ms", "ms", "of which the forward ops"),
    FactSpec("elementwise.fused_ms", "ms",
             "what the runs would still take fused: each run's dearest forward op and the dearest op its "
             "backward nodes ran, per step"),
    FactSpec("elementwise.where", "text", "the user's lines where the heaviest runs start, up to three"),
    FactSpec("elementwise.basis", "text", "what the times count: host (CPU op time) or gpu (kernel time)"),
    FactSpec("elementwise.chains", "table", "elementwise runs by the line they start at", columns=SITE_COLUMNS),
)


def find_chains(view: TraceView, ops: OpRows) -> list[np.ndarray]:
    """Each run's elementwise op rows (outermost forward ops of one function and module, in time order)."""
    host = view.host
    phase = host["phase"].to_numpy(dtype=object)
    top = ops.in_step & host["op_top"].to_numpy() & ~np.isin(phase, SKIPPED_PHASES)
    top &= ~view.host_names(lambda n: n.startswith("autograd::"), bool) & ~view.host_names(TRANSPARENT.__contains__, bool)
    is_elementwise = view.host_names(ELEMENTWISE.__contains__, bool)
    # one key per place: a run may not cross a module, file or function
    place = group_by.group_ids(*(host[c].cat.codes.to_numpy() for c in ("module", "src_file", "src_func")))[0]
    tids = host["tid"].to_numpy()
    chains: list[np.ndarray] = []
    for tid in np.unique(tids[top]):
        seq = np.flatnonzero(top & (tids == tid))
        ew = is_elementwise[seq]
        # a new run starts at an elementwise op whose predecessor is not elementwise or is elsewhere
        prev_ew = np.r_[False, ew[:-1]]
        same_place = np.r_[False, place[seq][1:] == place[seq][:-1]]
        starts = np.flatnonzero(ew & ~(prev_ew & same_place))
        for a in starts:
            b = a + 1
            while b < len(seq) and ew[b] and place[seq[b]] == place[seq[a]]:
                b += 1
            if b - a >= MIN_OPS:
                chains.append(seq[a:b].astype("int64"))
    return chains


def _dearest_op_ns(view: TraceView, ops: OpRows, nodes: np.ndarray, node_cost: dict[int, int]) -> dict[int, int]:
    """Each backward node's dearest operator (the outermost ``aten::`` calls under it, as
    :func:`~advisor.analyze.framework.op_cost.cost_ns` prices them): the kernel a fused backward stands in
    for. A node with no operator recorded under it keeps its own cost."""
    if not len(nodes):
        return {}
    in_node = np.zeros(len(ops.parent), bool)
    in_node[nodes] = True
    owner = intervals.enclosing(ops.parent, ops.depth, in_node)
    is_aten = ops.is_op & view.host_names(lambda n: n.startswith("aten::"), bool)
    outer_aten = intervals.enclosing(ops.parent, ops.depth, is_aten)
    # outermost under its node: no aten:: call between it and the node
    kernels = np.flatnonzero(is_aten & (owner >= 0) & ((outer_aten < 0) | (owner[np.maximum(outer_aten, 0)] != owner)))
    dearest: dict[int, int] = {}
    for node, cost in zip(owner[kernels].tolist(), cost_ns(view, kernels).tolist()):
        dearest[node] = max(dearest.get(node, 0), cost)
    return {n: dearest.get(n, node_cost[n]) for n in nodes.tolist()}


@analyzer("elementwise", needs=("cpu_op",), provides=PROVIDES)
def elementwise(view: TraceView) -> dict[str, Any]:
    """Runs of consecutive elementwise ops (hand-written activations, norms, losses) and their time."""
    ops = op_rows(view)
    chains = find_chains(view, ops)
    if not chains:
        return {"elementwise.chains_per_step": 0.0, "elementwise.ms": 0.0, "elementwise.share": 0.0}
    steps = max(view.step_count, 1)
    fwd = np.concatenate(chains)
    fwd_cost = dict(zip(fwd.tolist(), cost_ns(view, fwd).tolist()))
    of_row = backward_nodes(view, ops, fwd)
    per_chain = [[n for r in rows for n in of_row[int(r)]] for rows in chains]
    nodes = np.asarray(sorted(n for c in per_chain for n in c), "int64")
    node_cost = dict(zip(nodes.tolist(), cost_ns(view, nodes).tolist())) if len(nodes) else {}
    kernel_cost = _dearest_op_ns(view, ops, nodes, node_cost)
    forward = np.array([sum(fwd_cost[r] for r in rows) for rows in chains], "int64")
    total = forward + np.array([sum(node_cost[n] for n in nodes_of) for nodes_of in per_chain], "int64")
    fused = np.array([max(fwd_cost[r] for r in rows) + max((kernel_cost[n] for n in nodes_of), default=0)
                      for rows, nodes_of in zip(chains, per_chain)], "int64")
    firsts = np.array([rows[0] for rows in chains])
    n_ops = np.array([len(rows) for rows in chains])
    top_ops = np.array([" ".join(str(ops.names[r]).removeprefix("aten::") for r in rows[:8]) for rows in chains],
                       dtype=object)
    sites = by_site(view, firsts, total, {"ops": n_ops.astype(object), "top_ops": top_ops}, sums={"forward_ms": forward, "fused_ms": fused})
    ms = float(total.sum()) / steps / NS_PER_MS
    mean = step_ms(view)
    return {
        "elementwise.chains_per_step": len(chains) / steps,
        "elementwise.ops_per_step": int(n_ops.sum()) / steps,
        "elementwise.max_ops": int(n_ops.max()),
        "elementwise.ms": ms,
        "elementwise.share": ms / mean if mean else 0.0,
        "elementwise.forward_ms": float(forward.sum()) / steps / NS_PER_MS,
        "elementwise.fused_ms": float(fused.sum()) / steps / NS_PER_MS,
        "elementwise.where": where_text(sites),
        "elementwise.basis": cost_basis(view),
        "elementwise.chains": records(sites),
    }
