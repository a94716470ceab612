"""A hand-written update loop over a DataLoader: no torch.optim optimizer ever steps."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
data = TensorDataset(torch.randn(2048, 32), torch.randn(2048, 1))
loader = DataLoader(data, batch_size=32, shuffle=True)
for x, y in loader:
    loss = (model(x) - y).pow(2).mean()
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
