"""What the source-line labels cost per torch call inside the profiled window.

    PYTHONPATH=$PWD python bench/source_marker_cost.py [--calls 20000]

Inside the window every outermost torch call goes through advisor's ``SourceMarker`` (a ``TorchFunctionMode``
that walks the stack to the user's line and opens a profiler range named after it). That cost lands in the
recorded steps, so it inflates what the trace shows of the host's dispatch (INF001, CPU001 and the launch-bound
rules read it). This prints, under the profiler, the time per call of a small ``torch.add`` made by the user's
own line and the time per forward of a library model (``nn.Sequential`` of Linear, LayerNorm and GELU blocks,
whose calls are made from torch's code ten frames below the user's), each without and with the marker, and the
added time per torch call. One thread, best of seven rounds; it prints the load average, as other processes
move the figures.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from advisor.collect.source_marker import SourceMarker


def _best_us(fn, rounds: int = 7) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000, help="torch.add calls per round")
    parser.add_argument("--forwards", type=int, default=300, help="model forwards per round")
    args = parser.parse_args()
    torch.set_num_threads(1)
    a, b = torch.randn(8), torch.randn(8)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.GELU()) for _ in range(8)]).eval()
    x = torch.randn(2, 8)
    ops_per_forward = 24

    def adds() -> None:
        for _ in range(args.calls):
            torch.add(a, b)

    def forwards() -> None:
        with torch.no_grad():
            for _ in range(args.forwards):
                model(x)

    marker = SourceMarker([Path(__file__).resolve().parent])
    marker.enabled = True
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    with profile(activities=[ProfilerActivity.CPU]):
        plain_add, plain_fwd = _best_us(adds) / args.calls, _best_us(forwards) / args.forwards
        marker.push_bottom()
        try:
            marked_add, marked_fwd = _best_us(adds) / args.calls, _best_us(forwards) / args.forwards
        finally:
            marker.remove()
    print(f"{'':34s}{'plain':>10s}{'marked':>10s}{'added per call':>16s}")
    print(f"{'torch.add from the user line (us)':34s}{plain_add:10.2f}{marked_add:10.2f}{marked_add - plain_add:16.2f}")
    print(f"{'library model forward (us)':34s}{plain_fwd:10.1f}{marked_fwd:10.1f}"
          f"{(marked_fwd - plain_fwd) / ops_per_forward:16.2f}")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
