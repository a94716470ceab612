"""How long each rank waits in collectives: its collective time beyond the least of any rank, step by step.

The rank that arrives last at a collective waits least, so the least collective time of any rank in a step
is the cost of the exchange itself, and the rest of each rank's is waiting for a slower one. Steps are
matched by their ``ProfilerStep#N`` number: the first profiled step often holds a long wait of the straggler
itself, for a rank whose profiler started later (seen on two gloo ranks here: 164 ms in one step), and a
comparison of whole windows would count it against the others' wait.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from advisor.analyze.framework.per_step import NS_PER_MS

__all__ = ["matched_waits"]


def matched_waits(by_step: Sequence[Mapping[int, int]], whole_ms: Sequence[float]) -> list[float]:
    """Each rank's mean wait per step (ms), from its collective ns per step number (``by_step``).

    Where the ranks share no step number (different windows, no ProfilerStep ranges: step -1), the ranks'
    mean collective time per step (``whole_ms``) is compared instead.
    """
    common = set.intersection(*(set(steps) - {-1} for steps in by_step)) if by_step else set()
    if not common:
        least = min(whole_ms)
        return [ms - least for ms in whole_ms]
    least_ns = {k: min(steps[k] for steps in by_step) for k in common}
    return [sum(steps[k] - least_ns[k] for k in common) / len(common) / NS_PER_MS for steps in by_step]
