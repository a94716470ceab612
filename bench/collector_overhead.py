"""How much time the framework collector adds to a training step outside its profiled window.

    PYTHONPATH=$PWD python bench/collector_overhead.py [--rounds 5] [--steps 600]

Runs ``overhead_workload.py`` alternately as ``python overhead_workload.py``
and as ``advisor diagnose overhead_workload.py --run-to-end`` (default
schedule: wait 5, warmup 3, active 5), and compares the step times the
workload itself notes, over steps 20 to the end: past the process warm-up
and past the profiled window (steps 5 to 12, whose recording and export are
not meant to be free). Outside the window the collector keeps only its step
hooks (optimizer step pre/post hooks, the DataLoader ``__next__`` wrapper).
It prints the median step time of each run and the added time per step; the
target is within 5% of the plain script. Both run with ``OMP_NUM_THREADS=1``
(the same for both), so that another process on a small machine does not
turn OpenMP's spin-waiting into noise larger than what is measured.

It also measures the hooks alone, in this process: ``optimizer.step()`` on
a one-parameter model and a DataLoader of single numbers, with and without a
StepDriver attached in its wait phase: the collector's cost per step outside
the window, without the noise of whole processes.

Not part of the test suite: it takes minutes and wants a quiet machine (it
prints the load average).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "overhead_workload.py"
FIRST_STEP = 20  # past the process warm-up and the window (steps 5-12) with its export


def _step_ms(times_file: Path) -> list[float]:
    ends = json.loads(times_file.read_text())
    return [(b - a) / 1e6 for a, b in zip(ends[FIRST_STEP - 1:-1], ends[FIRST_STEP:])]


def hook_cost_us(steps: int = 20000, repeats: int = 5) -> tuple[float, float]:
    """Microseconds per (DataLoader batch + optimizer.step()) without and with the driver's hooks."""
    import time

    import torch
    from torch.utils.data import DataLoader

    from advisor.collect.config import CollectorConfig
    from advisor.collect.labels import PhaseLabels
    from advisor.collect.steps import StepDriver

    class Idle:  # a backend that never records: the driver stays in its wait phase
        def prepare(self) -> None: ...
        def start(self, step: int) -> None: ...
        def next_step(self, step: int) -> None: ...
        def stop(self, complete: bool = True) -> None: ...

    param = torch.nn.Parameter(torch.zeros(1))
    param.grad = torch.zeros(1)
    optimizer = torch.optim.SGD([param], lr=0.0)
    loader = DataLoader(range(steps), batch_size=None)

    def loop() -> float:
        start = time.perf_counter_ns()
        for _ in loader:
            optimizer.step()
        return (time.perf_counter_ns() - start) / steps / 1e3

    plain, hooked = [], []
    for _ in range(repeats):
        plain.append(loop())
        driver = StepDriver(CollectorConfig(script="bench", wait=10**9), Idle(), PhaseLabels(), None, lambda: None)
        driver.attach()
        hooked.append(loop())
        driver.detach()
    return min(plain), min(hooked)


def _run(collected: bool, size: str, steps: int, work: Path, n: int) -> list[float]:
    times = work / f"{'collected' if collected else 'plain'}-{size}-{n}.json"
    args = ["--steps", str(steps), "--size", size, "--times", str(times)]
    if collected:
        cmd = [sys.executable, "-m", "advisor", "diagnose", str(WORKLOAD), "--run-to-end", "-q",
               "--out", str(work / f"run-{size}-{n}"), "--", *args]
    else:
        cmd = [sys.executable, str(WORKLOAD), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(cmd, check=True, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return _step_ms(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="plain/collected pairs per workload size")
    parser.add_argument("--steps", type=int, default=600, help="steps per run")
    parser.add_argument("--sizes", nargs="+", default=["mlp", "tiny"], choices=["mlp", "tiny"])
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    plain_us, hooked_us = hook_cost_us()
    print(f"\nhooks alone (DataLoader batch + optimizer.step(), best of 5 x 20,000):")
    print(f"  plain {plain_us:.2f} us, with the collector's hooks {hooked_us:.2f} us: "
          f"{hooked_us - plain_us:+.2f} us per step")
    with tempfile.TemporaryDirectory(prefix="advisor-bench-") as tmp:
        work = Path(tmp)
        for size in args.sizes:
            plain, collected = [], []
            for n in range(args.rounds):  # alternate, so drift in machine load hits both alike
                plain.append(statistics.median(_run(False, size, args.steps, work, n)))
                collected.append(statistics.median(_run(True, size, args.steps, work, n)))
            p, c = statistics.median(plain), statistics.median(collected)
            print(f"\n{size}: median step over steps {FIRST_STEP}-{args.steps - 1}, {args.rounds} runs each")
            print(f"  plain      {p:8.3f} ms   runs: {' '.join(f'{x:.3f}' for x in plain)}")
            print(f"  collected  {c:8.3f} ms   runs: {' '.join(f'{x:.3f}' for x in collected)}")
            print(f"  added      {(c - p) * 1000:8.1f} us per step ({(c - p) / p:+.1%}) median of runs; "
                  f"{(min(collected) - min(plain)) * 1000:.1f} us ({min(collected) / min(plain) - 1:+.1%}) "
                  "least-disturbed runs")
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
