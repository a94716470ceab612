"""Hand-written updates: no torch.optim, a Python loop over hundreds of small parameter tensors every step.

The loop's calls are the same kind of cost as a for-loop optimizer's; either rule that tells it counts
(CPU001 for the Python loop, OPT001 for the update's share of the step)."""

from __future__ import annotations

import random

from bench.variants.families.base import Family
from bench.variants.families.optimizer_loop import MANY_PARAMS, many_params_model
from bench.variants.program import Prog

FORMS = {
    "add_": (["with torch.no_grad():", "    for q in model.parameters():", "        q.add_(q.grad, alpha=-LR)"],
             ["with torch.no_grad():", "    params = [q for q in model.parameters()]",
              "    torch._foreach_add_(params, [q.grad for q in params], alpha=-LR)"]),
    "data_sub": (["for q in model.parameters():", "    q.data -= LR * q.grad"],
                 ["params = [q.data for q in model.parameters()]",
                  "torch._foreach_add_(params, [q.grad for q in model.parameters()], alpha=-LR)"]),
    "momentum": (["with torch.no_grad():", "    for q, buf in zip(model.parameters(), velocity):",
                  "        buf.mul_(0.9).add_(q.grad)", "        q.add_(buf, alpha=-LR)"],
                 ["with torch.no_grad():", "    params = list(model.parameters())",
                  "    torch._foreach_mul_(velocity, 0.9)", "    torch._foreach_add_(velocity, [q.grad for q in params])",
                  "    torch._foreach_add_(params, velocity, alpha=-LR)"]),
    "weight_decay": (["with torch.no_grad():", "    for q in model.parameters():", "        q.mul_(1 - LR * 0.01)",
                      "        q.add_(q.grad, alpha=-LR)"],
                     ["with torch.no_grad():", "    params = list(model.parameters())",
                      "    torch._foreach_mul_(params, 1 - LR * 0.01)",
                      "    torch._foreach_add_(params, [q.grad for q in params], alpha=-LR)"]),
    "helper": (["sgd_update(list(model.parameters()), LR)"], ["sgd_update(list(model.parameters()), LR)"]),
    "class": (["updater.step()"], ["updater.step()"]),
}
HELPER = {False: '''\
@torch.no_grad()
def sgd_update(params: list, lr: float) -> None:
    for q in params:
        q.sub_(q.grad * lr)
''', True: '''\
@torch.no_grad()
def sgd_update(params: list, lr: float) -> None:
    torch._foreach_add_(params, [q.grad for q in params], alpha=-lr)
'''}
UPDATER = {False: '''\
class ManualSGD:
    def __init__(self, params, lr: float) -> None:
        self.params, self.lr = list(params), lr

    @torch.no_grad()
    def step(self) -> None:
        for q in self.params:
            if q.grad is not None:
                q.add_(q.grad, alpha=-self.lr)
''', True: '''\
class ManualSGD:
    def __init__(self, params, lr: float) -> None:
        self.params, self.lr = list(params), lr

    @torch.no_grad()
    def step(self) -> None:
        live = [q for q in self.params if q.grad is not None]
        torch._foreach_add_(live, [q.grad for q in live], alpha=-self.lr)
'''}


class HandUpdate(Family):
    name = "hand_update"
    rules = ("CPU001", "OPT001")
    summary = "a hand-written SGD update, no torch.optim, loops over hundreds of small parameter tensors"
    axes = {
        "form": tuple(FORMS),
        "zero": ("grad_none", "model_zero_grad"),
        "driver": ("plain", "while", "function", "loader", "eval_first"),
        "model": MANY_PARAMS,
    }

    def program(self, axes: dict[str, str], rng: random.Random, fixed: bool) -> Prog:
        m = many_params_model(axes["model"], rng)
        p = Prog("", m, driver=axes["driver"], optimizer=None)
        p.defs.append("LR = 0.01\n")
        form = axes["form"]
        p.update = FORMS[form][1 if fixed else 0]
        if form == "helper":
            p.defs.append(HELPER[fixed])
        elif form == "class":
            p.defs.append(UPDATER[fixed])
            p.setup = ["updater = ManualSGD(model.parameters(), LR)"]
        elif form == "momentum":
            p.setup = ["velocity = [torch.zeros_like(q) for q in model.parameters()]"]
        p.zero = (["for q in model.parameters():", "    q.grad = None"] if axes["zero"] == "grad_none"
                  else ["model.zero_grad()"])
        return p


FAMILY = HandUpdate()
