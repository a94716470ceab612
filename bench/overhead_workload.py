"""The workload of ``collector_overhead.py``: a training loop that notes when each step ends.

    python overhead_workload.py --steps 600 --size mlp --times times.json

A DataLoader feeds an optimizer, so every hook the collector keeps outside its
window (DataLoader ``__next__``, optimizer step hooks) is on the path.
"""

import argparse
import json
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SIZES = {"mlp": (256, 1024, 64), "tiny": (16, 32, 8)}

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=600)
parser.add_argument("--size", choices=sorted(SIZES), default="mlp")
parser.add_argument("--times", required=True)
args = parser.parse_args()

torch.manual_seed(0)
d_in, hidden, batch = SIZES[args.size]
model = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
data = TensorDataset(torch.randn(batch * 64, d_in), torch.randn(batch * 64, 1))
ends: list[int] = []
while len(ends) < args.steps:
    for x, y in DataLoader(data, batch_size=batch, shuffle=True):
        loss = (model(x) - y).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        ends.append(time.perf_counter_ns())
        if len(ends) == args.steps:
            break
with open(args.times, "w") as f:
    json.dump(ends, f)
