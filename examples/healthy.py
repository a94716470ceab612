"""A healthy, compute-bound control: large matrix multiplies, data already in memory.

The advisor should find nothing of high severity here.

    python examples/healthy.py
"""

import argparse

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 512))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    data = torch.randn(8, 128, 512)
    for step in range(args.steps):
        x = data[step % len(data)]
        loss = (model(x) - x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
