"""Planted bottleneck: the DataLoader's worker processes start again at every epoch.

A small dataset (a few batches per epoch, as a fine-tuning set or a shard of a
larger one) is read by worker processes that each build a lookup table the
first time they are asked for a sample (a vocabulary, an index of a file).
Without persistent_workers the workers are stopped at the end of every epoch
and new ones start, rebuild the table and only then deliver their first batch.

    python examples/worker_restarts.py                # the slow version
    python examples/worker_restarts.py --persistent   # the fix: persistent_workers=True
"""

import argparse

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class TokenizedText(Dataset):
    """Token ids per sample, mapped through a vocabulary each worker builds on first use."""

    def __init__(self, n: int, length: int = 64, vocabulary: int = 200_000) -> None:
        self.tokens = np.random.default_rng(0).integers(0, vocabulary, size=(n, length))
        self.vocabulary = vocabulary
        self.table = None                      # built lazily, once per worker process

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int):
        if self.table is None:
            # a stand-in for loading a tokenizer or indexing a file: a hundred ms or more of CPU
            order = np.random.default_rng(1).permutation(self.vocabulary)
            self.table = np.argsort(np.argsort(order)) % 10_000
        ids = torch.from_numpy(self.table[self.tokens[i]])
        return ids, int(ids[0] % 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--persistent", action="store_true", help="keep the worker processes across epochs")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=500)
    args = parser.parse_args()

    torch.set_num_threads(1)   # the workers have the other core
    torch.manual_seed(0)
    dataset = TokenizedText(n=4 * 32)       # four batches per epoch
    loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.persistent)
    model = nn.Sequential(nn.Embedding(10_000, 64), nn.Flatten(), nn.Linear(64 * 64, 256), nn.ReLU(),
                          nn.Linear(256, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for epoch in range(args.epochs):
        for ids, labels in loader:
            loss = nn.functional.cross_entropy(model(ids), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if epoch % 10 == 0:
            print(f"epoch {epoch} loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
