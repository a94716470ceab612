"""Per-operator host costs of this process, measured once as the warm-up begins, before the collector's labels.

Some gains depend on what one operator call costs on *this* machine, in *this*
process (its torch build, its thread settings, the CPU's speed and load): the
host time autograd adds to each op it records, for example, is what
``torch.inference_mode()`` gives back in an inference loop. A trace shows how
many such calls a step makes, not what each costs without the profiler, so the
collector times small forwards here, with grad mode on and under inference
mode, and writes the figures into ``run.json`` (``host_costs``). It takes a
few tenths of a second, before the warm-up steps (ranks that finish it at
different times meet again there, not in a recorded step) and before the
collector's labels and source marker are on (under the marker, grad mode
measured 3.4-3.9 us per op against 1.7-2.4 without it: the probes price the
script as it runs without the advisor), and never raises into the script.

Two kinds of probe, because neither alone prices a real model's recording:

- a *chain* of one op kind (matrix product, normalisation, pointwise, add),
  each op fed the previous one's output, as in a network: an op whose input
  requires grad links its node to that input's and saves it, which costs
  about twice what the same op on a leaf does. The chains give the ratio
  between kinds.
- a *block* of ``nn.Module`` layers (LayerNorm, Linear, GELU, Linear, residual
  add), several of them deep with their own weights, whose graph is freed
  after each forward as an inference loop frees it. It gives the level: the
  chains' per-kind costs are scaled so that they add up to what the block
  measured (module calls, a graph of real depth and freeing it cost about a
  third more than the chains show).

Rounds with grad on and off alternate, and what grad mode adds is the median
over rounds of each round's difference: a round with grad on and the round
without it that follows run seconds apart in the same machine state, so a burst
of other work lands on both or is outvoted. The difference of the fastest
round of each, used before, once gave 0 and kept INF001 quiet on a slow run.
Twelve probes of the same block on a busy 2-core machine, µs per op: with 7
rounds, 1.7-6.7 that way and 3.2-6.4 as the median of the differences; with 15
rounds, 0.4-4.4 and 2.8-5.3.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from advisor.collect.copy_costs import measure_copy_costs
from advisor.collect.fault_cost import measure_fault_cost

__all__ = ["measure_host_costs"]

_ROUNDS = 9
_CHAIN = 16  # ops per chain
_DEPTH = 6  # blocks per probe forward
_DIM = 64
#: block measurements at most, until one shows grad mode costing something
_BLOCK_TRIES = 3


def _alternating_us(fn: Callable[[], Any], calls: int, per_call_ops: int) -> tuple[float, float]:
    """Microseconds per op of ``fn()``: what grad mode adds (the median, over rounds, of a round with grad on
    less the round under inference mode that follows it) and the fastest round under inference mode."""
    added, off = [], float("inf")
    for _ in range(_ROUNDS):
        took = {}
        for grad in (True, False):
            with torch.inference_mode(not grad):
                t0 = time.perf_counter()
                for _ in range(calls):
                    out = fn()
                    del out  # freeing the graph is part of what recording costs
                took[grad] = (time.perf_counter() - t0) / calls / per_call_ops * 1e6
        added.append(took[True] - took[False])
        off = min(off, took[False])
    return statistics.median(added), off


class _Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


#: the top-level ops of one block, by the kind that prices them (see advisor/analyze/framework/workload.py)
_BLOCK_KINDS = {"norm": 1, "matmul": 2, "pointwise": 1, "add": 1}


def _chains() -> dict[str, Callable[[], torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(8, _DIM, generator=generator)
    scale = torch.ones(_DIM, requires_grad=True)
    weights = [(torch.randn(_DIM, _DIM, generator=generator) / _DIM).requires_grad_() for _ in range(_CHAIN)]
    bias = torch.zeros(_DIM, requires_grad=True)
    shift = torch.zeros(_DIM, requires_grad=True)

    def chain(step: Callable[[torch.Tensor, int], torch.Tensor]) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            h = x * scale  # the chain's input is an op's output, as inside a network
            for i in range(_CHAIN):
                h = step(h, i)
            return h
        return run

    return {
        "seed": chain(lambda h, i: h),
        "matmul": chain(lambda h, i: nn.functional.linear(h, weights[i], bias)),
        "norm": chain(lambda h, i: nn.functional.layer_norm(h, (_DIM,), scale, shift)),
        "pointwise": chain(lambda h, i: nn.functional.gelu(h)),
        "add": chain(lambda h, i: h + h),
    }


def measure_host_costs() -> dict[str, Any]:
    """``dispatch_us``: one small pointwise op without autograd; ``autograd_us``: what recording it adds;
    ``autograd_us_by_kind``: the same for a matrix product, a normalisation, a pointwise op and an add, at the
    level a block of layers measured (``autograd_block_us``: per op of the block; ``autograd_block_scale``: the
    block over the chains); ``copy_us``: what a layout copy costs by size and pattern
    (:mod:`advisor.collect.copy_costs`); ``page_fault_us``: one page fault (:mod:`advisor.collect.fault_cost`)."""
    t_start = time.perf_counter()
    try:
        # The step boundary may come inside the script's own inference_mode(): leave it for the measurement.
        with torch.inference_mode(False):
            chains = _chains()
            for fn in chains.values():  # warm the dispatcher's caches first
                fn()
            seed_added, _ = _alternating_us(chains.pop("seed"), 12, _CHAIN)
            raw: dict[str, float] = {}
            plain: dict[str, float] = {}
            for kind, fn in chains.items():
                added, off = _alternating_us(fn, 12, _CHAIN)
                raw[kind] = max(added - seed_added, 0.0)  # less the chain's seed op, spread per op
                plain[kind] = off
            with torch.random.fork_rng(devices=[]):  # the layers' initialisation leaves the script's RNG as it was
                torch.manual_seed(0)
                model = nn.Sequential(*[_Block(_DIM) for _ in range(_DEPTH)])
                x = torch.randn(8, _DIM)
            model(x)
            ops = _DEPTH * sum(_BLOCK_KINDS.values())
            for _ in range(_BLOCK_TRIES):
                block, _ = _alternating_us(lambda: model(x), 6, ops)
                if block > 0:
                    break
    except (RuntimeError, TypeError):  # a torch without these APIs, or a script's mode that refuses them
        return {}
    predicted = sum(raw[k] * n for k, n in _BLOCK_KINDS.items()) / sum(_BLOCK_KINDS.values())
    # A block that never measured more with grad on than off is a failed measurement (one slow run of a
    # calibration on a busy machine got 0 and all its prices with it), not a free autograd: the chains then
    # price the ops unscaled.
    scale = block / predicted if predicted > 0 and block > 0 else 1.0
    block = max(block, 0.0)
    by_kind = {k: round(v * scale, 3) for k, v in raw.items()}
    copies = measure_copy_costs()
    return {"dispatch_us": round(plain["pointwise"], 3), "autograd_us": by_kind["pointwise"],
            "autograd_us_by_kind": by_kind, "autograd_block_us": round(block, 3),
            "autograd_block_scale": round(scale, 3), **({"copy_us": copies} if copies else {}),
            **measure_fault_cost(),
            "probe_ms": round((time.perf_counter() - t_start) * 1e3, 1)}
