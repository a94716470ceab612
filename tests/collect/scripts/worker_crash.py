"""Trains from a DataLoader whose worker process raises on sample 10 (an index past a list's end).

    python worker_crash.py
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Shards(Dataset):
    def __init__(self) -> None:
        self.shards = list(range(10))

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int):
        shard = self.shards[i]  # IndexError from sample 10 on: there are 10 shards for 1000 samples
        return torch.full((8,), float(shard)), torch.zeros(2)


if __name__ == "__main__":
    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(Shards(), batch_size=4, num_workers=1):
        loss = (model(x) - y).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
