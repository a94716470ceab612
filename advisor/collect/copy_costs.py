"""What a layout copy costs in this process without the profiler: ``.contiguous()`` of strided views, timed.

CPU002's gain is the time of the copies that a kept layout removes. The
trace measures that time, but badly: under the profiler a copy's output
often lands on fresh pages (the profiler's records take the place of the
memory the script freed), and faulting them in is part of the recorded copy
and not of the script's. On examples/strided_copies.py the copies' recorded
time was 4-5 times their cost without the profiler, where the whole step was
stretched twice. So the collector times copies here, at the same moment as
the other host-cost probes (:mod:`advisor.collect.host_costs`), and the
analysis prices each copy of the trace by its bytes and its pattern
(:mod:`advisor.analyze.framework.layout_copies`).

Two patterns, because they differ fivefold per byte on the same machine:

- ``gather``: the innermost dimension is strided (``x.transpose(-1, -2)``),
  so every element is read on its own;
- ``rows``: the innermost dimension stays contiguous and outer dimensions
  are permuted (``x.transpose(1, 2)`` of a (batch, tokens, heads, head_dim)
  tensor), so the copy moves whole rows.

Each is timed at a few sizes (16 KiB to 4 MiB of fp32), the median of rounds,
smallest first, the larger sizes left out once the probe has taken its budget.
The largest size stays at 4 MiB: glibc raises its mmap threshold to the
largest block freed, and a probe much larger than the script's own tensors
would change how the script's later allocations are served.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

__all__ = ["PATTERNS", "SIZES", "measure_copy_costs"]

#: bytes of fp32 copied per call, smallest first
SIZES = (16 << 10, 256 << 10, 1 << 20, 4 << 20)
PATTERNS = ("gather", "rows")
_ROUNDS = 7
#: bytes copied per round at least, so that a round of small copies is not a few microseconds long
_ROUND_BYTES = 4 << 20
_INNER = 64  # elements of the innermost dimension (a row, or a side of a transposed tile)
#: seconds the probe may take: it takes 40-60 ms on a quiet 2-core machine, but where the script's threads
#: oversubscribe the cores every parallel copy waits for a time slice (examples/thread_oversubscription.py)
_BUDGET_S = 1.0


def _view(pattern: str, nbytes: int) -> torch.Tensor:
    if pattern == "gather":  # (n, 64, 64) tiles, each transposed
        return torch.randn(max(nbytes // (4 * _INNER * _INNER), 1), _INNER, _INNER).transpose(-1, -2)
    # (8, n, 64) with its two outer dimensions swapped: rows of 64 move whole, 8 apart
    return torch.randn(8, max(nbytes // (4 * _INNER * 8), 2), _INNER).transpose(0, 1)


def _per_call_us(x: torch.Tensor, calls: int) -> float:
    rounds = []
    for _ in range(_ROUNDS):
        t0 = time.perf_counter()
        for _ in range(calls):
            y = x.contiguous()
            del y  # freed at once, as a step frees its activations: the next copy reuses the block
        rounds.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(rounds)


def measure_copy_costs(budget_s: float = _BUDGET_S) -> dict[str, Any]:
    """``{"gather": [[bytes, us], ...], "rows": [[bytes, us], ...]}``: microseconds per ``.contiguous()`` call
    of each pattern at each of :data:`SIZES`, smallest first; ``{}`` when torch refuses. Sizes past
    ``budget_s`` are left out (the pricing takes the largest measured size's cost per byte beyond it)."""
    out: dict[str, list[list[float]]] = {pattern: [] for pattern in PATTERNS}
    deadline = time.perf_counter() + budget_s
    try:
        with torch.inference_mode(False), torch.random.fork_rng(devices=[]):
            for size in SIZES:
                if out["gather"] and time.perf_counter() > deadline:
                    break
                for pattern in PATTERNS:
                    x = _view(pattern, size)
                    nbytes = x.numel() * x.element_size()
                    calls = max(_ROUND_BYTES // nbytes, 1)
                    x.contiguous()  # the first call pays for the block; the rounds reuse it
                    out[pattern].append([nbytes, round(_per_call_us(x, calls), 3)])
    except (RuntimeError, TypeError):  # a torch without these APIs, or a script's mode that refuses them
        return {}
    return out
