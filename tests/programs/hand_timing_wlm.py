"""word_language_model's training step, timed by hand: the truth the advisor's split is held against.

Run from a copy of ``../shared/programs/pytorch_examples/word_language_model``; builds the corpus and the model as
``main.py`` does with its defaults (LSTM, or ``--model Transformer``), runs ``--warmup`` steps, then times
``--steps`` more with ``time.perf_counter`` around each part of the loop, and prints one JSON line: each part's
share of the step. The parts are the advisor's: forward (the model and the loss), backward, and the update
written by hand with what runs between it and the next forward (clipping, ``p.data.add_``, ``loss.item()``,
the next batch's slice, ``zero_grad``, detaching the hidden state).
"""

import argparse
import json
import os
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.getcwd())
import data  # noqa: E402  (the program's own modules, from its folder)
import model as models  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="LSTM")
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--steps", type=int, default=10)
args = parser.parse_args()

torch.manual_seed(1111)
corpus = data.Corpus("./data/wikitext-2")
ntokens = len(corpus.dictionary)
batch_size, bptt, clip, lr = 20, 35, 0.25, 20
source = corpus.train[: (corpus.train.size(0) // batch_size) * batch_size].view(batch_size, -1).t().contiguous()
if args.model == "Transformer":
    net = models.TransformerModel(ntokens, 200, 2, 200, 2, 0.2)
else:
    net = models.RNNModel(args.model, ntokens, 200, 200, 2, 0.2, False)
criterion = nn.NLLLoss()
net.train()
hidden = None if args.model == "Transformer" else net.init_hidden(batch_size)


def repackage(h):
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage(v) for v in h)


totals = {"forward": 0.0, "backward": 0.0, "update": 0.0}
for step in range(args.warmup + args.steps):
    i = step * bptt
    t0 = time.perf_counter()
    batch, targets = source[i:i + bptt], source[i + 1:i + 1 + bptt].reshape(-1)
    net.zero_grad()
    if hidden is not None:
        hidden = repackage(hidden)
    t1 = time.perf_counter()
    if hidden is None:
        output = net(batch).view(-1, ntokens)
    else:
        output, hidden = net(batch, hidden)
    loss = criterion(output, targets)
    t2 = time.perf_counter()
    loss.backward()
    t3 = time.perf_counter()
    torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
    for p in net.parameters():
        p.data.add_(p.grad, alpha=-lr)
    loss.item()
    t4 = time.perf_counter()
    if step >= args.warmup:
        totals["forward"] += t2 - t1
        totals["backward"] += t3 - t2
        totals["update"] += (t4 - t3) + (t1 - t0)
step_s = sum(totals.values())
print(json.dumps({"step_ms": step_s / args.steps * 1e3, **{k: v / step_s for k, v in totals.items()}}))
