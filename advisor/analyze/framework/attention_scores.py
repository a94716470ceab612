"""The score matrix of hand-written attention, from the shapes the trace recorded (for :mod:`.attention`).

Written out, attention materialises ``softmax(Q·Kᵀ)``: one element per (batch, head, query, key). Each
pass over it (scale, mask, softmax, dropout) reads and writes it whole, so on a GPU these passes are bound
by memory bandwidth, and no kernel can make them cheaper than the bytes they move: only a fused kernel,
which never writes the matrix, removes them. Two figures say so from the trace:

- the matrix's size per call: the softmax input's ``Input Dims`` and dtype;
- the bandwidth the forward passes reach: the bytes their modelled operators move (:func:`.op_efficiency
  .call_bytes`, each tensor read or written once) over the GPU time of their kernels, and that rate as a
  share of the GPU's memory bandwidth (:mod:`.gpu_spec`). Near 1 the passes already run as fast as memory
  allows; well under it they also lose time to small or strided kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

from advisor.analyze import intervals
from advisor.analyze.framework.op_call import OpCall
from advisor.analyze.framework.op_cost import cost_ns
from advisor.analyze.framework.op_efficiency import call_bytes
from advisor.analyze.framework.view import TraceView

__all__ = ["ScoreTraffic", "score_traffic"]


@dataclass(frozen=True)
class ScoreTraffic:
    """The heaviest chain's score matrix, and the forward passes' bandwidth over all chains."""

    shape: str
    nbytes: int | None
    #: achieved TB/s of the forward pointwise passes; None without modelled bytes or GPU time
    tb_s: float | None


def score_traffic(view: TraceView, chains: list[tuple[np.ndarray, int]], pointwise: list[np.ndarray],
                  heaviest: int) -> ScoreTraffic:
    """``chains``: (rows, softmax row) per chain; ``pointwise``: each chain's rows other than its matmuls;
    ``heaviest``: the index of the chain with the most time."""
    shape, nbytes = _scores(view, chains[heaviest][1])
    rows = np.concatenate(pointwise) if pointwise else np.zeros(0, "int64")
    if not len(rows):
        return ScoreTraffic(shape, nbytes, None)
    host = view.host
    mask = np.zeros(len(host), bool)
    mask[rows] = True
    owner = np.where(mask, np.arange(len(host)), intervals.enclosing(host["parent"].to_numpy(),
                                                                    host["depth"].to_numpy(), mask))
    moved = call_bytes(view)
    counted = (owner >= 0) & np.isfinite(moved)
    per_row = np.bincount(owner[counted], weights=moved[counted], minlength=len(host))[rows]
    timed = cost_ns(view, rows)
    both = (per_row > 0) & (timed > 0)  # passes with a model and GPU time: a rate over the same calls
    ns, total = float(timed[both].sum()), float(per_row[both].sum())
    return ScoreTraffic(shape, nbytes, total / ns / 1e3 if ns else None)


def _scores(view: TraceView, softmax: int) -> tuple[str, int | None]:
    """The softmax input's Input Dims and its size in bytes."""
    columns = ("input_dims", "input_types", "concrete_inputs")
    if not all(c in view.events for c in columns):
        return "", None
    event = int(view.host["event"].to_numpy()[softmax])
    texts = [str(view.events[c].iloc[event] or "") for c in columns]
    call = OpCall.parse(str(view.host_name_texts[softmax]), *texts)
    shape = call.shape(0) if call is not None else None
    bpe = call.bpe(0) if call is not None else None
    if shape is None or bpe is None:
        return "", None
    return "[" + ",".join(map(str, shape)) + "]", prod(shape) * bpe
