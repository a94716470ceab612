"""Trains from a DataLoader with two worker processes; each worker notes its pid in --pids.

    python workers.py --pids DIR
"""

import argparse
import os
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, get_worker_info


class Noted(Dataset):
    def __init__(self, pids: str) -> None:
        self.pids = Path(pids)

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int):
        info = get_worker_info()
        if info is not None and not NOTED:
            # Once per worker, and whole or not at all: the collector kills the workers when it stops the
            # script, and a kill between a write's truncation and its text would leave an empty file.
            path = self.pids / f"worker{info.id}.pid"
            partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            partial.write_text(str(os.getpid()))
            os.replace(partial, path)
            NOTED.append(True)
        return torch.randn(16), torch.randn(4)


NOTED: list[bool] = []  # per worker process: its pid is noted


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--pids", required=True)
    args = parser.parse_args()
    model = nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Noted(args.pids), batch_size=8, num_workers=2)
    for x, y in loader:
        loss = (model(x) - y).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
