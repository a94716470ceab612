"""Planted bottleneck: DDP all-reduces the gradients after every micro-batch of gradient accumulation.

Two ranks (gloo, on the CPU) accumulate gradients over four micro-batches per optimizer step. Without
``no_sync()`` each micro-batch's backward pass all-reduces every gradient, although only the last one
before ``optimizer.step()`` is used.

    advisor diagnose --nproc-per-node 2 examples/ddp_grad_accumulation.py              # the slow version
    advisor diagnose --nproc-per-node 2 examples/ddp_grad_accumulation.py -- --no-sync # the fix
    torchrun --nproc-per-node 2 examples/ddp_grad_accumulation.py [--no-sync]          # without the advisor
"""

import argparse
import contextlib

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-sync", action="store_true",
                        help="skip the all-reduce on all but the last micro-batch (DDP.no_sync)")
    parser.add_argument("--accumulate", type=int, default=4, help="micro-batches per optimizer step")
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()

    torch.set_num_threads(1)  # two ranks share the machine's cores
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    width = 1024
    layers = [m for _ in range(4) for m in (nn.Linear(width, width), nn.ReLU())]
    model = nn.parallel.DistributedDataParallel(nn.Sequential(*layers))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        for micro in range(args.accumulate):
            last = micro == args.accumulate - 1
            skip = model.no_sync() if args.no_sync and not last else contextlib.nullcontext()
            with skip:
                x = torch.randn(16, width)
                loss = model(x).pow(2).mean() / args.accumulate
                loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
