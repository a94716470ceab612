"""Recorded training steps that also ran an evaluation pass, and which steps to analyse without them.

A training loop that evaluates every N steps (Lightning's ``val_check_interval``, HF Trainer's
``eval_steps``, an ``if step % N == 0: evaluate()``) runs, inside one recorded step, a loop of its own:
batches from another DataLoader and forward passes with no backward. Averaged with the other steps, its
batches count as the training loop's data wait and its forwards as forward time. One run of a Lightning
loop that validated every 10 batches on five: a step of 14.5 ms among steps of 3.2-4.4 ms, six fetches in
it against one, and a "dataloader starvation" of 1.4 ms a step, half of it the validation's batches.

A *forward-only call* is an outermost model call (a collector forward range, not one inside backward)
after which no backward starts before the next model call. A frozen teacher in distillation, or a GAN's
discriminator on detached samples, makes one in every step; so a step ran an evaluation pass only where it
made more of them than the window's median step did *and* fetched more batches than the other steps: a
loop over a DataLoader of its own, as evaluation loops are. A step that only calls the model more often (a
reinforcement-learning rollout of varying length) is a training step doing more work, and stays. All this
only in a training loop (the median step runs a backward).

The analysed steps are then the others. Where the trace has GPU work or other ranks they are the longest
unbroken run of the others (the earliest on a tie), so that the window stays one span of time, as the GPU
figures and the cross-rank ones need: a regular step on the far side of an evaluation step is left out with
it. A trace of one process on the CPU keeps every other step, as each host figure is taken step by step.
With fewer than :data:`MIN_KEPT` steps left nothing is left out, and the evaluation steps are only said.

Both stages use it: the framework stage on the collector's ranges in the Kineto trace, the system stage on
the same ranges as NVTX in the Nsight Systems export (always one unbroken run there: its figures are taken
over the window's span). Traces recorded without the collector's labels have no forward ranges to count:
nothing is found there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.analyze import intervals

__all__ = ["MIN_KEPT", "EvaluationSteps", "find_evaluation_steps"]

#: the fewest steps to analyse in place of the whole window (the report's verdict needs as many)
MIN_KEPT = 3


@dataclass(frozen=True)
class EvaluationSteps:
    """Per step of the window, in time order."""

    #: the step ran more forward-only model calls than the median step
    evaluation: np.ndarray
    #: the step is analysed (all True where nothing is left out)
    kept: np.ndarray
    #: forward-only model calls beyond the median step's
    extra_calls: np.ndarray
    #: DataLoader fetches beyond the median of the steps without an evaluation pass
    extra_fetches: np.ndarray

    @property
    def found(self) -> bool:
        return bool(self.evaluation.any())

    @property
    def left_out(self) -> int:
        return int((~self.kept).sum())


def _per_step(ts: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many of the times ``ts`` fall in each step [start, end)."""
    idx = intervals.containing(starts, ends, ts)
    return np.bincount(idx[idx >= 0], minlength=len(starts))


def _longest_run(mask: np.ndarray) -> tuple[int, int]:
    """[first, last) of the longest run of True in ``mask`` (the earliest on a tie); (0, 0) when none."""
    best, start = (0, 0), None
    for i, on in enumerate([*mask.tolist(), False]):
        if on and start is None:
            start = i
        elif not on and start is not None:
            if i - start > best[1] - best[0]:
                best = (start, i)
            start = None
    return best


def find_evaluation_steps(starts: np.ndarray, ends: np.ndarray, forwards: tuple[np.ndarray, np.ndarray],
                          backwards: tuple[np.ndarray, np.ndarray], fetches: np.ndarray,
                          gaps_allowed: bool = False) -> EvaluationSteps:
    """The steps that ran an evaluation pass, and the steps to analyse.

    ``starts``/``ends``: the steps, in time order; ``forwards`` and ``backwards``: the (starts, ends) of the
    forward and backward ranges of the loop's thread; ``fetches``: the start of each DataLoader fetch there;
    ``gaps_allowed``: whether the analysed steps may have left-out steps between them.
    """
    n = len(starts)
    none = np.zeros(n, bool)
    nothing = EvaluationSteps(none, ~none, np.zeros(n, "int64"), np.zeros(n, "int64"))
    bwd_order = np.argsort(backwards[0], kind="stable")
    bwd_ts, bwd_end = backwards[0][bwd_order], backwards[1][bwd_order]
    if n <= MIN_KEPT or len(forwards[0]) == 0 or np.median(_per_step(bwd_ts, starts, ends)) < 1:
        return nothing  # too few steps to tell one from the others, no labels, or not a training loop
    order = np.argsort(forwards[0], kind="stable")
    fwd_ts, fwd_end = forwards[0][order], forwards[1][order]
    outer = intervals.containing(*intervals.union(bwd_ts, bwd_end), fwd_ts) < 0  # recomputed in backward: backward's
    fwd_ts, fwd_end = fwd_ts[outer], fwd_end[outer]
    following = np.append(fwd_ts[1:], np.iinfo("int64").max)
    backward_after = np.searchsorted(bwd_ts, following, side="left") - np.searchsorted(bwd_ts, fwd_end, side="left")
    only = _per_step(fwd_ts[backward_after == 0], starts, ends)
    more_calls = only > np.median(only)
    fetched = _per_step(fetches, starts, ends)
    typical_fetches = np.median(fetched[~more_calls]) if (~more_calls).any() else 0
    evaluation = more_calls & (fetched > typical_fetches)
    if not evaluation.any():
        return nothing
    extra_calls = np.where(evaluation, only - np.median(only), 0).astype("int64")
    extra_fetches = np.where(evaluation, np.maximum(fetched - typical_fetches, 0), 0).astype("int64")
    if gaps_allowed:
        kept = ~evaluation
    else:
        first, last = _longest_run(~evaluation)
        kept = np.zeros(n, bool)
        kept[first:last] = True
    if kept.sum() < MIN_KEPT:
        kept = np.ones(n, bool)
    return EvaluationSteps(evaluation, kept, extra_calls, extra_fetches)
