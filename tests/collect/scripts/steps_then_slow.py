"""A plain training loop of --steps steps; from step --slow-from on, each step also sleeps --sleep seconds."""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--slow-from", type=int, default=10**9)
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()

model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(args.steps):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    if step >= args.slow_from:
        time.sleep(args.sleep)
    optimizer.step()
