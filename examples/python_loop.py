"""Planted bottleneck: a per-sample Python loop makes thousands of tiny ops per step.

The loss is computed one sample at a time in Python. Each iteration runs a
handful of tiny operators, so the step is dominated by per-op overhead
rather than by arithmetic.

    python examples/python_loop.py               # the slow version
    python examples/python_loop.py --batched     # the fix: one batched loss
"""

import argparse

import torch
from torch import nn


def per_sample_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    total = logits.new_zeros(())
    for i in range(logits.shape[0]):
        row = logits[i] - logits[i].max()
        total = total + (row.exp().sum().log() - row[targets[i]])
    return total / logits.shape[0]


def batched_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits, targets)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batched", action="store_true")
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = batched_loss if args.batched else per_sample_loss
    for step in range(args.steps):
        x = torch.randn(256, 128)
        y = torch.randint(0, 10, (256,))
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
