"""Closure optimizers: LBFGS (and others handed a closure) with a problem inside the closure or the step.

Forward and backward run inside optimizer.step(closure); the problem is one of a per-sample loop in the
closure's loss (CPU001), anomaly detection around the closure (HOST002), a checkpoint saved every step (HOST003)
or 16 threads (HOST001): the rule for that problem should fire as it does in a plain loop.
"""

from __future__ import annotations

import random

from bench.variants.families.base import Family
from bench.variants.families.loops import LOSS_FIXED, LOSS_LOOP
from bench.variants.program import MODELS, Prog, model

OPTIMIZERS = {
    "lbfgs": "torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=1, history_size=5)",
    "lbfgs_iter3": "torch.optim.LBFGS(model.parameters(), lr=0.05, max_iter=3, history_size=10)",
    "sgd": "torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)",
    "adam": "torch.optim.Adam(model.parameters(), lr=1e-3)",
}
RULES = {"loop": "CPU001", "anomaly": "HOST002", "checkpoint": "HOST003", "threads": "HOST001"}


class Closure(Family):
    name = "closure"
    rules = tuple(RULES.values())
    summary = "an optimizer handed a closure (forward and backward inside optimizer.step) with a problem planted"
    axes = {
        "problem": tuple(RULES),
        "optimizer": tuple(OPTIMIZERS),
        "closure": ("nested", "partial", "callable"),
        "model": MODELS,
    }

    def expected(self, axes: dict[str, str]) -> tuple[str, ...]:
        return (RULES[axes["problem"]],)

    def program(self, axes: dict[str, str], rng: random.Random, fixed: bool) -> Prog:
        problem = axes["problem"]
        m = model(axes["model"], rng, batch=128 if problem == "loop" and axes["model"] in ("mlp", "lstm", "gru")
                  else None, scale=2.0 if problem == "threads" else 1.0)
        p = Prog("", m, driver="closure", closure_form=axes["closure"], optimizer=OPTIMIZERS[axes["optimizer"]])
        if problem == "loop":
            p.defs.append(LOSS_FIXED if fixed else LOSS_LOOP)
            p.loss = ["loss = per_sample_loss(out, y)"]
        elif problem == "anomaly" and not fixed:
            p.step_ctx = "torch.autograd.detect_anomaly()"
        elif problem == "checkpoint":
            p.imports += ["import shutil", "import tempfile"]
            p.setup = ['ckpt_dir = tempfile.mkdtemp(prefix="variant-ckpt-")']
            every = 1000 if fixed else 1
            p.post = [f"if (step + 1) % {every} == 0:",
                      '    torch.save(model.state_dict(), os.path.join(ckpt_dir, "last.pt"))']
            p.finish = ["shutil.rmtree(ckpt_dir)"]
        elif problem == "threads":
            p.setup_early = ["torch.set_num_threads(len(os.sched_getaffinity(0)))" if fixed
                             else "torch.set_num_threads(16)"]
        return p


FAMILY = Closure()
