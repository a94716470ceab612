"""Planted bottleneck: torch.compile recompiles the model for every new sequence length.

Batches come with varying sequence lengths, and the model is compiled with
dynamic=False, so every length it has not seen fails the shape guards and
compiles the model again (the recompile limit was raised to silence the
warning about it). Seconds of compilation land in the middle of training.

    python examples/compile_recompiles.py                # the slow version
    python examples/compile_recompiles.py --dynamic      # the fix: let torch.compile treat the length as dynamic
"""

import argparse

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dynamic", action="store_true", help="compile with the default dynamic=None")
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()

    torch._dynamo.config.recompile_limit = 64
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    model = torch.compile(model, dynamic=None if args.dynamic else False)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        x = torch.randn(16, 32 + step % 48, 64)  # (batch, sequence length, features)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
