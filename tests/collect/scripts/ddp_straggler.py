"""DistributedDataParallel over gloo; one rank does planted extra work every step.

    torchrun --nproc-per-node 2 ddp_straggler.py --slow-rank 1 --delay-ms 40
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--slow-rank", type=int, default=1)
parser.add_argument("--delay-ms", type=float, default=40)
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--late-from", type=int, default=10**9,
                    help="from this step on the slow rank's delay is --late-delay-ms")
parser.add_argument("--late-delay-ms", type=float, default=0)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    x = torch.randn(32, 64)
    if rank == args.slow_rank:
        # the straggler: work only this rank does
        time.sleep((args.late_delay_ms if step >= args.late_from else args.delay_ms) / 1000)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
dist.destroy_process_group()
