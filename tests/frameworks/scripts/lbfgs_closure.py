"""Full-batch regression with `torch.optim.LBFGS`, the closure form the torch.optim docs show.

`optimizer.step(closure)` calls the closure (zero_grad, forward, loss,
backward) several times per step: once, then again for each line-search
evaluation, up to `max_iter` times.

    python lbfgs_closure.py --steps 30
"""

import argparse

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()

    torch.manual_seed(0)
    inputs = torch.randn(2048, 64)
    target = torch.sin(inputs[:, :1] * 3) + 0.1 * torch.randn(2048, 1)
    model = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh(), nn.Linear(128, 1))
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=1, max_iter=5, history_size=10,
                                  line_search_fn="strong_wolfe")

    for step in range(args.steps):
        def closure():
            optimizer.zero_grad()
            output = model(inputs)
            loss = loss_fn(output, target)
            loss.backward()
            return loss

        loss = optimizer.step(closure)
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
