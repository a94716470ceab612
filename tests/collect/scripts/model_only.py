"""Calls a model for a while, with no optimizer and no DataLoader: only a time window can profile it.

    python model_only.py --seconds 30
"""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=30)
args = parser.parse_args()

model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
end = time.monotonic() + args.seconds
with torch.no_grad():
    while time.monotonic() < end:
        model(torch.randn(16, 64)).sum()
