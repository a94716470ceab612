"""A family of per-row Python loops in a model's forward, each with the forms that must stay quiet.

    python row_loops.py --form forward        # the loop's body spread over three lines of forward
    python row_loops.py --form helper         # the same body in a helper function the loop calls per row
    python row_loops.py --form comprehension  # torch.stack([row(...) for r in x])
    python row_loops.py --form batched        # the fix: one call per operator for the whole batch
    python row_loops.py --form layers         # near-miss: `for layer in self.layers` over big Linear layers
    python row_loops.py --form microbatch     # near-miss: the batched model in a loop of two micro-batches

``--time N`` runs N steps and prints the median step in ms, without the advisor, so each form's real cost
can be set against its batched twin's.
"""

import argparse
import statistics
import time

import torch
from torch import nn

ROWS, WIDTH, BIG = 64, 64, 1024


def row_unit(lin: nn.Linear, r: torch.Tensor) -> torch.Tensor:
    h = lin(r)
    g = torch.tanh(h)
    return g * torch.sigmoid(h)


class RowNet(nn.Module):
    def __init__(self, form: str) -> None:
        super().__init__()
        self.form = form
        self.lin = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.form == "forward":
            rows = []
            for i in range(x.shape[0]):
                h = self.lin(x[i])
                g = torch.tanh(h)
                rows.append(g * torch.sigmoid(h))
            y = torch.stack(rows)
        elif self.form == "helper":
            rows = []
            for i in range(x.shape[0]):
                rows.append(row_unit(self.lin, x[i]))
            y = torch.stack(rows)
        elif self.form == "comprehension":
            y = torch.stack([row_unit(self.lin, r) for r in x])
        else:
            y = row_unit(self.lin, x)
        return self.head(y)


class Layers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(WIDTH, BIG)
        self.layers = nn.ModuleList(nn.Linear(BIG, BIG) for _ in range(4))
        self.head = nn.Linear(BIG, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--form", default="forward",
                        choices=["forward", "helper", "comprehension", "batched", "layers", "microbatch"])
    parser.add_argument("--steps", type=int, default=100000)
    parser.add_argument("--time", type=int, default=0, help="time this many steps and print the median (ms)")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = Layers() if args.form == "layers" else RowNet("batched" if args.form == "microbatch" else args.form)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, target = torch.randn(ROWS, WIDTH), torch.randn(ROWS, 1)
    chunks = 2 if args.form == "microbatch" else 1
    times = []
    for step in range(args.time or args.steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        for xs, ts in zip(x.chunk(chunks), target.chunk(chunks)):
            loss = nn.functional.mse_loss(model(xs), ts)
            loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    if args.time:
        warm = times[len(times) // 5:]
        print(f"{args.form}: median step {statistics.median(warm) * 1e3:.3f} ms over {len(warm)} steps")


if __name__ == "__main__":
    main()
