"""Evaluates a classifier over a DataLoader under `torch.no_grad()`: accuracy and mean loss, no optimizer.

    python eval_loop.py --batches 40
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def evaluate(model: nn.Module, loader: DataLoader) -> tuple[float, float]:
    model.eval()
    correct, total, loss_sum = 0, 0, 0.0
    with torch.no_grad():
        for x, y in loader:
            logits = model(x)
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(dim=1) == y).sum().item()
            total += y.numel()
    return correct / total, loss_sum / total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Dropout(0.1), nn.Linear(512, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    samples = args.batches * args.batch_size
    data = TensorDataset(torch.randn(samples, 784), torch.randint(0, 10, (samples,)))
    loader = DataLoader(data, batch_size=args.batch_size)
    accuracy, loss = evaluate(model, loader)
    print(f"accuracy {accuracy:.3f} loss {loss:.4f}")


if __name__ == "__main__":
    main()
