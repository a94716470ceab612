"""Planted bottleneck: the input pipeline starves the model.

Every sample is read from its own file on a (simulated) slow network file
system, and the DataLoader fetches them in the training process itself
(num_workers=0), so the model waits for every batch.

    python examples/slow_dataloader.py                 # the slow version
    python examples/slow_dataloader.py --workers 4     # the fix: load in parallel
"""

import argparse
import os
import tempfile
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

READ_LATENCY_S = 0.0015  # per file, as on a busy network file system


class FileDataset(Dataset):
    """One sample per .npy file; each read pays the storage latency."""

    def __init__(self, root: str, n: int) -> None:
        self.paths = []
        self.labels = [i % 10 for i in range(n)]
        for i in range(n):
            path = os.path.join(root, f"sample_{i:05d}.npy")
            np.save(path, np.random.default_rng(i).standard_normal((3, 32, 32), dtype=np.float32))
            self.paths.append(path)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        time.sleep(READ_LATENCY_S)
        with open(self.paths[i], "rb") as f:
            image = torch.from_numpy(np.load(f))
        return image, self.labels[i]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    root = tempfile.mkdtemp(prefix="advisor-example-")
    dataset = FileDataset(root, 1024)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.workers > 0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(64, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(args.epochs):
        for images, labels in loader:
            loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
