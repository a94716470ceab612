"""Planted bottleneck: the ranks get batches of unequal cost, so every step waits for the most expensive one.

Two ranks (gloo, on the CPU) train a token-wise model on sequences of varying length, padded per batch.
The sampler hands rank 1 the long sequences and rank 0 the short ones, so rank 1 computes three times as
much per step and rank 0 waits for it in the gradient all-reduce.

    advisor diagnose --nproc-per-node 2 examples/ddp_unequal_batches.py                  # the slow version
    advisor diagnose --nproc-per-node 2 examples/ddp_unequal_batches.py -- --balanced    # the fix
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn

SHORT, LONG = 32, 96  # tokens per sequence on the two ranks; balanced, both get the mean


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--balanced", action="store_true",
                        help="give every rank batches with the same number of tokens (bucket by length)")
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    # One core per rank, as a CPU job binds its ranks (numactl, taskset): a rank that waits leaves its core
    # idle instead of lending it to the other rank, as it would with a device of its own.
    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    torch.manual_seed(0)
    width = 256
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                                              nn.Linear(4 * width, width)))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    length = (SHORT + LONG) // 2 if args.balanced else (SHORT if rank == 0 else LONG)
    for _ in range(args.steps):
        x = torch.randn(16, length, width)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
