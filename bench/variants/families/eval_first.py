"""An evaluation pass before training: the steps to profile are the training's, not the evaluation's.

The training holds one of a per-sample loop in the loss (CPU001), anomaly detection (HOST002) or a checkpoint
saved every step (HOST003); the evaluation before it runs the same model with no backward and no optimizer."""

from __future__ import annotations

import random

from bench.variants.families.base import Family
from bench.variants.families.loops import LOSS_FIXED, LOSS_LOOP
from bench.variants.program import EVAL_STYLES, MODELS, Prog, model

RULES = {"loop": "CPU001", "anomaly": "HOST002", "checkpoint": "HOST003"}


class EvalFirst(Family):
    name = "eval_first"
    rules = tuple(RULES.values())
    summary = "an evaluation pass runs before training, whose steps hold a planted problem"
    axes = {
        "problem": tuple(RULES),
        "eval": EVAL_STYLES,
        "driver": ("plain", "while", "function", "closure", "hand"),
        "model": MODELS,
    }

    def expected(self, axes: dict[str, str]) -> tuple[str, ...]:
        return (RULES[axes["problem"]],)

    def program(self, axes: dict[str, str], rng: random.Random, fixed: bool) -> Prog:
        problem = axes["problem"]
        m = model(axes["model"], rng, batch=128 if problem == "loop" and axes["model"] in ("mlp", "lstm", "gru")
                  else None, scale=2.0 if problem == "checkpoint" else 1.0)
        p = Prog("", m, driver=axes["driver"], eval_first=True, eval_style=axes["eval"],
                 eval_batches=rng.choice((30, 60)))
        if axes["driver"] == "closure":
            p.optimizer = "torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=1, history_size=5)"
        if axes["driver"] == "hand":
            p.optimizer = None
        if problem == "loop":
            p.defs.append(LOSS_FIXED if fixed else LOSS_LOOP)
            p.loss = ["loss = per_sample_loss(out, y)"]
        elif problem == "anomaly":
            p.setup = [f"torch.autograd.set_detect_anomaly({not fixed})"]
        else:
            p.imports += ["import shutil", "import tempfile"]
            p.setup = ['ckpt_dir = tempfile.mkdtemp(prefix="variant-ckpt-")']
            p.post = [f"if (step + 1) % {1000 if fixed else 1} == 0:",
                      '    torch.save(model.state_dict(), os.path.join(ckpt_dir, "model.pt"))']
            p.finish = ["shutil.rmtree(ckpt_dir)"]
        return p


FAMILY = EvalFirst()
