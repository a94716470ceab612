"""Raises at step 12, inside the default profiled window (steps 8 to 12)."""

import torch
from torch import nn


def check(batch: torch.Tensor, step: int) -> None:
    if step == 12:
        raise RuntimeError(f"planted failure at step {step}")  # the line the report must name


model = nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    batch = torch.randn(8, 16)
    check(batch, step)
    loss = model(batch).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
