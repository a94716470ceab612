"""Planted bottleneck: two training processes on one machine, each with a thread for every core.

Data-parallel training on the CPU starts one process per rank. torchrun sets
OMP_NUM_THREADS=1 for each, but scripts often undo it "to use the whole
machine": here every rank asks for as many intra-op threads as the machine
has cores. Two ranks then run twice as many threads as there are cores. The
OpenMP threads of a parallel operator wait for each other by spinning, so
whenever the other rank holds the core one of them needs, the whole operator
waits for a scheduler time slice.

    torchrun --nproc-per-node 2 examples/thread_oversubscription.py                  # the slow version
    torchrun --nproc-per-node 2 examples/thread_oversubscription.py --share-cores    # the fix: cores / ranks each
    advisor diagnose examples/thread_oversubscription.py --nproc-per-node 2
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--share-cores", action="store_true",
                        help="give each rank its share of the cores instead of all of them")
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    cores = len(os.sched_getaffinity(0))
    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    torch.set_num_threads(max(1, cores // ranks_here) if args.share_cores else cores)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 512)
    y = torch.randint(0, 10, (64,))
    for step in range(args.steps):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0 and dist.get_rank() == 0:
            print(f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
