"""Batched inference with a small convolutional classifier: `model.eval()`, `torch.no_grad()`, `model(x)`.

No optimizer, no DataLoader: the inputs are already in memory, as when a
script measures a model's throughput or serves requests.

    python inference_loop.py --iterations 300
"""

import argparse

import torch
from torch import nn


def make_model(classes: int = 10) -> nn.Module:
    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.MaxPool2d(2))

    return nn.Sequential(block(3, 16), block(16, 32), block(32, 64), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(64, classes))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = make_model()
    model.eval()
    images = torch.randn(args.batch_size, 3, 32, 32)
    counts = torch.zeros(10, dtype=torch.long)
    with torch.no_grad():
        for _ in range(args.iterations):
            logits = model(images)
            counts += torch.bincount(logits.argmax(dim=1), minlength=10)
    print("predictions per class:", counts.tolist())


if __name__ == "__main__":
    main()
