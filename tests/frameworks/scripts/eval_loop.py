"""Evaluates an image classifier over a DataLoader under `torch.no_grad()`: accuracy and mean loss, no optimizer.

    python eval_loop.py --batches 40
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_model(classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.2), nn.Linear(32 * 8 * 8, classes),
    )


def evaluate(model: nn.Module, loader: DataLoader) -> tuple[float, float]:
    model.eval()
    correct, total, loss_sum = 0, 0, 0.0
    with torch.no_grad():
        for images, labels in loader:
            logits = model(images)
            loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
            correct += (logits.argmax(dim=1) == labels).sum().item()
            total += labels.numel()
    return correct / total, loss_sum / total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = make_model()
    samples = args.batches * args.batch_size
    data = TensorDataset(torch.randn(samples, 3, 32, 32), torch.randint(0, 10, (samples,)))
    loader = DataLoader(data, batch_size=args.batch_size)
    accuracy, loss = evaluate(model, loader)
    print(f"accuracy {accuracy:.3f} loss {loss:.4f}")


if __name__ == "__main__":
    main()
