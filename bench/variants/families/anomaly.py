"""Anomaly detection left on: every backward node records its forward's stack and checks for NaNs (HOST002)."""

from __future__ import annotations

import random

from bench.variants.families.base import Family
from bench.variants.program import MODELS, Prog, model, setting

HELPER = '''\
def enable_debugging(enabled: bool) -> None:
    """Debug switches for the run."""
    torch.autograd.set_detect_anomaly(enabled)
'''


class Anomaly(Family):
    name = "anomaly"
    rules = ("HOST002",)
    summary = "autograd's anomaly detection is on while training"
    axes = {
        "how": ("global", "around_loop", "around_step", "around_backward", "helper", "check_nan_off",
                "config", "argparse", "env", "dict"),
        "driver": ("plain", "while", "function", "loader", "eval_first", "closure", "hand", "accelerate", "lightning"),
        "model": MODELS,
    }

    def valid(self, axes: dict[str, str]) -> bool:
        if axes["driver"] == "lightning":
            # Lightning's fit sets anomaly detection from its own flag, whatever was set around it
            return axes["how"] in ("global", "config") and axes["model"] in ("mlp", "gru")
        return axes["driver"] != "closure" or axes["how"] != "around_backward"

    def program(self, axes: dict[str, str], rng: random.Random, fixed: bool) -> Prog:
        m = model(axes["model"], rng)
        p = Prog("", m, driver=axes["driver"])
        if axes["driver"] == "closure":
            p.optimizer = "torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=1, history_size=5)"
        if axes["driver"] == "hand":
            p.optimizer = None
        how = axes["how"]
        on = "False" if fixed else "True"
        if axes["driver"] == "lightning":
            if how == "config":
                s = setting(how, "detect_anomaly", on, kind="bool")
                p.setup_early = p.settings(s)
                p.trainer_args = f", detect_anomaly={s.expr}"
            else:
                p.trainer_args = f", detect_anomaly={on}"
        elif how == "global":
            p.setup_early = [f"torch.autograd.set_detect_anomaly({on})"]
        elif how == "check_nan_off":
            p.setup_early = [f"torch.autograd.set_detect_anomaly({on}, check_nan=False)"]
        elif how == "helper":
            p.defs.append(HELPER)
            p.setup_early = [f"enable_debugging({on})"]
        elif how == "around_loop":
            p.wrap_loop = None if fixed else "torch.autograd.detect_anomaly()"
        elif how == "around_step":
            p.step_ctx = None if fixed else "torch.autograd.detect_anomaly()"
        elif how == "around_backward":
            p.backward = None if fixed else ["with torch.autograd.detect_anomaly():",
                                             "    " + ("accelerator.backward(loss)" if axes["driver"] == "accelerate"
                                                       else "loss.backward()")]
        else:
            s = setting(how, "detect_anomaly", on, kind="bool")
            p.setup_early = [*p.settings(s), f"torch.autograd.set_detect_anomaly({s.expr})"]
        return p


FAMILY = Anomaly()
