"""time_sequence_prediction's LBFGS step, timed by hand: the truth the advisor's split is held against.

Run from a copy of ``../shared/programs/pytorch_examples/time_sequence_prediction`` (after its
``generate_sine_wave.py``); loads the data and builds the model as ``train.py`` does, and runs one
``optimizer.step(closure)`` of ``torch.optim.LBFGS`` (20 iterations, up to 25 closure evaluations) with
``time.perf_counter`` around each part of each closure evaluation, for ``--evaluations`` of them (the step is
cut short there: its evaluations repeat). It prints one JSON line: each part's share of the evaluations after the
first (which pays the first calls' costs), each with the update arithmetic before it, the unit the advisor records
for a step this long. The parts are the advisor's: forward (the model and the
loss), backward, and the rest (LBFGS's update between evaluations, and ``zero_grad``, ``loss.item()`` and the
print in the closure).
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from torch import nn, optim

sys.path.insert(0, os.getcwd())
from train import Sequence  # noqa: E402  (the program's own model, from its folder)

parser = argparse.ArgumentParser()
parser.add_argument("--evaluations", type=int, default=8)
args = parser.parse_args()


class Enough(Exception):
    """Enough evaluations timed: the rest of the step repeats them."""


np.random.seed(0)
torch.manual_seed(0)
data = torch.load("traindata.pt", weights_only=False)
input = torch.from_numpy(data[3:, :-1])
target = torch.from_numpy(data[3:, 1:])
seq = Sequence()
seq.double()
criterion = nn.MSELoss()
optimizer = optim.LBFGS(seq.parameters(), lr=0.8)

parts: list[dict[str, float]] = []
last_end = [0.0]


def closure():
    if len(parts) == args.evaluations:
        raise Enough
    start = time.perf_counter()
    optimizer.zero_grad()
    t0 = time.perf_counter()
    out = seq(input)
    loss = criterion(out, target)
    t1 = time.perf_counter()
    print("loss:", loss.item())
    t2 = time.perf_counter()
    loss.backward()
    t3 = time.perf_counter()
    parts.append({"update": start - last_end[0], "forward": t1 - t0, "backward": t3 - t2,
                  "rest": (t0 - start) + (t2 - t1)})
    last_end[0] = time.perf_counter()
    return loss


try:
    optimizer.step(closure)
except Enough:
    pass
timed = parts[1:]
total = sum(sum(p.values()) for p in timed)
shares = {k: sum(p[k] for p in timed) / total for k in ("forward", "backward", "update", "rest")}
print(json.dumps({**{k: round(v, 4) for k, v in shares.items()}, "evaluations": len(parts),
                  "evaluation_ms": round(1e3 * total / len(timed), 1)}))
