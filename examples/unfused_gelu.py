"""Planted bottleneck: an activation written out as a chain of elementwise ops.

The MLP uses the tanh approximation of GELU written by hand, as in many older
transformer codebases: eight elementwise ops, each reading and writing the
whole hidden activation, and about as many again in the backward pass.

    python examples/unfused_gelu.py                # the slow version
    python examples/unfused_gelu.py --builtin      # the fix: the fused F.gelu(x, approximate="tanh")
"""

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Mlp(nn.Module):
    def __init__(self, dim: int, builtin: bool) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.builtin = builtin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        h = F.gelu(h, approximate="tanh") if self.builtin else gelu_tanh(h)
        return x + self.down(h)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--builtin", action="store_true", help='use F.gelu(x, approximate="tanh")')
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(*[Mlp(256, args.builtin) for _ in range(3)])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(512, 256)
    for step in range(args.steps):
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
