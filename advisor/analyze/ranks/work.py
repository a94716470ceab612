"""Whether the ranks did the same work: the same operators on inputs of the same shapes, per step.

A straggler does more work than the others, or the same work slower. More work comes from the data (longer
sequences, more tokens routed to one expert) or from code that only one rank runs, and it shows in the
operators: more calls, or calls on larger inputs. The same work done slower comes from the rank's host: a
core it shares with another process, a slower socket. Balancing the batches (DIST001's fix) helps the first
and not the second. On two ranks of examples/ddp_unequal_batches.py with ``--balanced``, which gives both
ranks the same number of tokens, DIST001 named the first rank a straggler in 9 of 23 runs (December 2026,
bench/calibrate.py): it did 1-5 ms more work a step than the other on the same operators and shapes, each a
little slower (the matrix products 0.5 ms, a copy 0.3 ms).

Same operators are not enough: a rank that sleeps, or runs Python of its own between them, does more work
that no operator shows. So the straggler's operators must also have taken longer in proportion to its
whole work (``ranks.op_stretch_ratio``: their stretch against the others' over its work's stretch; DIST001
asks for a tenth). A busier core slows operators and the Python between them alike: on the 23 runs of the
balanced twin above the ratio was 0.0998 to 2.75; of the nine where DIST001 fired, it was 0.0998 in one (a
1.7 ms straggler, which still fires), 0.16 to 0.66 in the others. On a rank that sleeps 40 ms or 5 ms a step
(the script of tests/collect/test_framework_scripts.py) it was 0.01 and 0.06.

Each rank's signature is the multiset of its outermost ATen and collective calls in the analysed steps, as
(name, input shapes), per step. It needs the shapes: recorded in the window, or given by the shape steps where they
agreed (:mod:`advisor.load.kineto_shapes`); a rank with outermost operators whose shapes are unknown gives
no signature, and the fact is left out rather than guessed.
"""

from __future__ import annotations

from statistics import median
from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze import intervals
from advisor.analyze.findings import FactSpec
from advisor.analyze.framework.per_step import NS_PER_MS
from advisor.analyze.framework.view import TraceView
from advisor.analyze.ranks import host as _host  # noqa: F401  (registers the "figures" part this reads)
from advisor.analyze.ranks.digest import rank_part
from advisor.analyze.ranks.rankset import RankSet
from advisor.analyze.registry import analyzer

__all__ = ["rank_work", "work_signature"]

PROVIDES = (
    FactSpec("ranks.same_ops", "bool", "every rank ran the same operators on inputs of the same shapes per step "
                                       "(absent where a rank's shapes are unknown)"),
    FactSpec("ranks.ops_compared", "count", "distinct (operator, input shapes) per step compared across the ranks"),
    FactSpec("ranks.op_stretch_ratio", "ratio",
             "how far the straggler's operators were stretched against the others', as a part of how far its whole "
             "work was: 1 when they took longer in proportion, 0 when they took as long as the others' and its "
             "extra lay between them"),
)

#: the operators whose calls are compared: ATen's and the collectives'
_OPERATORS = ("aten::", "c10d::")


def work_signature(view: TraceView) -> dict[str, float] | None:
    """``"name|dims"`` -> calls per step of the outermost ATen and collective calls in the analysed steps; None
    without the shapes of every one of them (or without steps)."""
    if "input_dims" not in view.events or not view.step_count:
        return None
    rows = _outermost_calls(view)
    names = pd.Series(view.host_name_texts[rows], dtype=object)
    dims = pd.Series(view.host_column("input_dims")[rows], dtype=object)
    if not len(dims) or bool(dims.isna().any()) or bool((dims == "").any()):
        return None
    counts = (names + "|" + dims.astype(str)).value_counts()
    steps = view.step_count
    return {str(key): int(count) / steps for key, count in counts.items()}


@rank_part("work")
def _work(view: TraceView) -> dict[str, Any]:
    """The rank's signature and its outermost ATen calls' time per step (ms)."""
    if not view.has("cpu_op"):
        return {}
    return {"signature": work_signature(view), "op_ms": _op_ms(view)}


def _outermost_calls(view: TraceView) -> np.ndarray:
    """Mask of the outermost ATen and collective calls in the analysed steps: autograd's node ranges and the
    framework's own records carry no inputs; the calls they make do."""
    host = view.host
    calls = (host["cat"] == "cpu_op").to_numpy() & view.host_names(lambda n: n.startswith(_OPERATORS), bool)
    outer = intervals.enclosing(host["parent"].to_numpy(), host["depth"].to_numpy(), calls) < 0
    return calls & outer & (host["step"] >= 0).to_numpy()


def _op_ms(view: TraceView) -> float:
    """The outermost ATen calls' wall time per step, collectives left out (their time is mostly waiting)."""
    rows = _outermost_calls(view) & view.host_names(lambda n: n.startswith("aten::"), bool)
    return float(view.host["dur"].to_numpy()[rows].sum()) / NS_PER_MS / max(view.step_count, 1)


@analyzer("rank_work", needs=("ranks", "cpu_op"), provides=PROVIDES, scope="ranks")
def rank_work(rank_set: RankSet) -> dict[str, Any]:
    """Whether every rank ran the same operators on the same shapes per step, and whether the straggler's
    operators took longer in proportion to its work; {} where any rank's shapes are unknown."""
    works = rank_set.part("work")
    signatures = [w.get("signature") for w in works]
    if any(not s for s in signatures):
        return {}
    first = signatures[0]
    out: dict[str, Any] = {"ranks.same_ops": all(s == first for s in signatures[1:]), "ranks.ops_compared": len(first)}
    busy = [f["busy_ms"] for f in rank_set.part("figures")]
    straggler = int(np.argmax(busy))
    others = [i for i in range(len(busy)) if i != straggler]
    busy_others = median(busy[i] for i in others)
    ops_others = median(works[i]["op_ms"] for i in others)
    if busy_others > 0 and ops_others > 0 and busy[straggler] > busy_others:
        stretch_ops = works[straggler]["op_ms"] / ops_others - 1
        stretch_busy = busy[straggler] / busy_others - 1
        out["ranks.op_stretch_ratio"] = stretch_ops / stretch_busy
    return out
