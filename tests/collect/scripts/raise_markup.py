"""Trains 3 steps, then raises an error whose message holds square brackets, as paths and indices do.

    python raise_markup.py
"""

import torch
from torch import nn

model = nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    if step == 3:
        raise RuntimeError("checkpoint [/foo] is missing: tried ckpt[step] and [bold]ckpt[/bold]")
    loss = model(torch.randn(8, 16)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
