"""Trains 10 steps, then hangs (writing --ready first, so a test knows it hangs now).

    python hang.py --ready FILE
"""

import argparse
import time
from pathlib import Path

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--ready", required=True)
args = parser.parse_args()

model = nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    if step == 10:
        Path(args.ready).write_text("hanging")
        while True:  # a deadlock, a stuck read, a wait that never ends
            time.sleep(0.1)
    loss = model(torch.randn(8, 16)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
