"""Takes required arguments, reports what it sees of its process as JSON, then trains.

    python args_and_env.py --lr 0.1 --report out.json [more...]
"""

import argparse
import json
import os
import sys

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--report", required=True)
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("rest", nargs="*")
args = parser.parse_args()

with open("input.txt") as f:  # relative to the working directory, as under `python script.py`
    text = f.read()
report = {
    "argv": sys.argv, "file": __file__, "name": __name__, "cwd": os.getcwd(), "path0": sys.path[0],
    "path": sys.path, "pythonpath": os.environ.get("PYTHONPATH"), "rest": args.rest, "input": text,
    "advisor_env": sorted(k for k in os.environ if k.startswith("ADVISOR")),
    "globals": {"package": repr(__package__), "spec": repr(__spec__), "loader": type(__loader__).__name__,
                "builtins": type(__builtins__).__name__, "main_is_me": sys.modules["__main__"].__dict__ is globals()},
}
with open(args.report, "w") as f:
    json.dump(report, f)

model = nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
for _ in range(args.steps):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
