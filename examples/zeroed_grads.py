"""Planted bottleneck: every gradient is zeroed in place each step, and backward adds into the zeros.

A wide model trained on small batches: most of the step is memory traffic over
the parameters. `zero_grad(set_to_none=False)` writes zeros into all 25 MB of
gradients every step, and the backward pass then reads them back to add the
new gradients in, where with `set_to_none=True` it would simply keep the
gradients it computed.

    python examples/zeroed_grads.py                  # the slow version
    python examples/zeroed_grads.py --set-to-none    # the fix: release the gradients instead

On a CPU the fix pays only when freed memory stays in the process: with
glibc's defaults the released gradients go back to the system and every
backward faults them in again, which costs more than the zeroing (and the
advisor stays quiet). Run both with the memory kept:

    MALLOC_TRIM_THRESHOLD_=1000000000 MALLOC_MMAP_THRESHOLD_=100000000 python examples/zeroed_grads.py
"""

import argparse

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--set-to-none", action="store_true", help="zero_grad(set_to_none=True), the default")
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(*[layer for _ in range(6) for layer in (nn.Linear(1024, 1024), nn.ReLU())])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(16, 1024)
    for step in range(args.steps):
        optimizer.zero_grad(set_to_none=args.set_to_none)
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
