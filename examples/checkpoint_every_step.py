"""Planted bottleneck: a checkpoint is written synchronously at every step.

The loop saves the model and optimizer state with torch.save after each
optimizer step, "to be safe". Every save serialises all the tensors and writes
them to disk while training waits.

    python examples/checkpoint_every_step.py                     # the slow version
    python examples/checkpoint_every_step.py --save-every 500    # the fix: checkpoint far less often
"""

import argparse
import os
import tempfile

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--save-every", type=int, default=1, help="save a checkpoint every N steps")
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()

    torch.set_num_threads(1)   # keep the step's own time steady on a small, shared machine
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(16, 1024)
    y = torch.randint(0, 10, (16,))
    path = os.path.join(tempfile.mkdtemp(prefix="advisor-example-"), "checkpoint.pt")
    for step in range(args.steps):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % args.save_every == 0:
            torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
