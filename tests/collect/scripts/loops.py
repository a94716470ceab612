"""Training loops that do not start with their training step, or train without torch.optim.

    python loops.py --loop eval-first      # an optimizer is made, 40 forward passes under no_grad, then training
    python loops.py --loop eval-loader     # the same, the evaluation and the training over DataLoaders
    python loops.py --loop hand-sgd        # batches sliced from a tensor, p.data.add_(p.grad) by hand
    python loops.py --loop eval-then-hand  # no optimizer: 10 calls under no_grad, then a hand-written update
    python loops.py --loop accumulate      # four micro-batches, each forward and backward, per optimizer step
    python loops.py --loop lbfgs-long      # LBFGS, 10 closure evaluations a step, each ~0.1 s (a sleep in it)
    python loops.py --loop long-steps      # SGD, each step ~0.6 s (a sleep after its forward)
    python loops.py --loop infer-train     # no optimizer, no backward: model(x) in a loop, autograd on, train mode
    python loops.py --loop never-steps     # an optimizer made, forward and backward in a loop, never a step()
    python loops.py --loop long-eval-hand  # no optimizer: 60 calls under no_grad (past the window), then training
"""

import time

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--loop", required=True)
parser.add_argument("--steps", type=int, default=60)
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 10))
X, Y = torch.randn(4096, 64), torch.randint(0, 10, (4096,))


@torch.no_grad()
def evaluate(calls: int = 40) -> float:
    model.eval()
    total = sum(nn.functional.cross_entropy(model(X[i * 32:(i + 1) * 32]), Y[i * 32:(i + 1) * 32]).item()
                for i in range(calls))
    model.train()
    return total / calls


def hand_update(lr: float = 0.05) -> None:
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)


def train_by_hand(steps: int) -> None:
    for step in range(steps):
        i = step % 60
        model.zero_grad()
        nn.functional.cross_entropy(model(X[i * 64:(i + 1) * 64]), Y[i * 64:(i + 1) * 64]).backward()
        hand_update()


if args.loop == "eval-first":
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    print("val", evaluate())
    for step in range(args.steps):
        i = step % 60
        loss = nn.functional.cross_entropy(model(X[i * 64:(i + 1) * 64]), Y[i * 64:(i + 1) * 64])
        opt.zero_grad()
        loss.backward()
        opt.step()
elif args.loop == "eval-loader":
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model.eval()
    with torch.no_grad():
        for x, y in DataLoader(TensorDataset(X[:1280], Y[:1280]), batch_size=32):
            model(x)
    model.train()
    for x, y in DataLoader(TensorDataset(X, Y), batch_size=64):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
elif args.loop == "hand-sgd":
    train_by_hand(args.steps)
elif args.loop == "eval-then-hand":
    print("val", evaluate(10))  # its 10th call is inside the recorded window: dropped when the backward shows
    train_by_hand(args.steps)
elif args.loop == "accumulate":
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(args.steps):
        for micro in range(4):
            i = (step * 4 + micro) % 60
            (nn.functional.cross_entropy(model(X[i * 64:(i + 1) * 64]), Y[i * 64:(i + 1) * 64]) / 4).backward()
        opt.step()
        opt.zero_grad()
elif args.loop == "lbfgs-long":
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=10, tolerance_grad=0, tolerance_change=0)

    def closure():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(X[:256]), Y[:256])
        time.sleep(0.1)  # the time a larger model's evaluation takes; its ops stay few
        loss.backward()
        return loss

    for step in range(args.steps):
        opt.step(closure)
elif args.loop == "long-steps":
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(args.steps):
        i = step % 60
        loss = nn.functional.cross_entropy(model(X[i * 64:(i + 1) * 64]), Y[i * 64:(i + 1) * 64])
        time.sleep(0.6)
        opt.zero_grad()
        loss.backward()
        opt.step()
elif args.loop == "infer-train":
    kept = []
    for step in range(args.steps):
        i = step % 60
        kept.append(model(X[i * 64:(i + 1) * 64]).argmax(dim=1))
elif args.loop == "long-eval-hand":
    print("val", evaluate(60))  # longer than the whole schedule: recorded, then given back when the backward shows
    train_by_hand(args.steps)
elif args.loop == "never-steps":
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    end = time.monotonic() + 4
    while time.monotonic() < end:
        model.zero_grad()
        nn.functional.cross_entropy(model(X[:64]), Y[:64]).backward()
else:
    parser.error(f"unknown loop {args.loop}")
