"""Checkpoints saved in every step (HOST003)."""

from __future__ import annotations

import random

from bench.variants.families.base import Family
from bench.variants.program import MODELS, Prog, model, setting

SAVE = {
    "state_dict": ['torch.save(model.state_dict(), os.path.join(ckpt_dir, "model.pt"))'],
    "full": ['torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},',
             '           os.path.join(ckpt_dir, f"ckpt-{step % 2}.pt"))'],
    "helper": ["save_checkpoint(model, optimizer, step, ckpt_dir)"],
    "whole_model": ['torch.save(model, os.path.join(ckpt_dir, "model-full.pt"))'],
}
HELPER = '''\
def save_checkpoint(model: nn.Module, optimizer, step: int, folder: str) -> None:
    path = os.path.join(folder, "latest.pt")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path + ".tmp")
    os.replace(path + ".tmp", path)
'''


class Checkpoint(Family):
    name = "checkpoint"
    rules = ("HOST003",)
    summary = "the model is saved to disk in every step"
    axes = {
        "what": tuple(SAVE),
        "how": ("always", "literal", "config", "argparse", "env", "dict"),
        "driver": ("plain", "while", "function", "loader", "eval_first", "closure", "accelerate"),
        "model": MODELS,
    }

    def program(self, axes: dict[str, str], rng: random.Random, fixed: bool) -> Prog:
        m = model(axes["model"], rng)
        # a memory bank of past features (as contrastive training keeps), 8-16 MB of the checkpoint
        m.init = [*m.init, f'self.register_buffer("bank", torch.zeros({rng.choice((2, 3)) * 1024 * 1024 // m.feat}, {m.feat}))']
        p = Prog("", m, driver=axes["driver"])
        if axes["driver"] == "closure":
            p.optimizer = "torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=1, history_size=5)"
        p.imports += ["import shutil", "import tempfile"]
        if axes["what"] == "helper":
            p.defs.append(HELPER)
        save = SAVE[axes["what"]]
        p.setup = ['ckpt_dir = tempfile.mkdtemp(prefix="variant-ckpt-")']
        p.finish = ["shutil.rmtree(ckpt_dir)"]
        if axes["how"] == "always":  # the fix: save every 1000 steps instead
            p.post = ["if (step + 1) % 1000 == 0:", *("    " + line for line in save)] if fixed else save
        else:
            s = setting(axes["how"], "save_every", "1000" if fixed else "1")
            p.setup_early = p.settings(s)
            p.post = [f"if (step + 1) % {s.expr} == 0:", *("    " + line for line in save)]
        return p


FAMILY = Checkpoint()
