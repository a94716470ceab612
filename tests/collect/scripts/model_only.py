"""Calls a model for a while, with no optimizer and no DataLoader.

Under ``torch.no_grad()`` it is an inference loop: each call of the model is a step. With ``--train-mode``
the model is called the way a training forward is (grad on, train mode), but nothing ever steps: an inference
loop that forgot ``no_grad`` and ``eval()``, whose repeated calls are still its steps. With ``--one-call`` the
loop runs inside one call of an outer module, so no module is called outermost twice and only a time window
can profile it.

    python model_only.py --seconds 30 [--train-mode] [--one-call]
"""

import argparse
import contextlib
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=30)
parser.add_argument("--train-mode", action="store_true")
parser.add_argument("--one-call", action="store_true")
args = parser.parse_args()


class Spin(nn.Module):
    """Calls its model until ``end``, all in one call of its own."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, end: float) -> None:
        while time.monotonic() < end:
            self.inner(torch.randn(16, 64)).sum()


model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
end = time.monotonic() + args.seconds
with contextlib.nullcontext() if args.train_mode else torch.no_grad():
    if args.one_call:
        Spin(model)(end)
    while time.monotonic() < end:
        model(torch.randn(16, 64)).sum()
