"""Calls sys.exit(0) after step 10, inside the default profiled window (steps 8 to 12)."""

import sys

import torch
from torch import nn

model = nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step == 10:
        sys.exit(0)
