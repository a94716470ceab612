"""Thread oversubscription: 16 intra-op threads on the cores the process may use (HOST001)."""

from __future__ import annotations

import random

from bench.variants.families.base import Family
from bench.variants.program import MODELS, Prog, model, setting

CORES = "len(os.sched_getaffinity(0))"
HELPER = '''\
def configure_runtime(threads: int) -> None:
    """Intra-op threads for the whole run."""
    torch.set_num_threads(threads)
'''


class Threads(Family):
    name = "threads"
    rules = ("HOST001",)
    summary = "torch runs 16 intra-op threads on a machine with fewer cores"
    axes = {
        "how": ("api", "env_in_script", "env_at_launch", "config", "argparse", "dict", "helper"),
        "driver": ("plain", "while", "function", "loader", "eval_first", "closure", "hand", "accelerate"),
        "model": MODELS,
    }

    def program(self, axes: dict[str, str], rng: random.Random, fixed: bool) -> Prog:
        m = model(axes["model"], rng, scale=2.0)
        p = Prog("", m, driver=axes["driver"])
        value = CORES if fixed else "16"
        how = axes["how"]
        if how == "env_in_script":
            p.pre_import = [f'os.environ["OMP_NUM_THREADS"] = str({value})']
        elif how == "helper":
            p.defs.append(HELPER)
            p.setup_early = [f"configure_runtime({value})"]
        elif how != "env_at_launch":
            style = {"api": "literal", "config": "config", "argparse": "argparse", "dict": "dict"}[how]
            s = setting(style, "threads", value)
            p.setup_early = [*p.settings(s), f"torch.set_num_threads({s.expr})"]
        if axes["driver"] == "closure":
            p.optimizer = "torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=1, history_size=5)"
        if axes["driver"] == "hand":
            p.optimizer = None
        return p

    def env(self, axes: dict[str, str], fixed: bool) -> dict[str, str]:
        # "{cores}": the cores the runner may use, filled in when it runs
        return {"OMP_NUM_THREADS": "{cores}" if fixed else "16"} if axes["how"] == "env_at_launch" else {}


FAMILY = Threads()
