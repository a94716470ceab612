"""Planted bottleneck: an inference loop that leaves autograd on.

The model is switched to eval mode, but the loop never enters torch.no_grad()
or torch.inference_mode(), so every op records a graph node (and keeps its
inputs alive) for a backward pass that never comes. The model is a stack of
small blocks, as in a compact transformer served at batch size 8, so the
host's work per op matters.

    python examples/inference_autograd.py                    # the slow version
    python examples/inference_autograd.py --inference-mode   # the fix: no autograd recording
"""

import argparse
import contextlib

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inference-mode", action="store_true")
    parser.add_argument("--requests", type=int, default=20000)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(*[Block(64) for _ in range(24)], nn.Linear(64, 10))
    model.eval()
    batch = torch.randn(8, 64)
    served = 0
    with torch.inference_mode() if args.inference_mode else contextlib.nullcontext():
        for request in range(args.requests):
            scores = model(batch)
            served += int(scores.argmax(dim=-1).sum())
    print(f"served {args.requests} requests ({served})")


if __name__ == "__main__":
    main()
