"""Per-operator host costs of this process, measured once just before the recording starts.

Some gains depend on what one operator call costs on *this* machine, in *this*
process (its torch build, its thread settings, the CPU's speed and load): the
host time autograd adds to each op it records, for example, is what
``torch.no_grad()`` gives back in an inference loop. A trace shows how many
such calls a step makes, not what each costs without the profiler, so the
collector times a few thousand tiny ops here and writes the figures into
``run.json`` (``host_costs``). It takes about 10 ms, outside the recorded
steps, and never raises into the script.
"""

from __future__ import annotations

import time
from typing import Any

import torch

__all__ = ["measure_host_costs"]

_CALLS = 400
_ROUNDS = 7


def _per_call_us(fn: Any, grad: bool) -> float:
    """The fastest round's time per call of ``fn()``, with grad mode on or off, in microseconds.

    The fastest, not the median: other processes and threads only ever add time to a round.
    """
    rounds = []
    with torch.set_grad_enabled(grad):
        for _ in range(_ROUNDS):
            t0 = time.perf_counter()
            for _ in range(_CALLS):
                fn()
            rounds.append((time.perf_counter() - t0) / _CALLS * 1e6)
    return min(rounds)


def measure_host_costs() -> dict[str, float]:
    """``dispatch_us``: one small op without autograd; ``autograd_us``: what recording it for autograd adds."""
    try:
        # The step boundary may come inside the script's own inference_mode(): leave it for the measurement.
        with torch.inference_mode(False):
            leaf = torch.ones(8, 8, requires_grad=True)
            other = torch.ones(8, 8)
            fn = lambda: torch.mul(leaf, other)  # noqa: E731 - saves an input, as most recorded ops do
            _per_call_us(fn, True)  # warm the dispatcher's caches first
            plain = _per_call_us(fn, False)
            recorded = _per_call_us(fn, True)
    except (RuntimeError, TypeError):  # a torch without these APIs, or a script's mode that refuses them
        return {}
    return {"dispatch_us": round(plain, 3), "autograd_us": round(max(recorded - plain, 0.0), 3)}
