"""What one page fault costs this process: the price of memory the steps hand back to the system and fault in again.

glibc's malloc serves a large block (above its mmap threshold, 128 KiB to 32 MiB as it adapts) with a fresh
``mmap`` and gives it back with ``munmap`` when it is freed: a loop whose activations or logits are such blocks
faults every page of them in again in every step (the kernel zeroes each one), 205 MB a step in
``word_language_model``. The collector counts the steps' faults (:mod:`advisor.collect.steps`); this prices one.

It maps anonymous memory itself (``mmap``, not malloc: a probe through malloc would move glibc's adaptive
threshold and change how the script's own blocks are served), writes every page twice with a torch ``fill_`` (the
script's own threads, as its operators would), and takes the first write less the second over the pages faulted.
The first round is left out: on a virtual machine a page the guest never used costs the host a fault of its own,
which pages that a loop hands back and takes again do not. The median of the other rounds is the figure.
"""

from __future__ import annotations

import mmap
import resource
import statistics
import time
from typing import Any

import torch

__all__ = ["measure_fault_cost"]

_BYTES = 4 << 20
_ROUNDS = 5


def measure_fault_cost() -> dict[str, Any]:
    """``page_fault_us``: one minor fault's cost in microseconds (the zeroed page, the trap, the page-table
    update), with ``page_bytes``; {} where it cannot be measured."""
    costs: list[float] = []
    try:
        for _ in range(_ROUNDS):
            costs.append(_one_round())
    except (OSError, ValueError, RuntimeError, TypeError):  # no anonymous mmap, or a torch without frombuffer
        return {}
    kept = [c for c in costs[1:] if c > 0]
    if not kept:
        return {}
    return {"page_fault_us": round(statistics.median(kept), 4), "page_bytes": resource.getpagesize()}


def _one_round() -> float:
    region = mmap.mmap(-1, _BYTES)
    try:
        view = torch.frombuffer(region, dtype=torch.uint8)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        view.fill_(1)
        first = time.perf_counter()
        view.fill_(2)
        second = time.perf_counter()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        del view
    finally:
        region.close()
    if faults <= 0:
        return 0.0
    return ((first - start) - (second - first)) / faults * 1e6
