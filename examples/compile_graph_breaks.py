"""Planted bottleneck: a compiled model whose forward breaks the graph in every block.

Each block checks its activations with `.item()` for a debugging print. Under
torch.compile that is a graph break: Dynamo compiles the block in pieces and
runs Python between them, so every block pays extra guard checks and wrapper
calls and nothing is fused across the breaks.

    python examples/compile_graph_breaks.py                # the slow version
    python examples/compile_graph_breaks.py --fullgraph    # the fix: no .item() in forward, fullgraph=True
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int, check: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up, self.down = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        self.check = check

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.down(F.gelu(self.up(self.norm(x))))
        if self.check and h.abs().max().item() > 1e4:  # .item() breaks the graph
            print("large activations")
        return x + h


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fullgraph", action="store_true", help="no .item() in forward; compile with fullgraph=True")
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(*[Block(64, check=not args.fullgraph) for _ in range(12)])
    model = torch.compile(model, fullgraph=args.fullgraph)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64)
    for step in range(args.steps):
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
