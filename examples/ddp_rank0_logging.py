"""Planted bottleneck: rank 0 logs every step inside the training loop, and the other ranks wait for it.

Two ranks (gloo, on the CPU) train a small model with DistributedDataParallel. After each step rank 0
sends its metrics to a logger that takes a while to answer (a remote experiment tracker, simulated here
by its latency), so rank 1 waits in the next step's gradient all-reduce.

    advisor diagnose --nproc-per-node 2 examples/ddp_rank0_logging.py                       # the slow version
    advisor diagnose --nproc-per-node 2 examples/ddp_rank0_logging.py -- --log-in-thread    # the fix
"""

import argparse
import queue
import threading
import time

import torch
import torch.distributed as dist
from torch import nn

LOGGER_LATENCY_S = 0.04


def send_metrics(step: int, loss: torch.Tensor) -> None:
    """Read the values and make a blocking call to a slow metrics service."""
    metrics = {"step": step, "loss": loss.item()}
    time.sleep(LOGGER_LATENCY_S)  # the service's answer
    del metrics


def background_logger() -> "queue.Queue[tuple[int, torch.Tensor]]":
    """A thread that reads and sends what is put on the queue, so the training loop waits for neither."""
    pending: "queue.Queue[tuple[int, torch.Tensor]]" = queue.Queue()

    def drain() -> None:
        while True:
            batch = [pending.get()]
            while not pending.empty():  # whatever queued up while the last call ran goes in one call
                batch.append(pending.get())
            send_metrics(*batch[-1])

    threading.Thread(target=drain, daemon=True).start()
    return pending


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log-in-thread", action="store_true", help="send rank 0's metrics from a background thread")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()

    torch.set_num_threads(1)  # two ranks share the machine's cores
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    pending = background_logger() if args.log_in_thread and rank == 0 else None
    for step in range(args.steps):
        x = torch.randn(64, 256)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if rank == 0:
            if pending is not None:
                pending.put((step, loss.detach()))
            else:
                send_metrics(step, loss.detach())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
