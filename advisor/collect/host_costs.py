"""Per-operator host costs of this process, measured once just before the recording starts.

Some gains depend on what one operator call costs on *this* machine, in *this*
process (its torch build, its thread settings, the CPU's speed and load): the
host time autograd adds to each op it records, for example, is what
``torch.no_grad()`` gives back in an inference loop. A trace shows how many
such calls a step makes, not what each costs without the profiler, so the
collector times a few thousand tiny ops of three kinds here and writes the figures into
``run.json`` (``host_costs``). It takes about 30 ms, outside the recorded
steps, and never raises into the script.
"""

from __future__ import annotations

import time
from typing import Any

import torch

__all__ = ["measure_host_costs"]

_CALLS = 200
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


def _probes() -> dict[str, Any]:
    """One small op of each kind whose autograd cost differs: what grad mode adds to each is priced apart.

    A matrix product records its node and a view of the transposed weight and saves both inputs; a
    normalisation saves its statistics; a pointwise op saves an input. Measured alone, a pointwise op
    priced a linear layer's recording at a tenth of what it is.
    """
    x = torch.randn(8, 64)
    weight, bias = torch.randn(128, 64, requires_grad=True), torch.zeros(128, requires_grad=True)
    scale, shift = torch.ones(64, requires_grad=True), torch.zeros(64, requires_grad=True)
    leaf, other = torch.ones(8, 8, requires_grad=True), torch.ones(8, 8)
    return {
        "pointwise": lambda: torch.mul(leaf, other),
        "matmul": lambda: torch.nn.functional.linear(x, weight, bias),
        "norm": lambda: torch.nn.functional.layer_norm(x, (64,), scale, shift),
    }


def measure_host_costs() -> dict[str, Any]:
    """``dispatch_us``: one small op without autograd; ``autograd_us``: what recording it for autograd adds;
    ``autograd_us_by_kind``: the same for a pointwise op, a matrix product and a normalisation."""
    try:
        # The step boundary may come inside the script's own inference_mode(): leave it for the measurement.
        with torch.inference_mode(False):
            by_kind: dict[str, float] = {}
            plain_pointwise = 0.0
            for kind, fn in _probes().items():
                _per_call_us(fn, True)  # warm the dispatcher's caches first
                plain = _per_call_us(fn, False)
                recorded = _per_call_us(fn, True)
                by_kind[kind] = round(max(recorded - plain, 0.0), 3)
                if kind == "pointwise":
                    plain_pointwise = plain
    except (RuntimeError, TypeError):  # a torch without these APIs, or a script's mode that refuses them
        return {}
    return {"dispatch_us": round(plain_pointwise, 3), "autograd_us": by_kind["pointwise"],
            "autograd_us_by_kind": by_kind}
