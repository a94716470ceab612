"""Planted bottleneck: autograd anomaly detection left on from a debugging session.

`torch.autograd.set_detect_anomaly(True)` makes autograd save the Python stack
of every operation in the forward pass and check every gradient for NaN in
the backward pass. It helps to find where a NaN came from; in a normal
training run it only costs time.

    python examples/anomaly_detection.py                 # the slow version
    python examples/anomaly_detection.py --no-anomaly    # the fix: anomaly detection off
"""

import argparse

import torch
from torch import nn


class Block(nn.Module):
    """A small residual MLP block: a handful of ops, each a node in the autograd graph."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-anomaly", action="store_true", help="train with anomaly detection off")
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()

    torch.autograd.set_detect_anomaly(not args.no_anomaly)   # left on while chasing a NaN
    # One intra-op thread: on a small, busy machine the cost of waking a thread pool would blur
    # what this example measures, the cost of anomaly mode.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(128) for _ in range(8)], nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, foreach=True)
    x = torch.randn(32, 128)
    y = torch.randint(0, 10, (32,))
    for step in range(args.steps):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
