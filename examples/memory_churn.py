"""Planted bottleneck: the step's large temporaries go back to the system when freed, and come back as page faults.

A language-model head over a 32k vocabulary: the logits of 256 tokens are 32 MB, and their gradient as much
again. glibc's malloc serves blocks that large with mappings of their own and unmaps them when they are freed, so
every step maps and zeroes them again, page by page.

    python examples/memory_churn.py                  # the slow version: glibc's defaults
    python examples/memory_churn.py --keep-memory    # the fix: glibc keeps freed memory in the process

``--keep-memory`` sets glibc's mmap and trim thresholds with ``mallopt`` at the start, as
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` in the environment would.
"""

import argparse
import ctypes
import ctypes.util

import torch
from torch import nn

#: mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def keep_memory() -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    big = 1 << 30
    libc.mallopt(M_MMAP_THRESHOLD, ctypes.c_int(big))  # no block gets a mapping of its own
    libc.mallopt(M_TRIM_THRESHOLD, ctypes.c_int(big))  # and the heap is not trimmed back


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep-memory", action="store_true", help="keep freed memory in the process (mallopt)")
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    if args.keep_memory:
        keep_memory()

    torch.manual_seed(0)
    vocab, dim, tokens = 32000, 32, 256
    model = nn.Sequential(nn.Embedding(vocab, dim), nn.Linear(dim, dim), nn.Tanh(), nn.Linear(dim, vocab))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randint(0, vocab, (tokens * 8,))
    for step in range(args.steps):
        i = (step % 7) * tokens
        x, y = data[i:i + tokens], data[i + 1:i + 1 + tokens]
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
