"""Healthy programs: nothing planted. No diagnosis of medium severity or higher should appear."""

from __future__ import annotations

import random

from bench.variants.families.base import Family
from bench.variants.program import EVAL_STYLES, MODELS, Prog, model

EXTRAS = ("none", "scheduler", "grad_clip", "log_every_10", "adamw")


class Healthy(Family):
    name = "healthy"
    rules = ()
    healthy = True
    summary = "a training loop with no planted problem"
    axes = {
        "driver": ("plain", "while", "function", "loader", "eval_first", "closure", "hand", "accelerate",
                   "lightning"),
        "extra": EXTRAS,
        "model": MODELS,
    }

    def valid(self, axes: dict[str, str]) -> bool:
        if axes["driver"] == "lightning":
            return axes["extra"] in ("none", "adamw") and axes["model"] in ("mlp", "cnn")
        if axes["driver"] in ("hand", "closure"):
            return axes["extra"] in ("none", "grad_clip", "log_every_10")
        return True

    def program(self, axes: dict[str, str], rng: random.Random, fixed: bool) -> Prog:
        m = model(axes["model"], rng, scale=rng.choice((1.0, 2.0)))
        p = Prog("", m, driver=axes["driver"], eval_style=rng.choice(EVAL_STYLES))
        if axes["driver"] == "closure":
            p.optimizer = "torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=1, history_size=5)"
        if axes["driver"] == "hand":
            p.optimizer = None
        extra = axes["extra"]
        if extra == "scheduler":
            p.setup = ["scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.5)"]
            p.post = ["scheduler.step()"]
        elif extra == "grad_clip":
            p.backward = [*(p.backward or (["accelerator.backward(loss)"] if axes["driver"] == "accelerate"
                                           else ["loss.backward()"])),
                          "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"]
        elif extra == "log_every_10":
            p.post = ["if step % 10 == 0:", '    print(f"step {step} loss {loss.item():.4f}")']
        elif extra == "adamw":
            p.optimizer = "torch.optim.AdamW(model.parameters(), lr=1e-3)"
        return p


FAMILY = Healthy()
