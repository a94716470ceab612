"""Planted bottleneck: the optimizer step dominates the training step.

The model keeps many small parameter tensors (one per feature group, as in
wide recommender or adapter models). On the CPU, torch.optim.Adam defaults
to its for-loop implementation, which runs a dozen tiny ops for every
parameter tensor, every step.

    python examples/slow_optimizer.py              # the slow version
    python examples/slow_optimizer.py --fused      # the fix: the fused Adam kernel
"""

import argparse

import torch
from torch import nn


class ManyGroups(nn.Module):
    """A linear model whose weights are split into many small tensors."""

    def __init__(self, groups: int = 800, width: int = 16) -> None:
        super().__init__()
        self.groups = nn.ParameterList(nn.Parameter(torch.randn(width) * 0.01) for _ in range(groups))
        self.head = nn.Linear(groups, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (batch, groups, width)
        weights = torch.stack(list(self.groups))          # (groups, width)
        features = (x * weights).sum(-1)                   # (batch, groups)
        return self.head(features).squeeze(-1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fused", action="store_true", help="use the fused Adam kernel")
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = ManyGroups()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=args.fused or None)
    x = torch.randn(64, 800, 16)
    y = torch.randn(64)
    for step in range(args.steps):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
