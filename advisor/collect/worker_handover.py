"""What taking a ready batch from a DataLoader worker costs the training process, on this machine.

DL001 tells a loop that loads its batches in the training process (``num_workers=0``) to load them in worker
processes. A worker hands each batch over through shared memory: it moves every tensor of the batch into a shared
segment and sends its file descriptor over a socket, and the training process receives it, maps it and unpickles
the batch. That costs the training process a fixed time per batch that the in-process fetch does not pay: on the
2-core VM of December 2026, 1.7-2.0 ms for a batch of two tensors, whether of 64 or 512 rows, where fetching 64
rows of an in-memory ``TensorDataset`` in process took 0.8 ms, so four workers made such a loop 30-40% slower.
A trace of the in-process loop cannot show that cost, so the collector measures it here, once, after the steps
timed without the profiler and only when the loop fetched in process: one worker hands over batches of as many
tensors, and as many bytes, as the loop's first batch, each taken after a pause long enough for it to be ready.
The median is written into run.json (``dataloader_handover``). It takes a few tenths of a second, runs nothing in
the user's code, and never raises into the script.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

__all__ = ["measure_worker_handover"]

#: batches handed over before the timed ones (the worker starts, the first segments are made)
_WARM = 6
_TIMED = 20
#: the pause before each timed fetch: long enough for the worker to have the next batch ready
_PAUSE_S = 0.004
#: the most bytes one probe batch holds: the hand-over's cost is per tensor, not per byte (the training process
#: maps the segment and touches nothing), and a container's /dev/shm is often 64 MB
_MAX_BATCH_BYTES = 16 << 20


class _ReadyBatches(Dataset):
    """Batches of ``count`` byte tensors of ``size`` bytes each (at module level: a spawn start method pickles it)."""

    def __init__(self, count: int, size: int) -> None:
        self.count, self.size = count, size

    def __len__(self) -> int:
        return _WARM + _TIMED + 8

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        return tuple(torch.zeros(self.size, dtype=torch.uint8) for _ in range(self.count))


def measure_worker_handover(tensors: int, nbytes: int) -> dict[str, Any] | None:
    """The median time, in ms, the training process takes to receive a ready batch of ``tensors`` tensors holding
    ``nbytes`` bytes from one worker process; None where no worker could be started (a sandbox without shared
    memory, a start method that cannot import this module)."""
    if tensors < 1:
        return None
    size = max(1, min(nbytes, _MAX_BATCH_BYTES) // tensors)
    # Forked where the platform can: a spawned worker starts an interpreter and imports torch (seconds), and the
    # hand-over, not the start, is what is timed. The probe's worker touches no GPU, so a fork after CUDA is fine.
    context = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    loader = DataLoader(_ReadyBatches(tensors, size), batch_size=None, num_workers=1, prefetch_factor=2,
                        multiprocessing_context=context)
    times: list[float] = []
    try:
        batches = iter(loader)
        for i in range(_WARM + _TIMED):
            time.sleep(_PAUSE_S)
            start = time.perf_counter()
            next(batches)
            if i >= _WARM:
                times.append((time.perf_counter() - start) * 1e3)
        del batches  # the worker stops here, not in the script's next step
    except Exception:  # noqa: BLE001 - a probe that cannot run leaves the figure unknown, never the script broken
        return None
    return {"ms": round(statistics.median(times), 4), "tensors": tensors, "bytes": size * tensors,
            "batches": len(times)}
