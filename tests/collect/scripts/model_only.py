"""Calls a model for a while, with no optimizer and no DataLoader.

Under ``torch.no_grad()`` it is an inference loop: each call of the model is a step. With ``--train-mode``
the model is called the way a training forward is (grad on, train mode) but nothing ever steps, so only a
time window can profile it.

    python model_only.py --seconds 30 [--train-mode]
"""

import argparse
import contextlib
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=30)
parser.add_argument("--train-mode", action="store_true")
args = parser.parse_args()

model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
end = time.monotonic() + args.seconds
with contextlib.nullcontext() if args.train_mode else torch.no_grad():
    while time.monotonic() < end:
        model(torch.randn(16, 64)).sum()
