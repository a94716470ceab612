"""Inference with autograd: an evaluation-only loop that never enters no_grad or inference_mode (INF001)."""

from __future__ import annotations

import random

from bench.variants.families.base import Family
from bench.variants.program import MODELS, Prog, model

PREDICTOR = '''\
class Predictor:
    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
{body}
'''


class Inference(Family):
    name = "inference"
    rules = ("INF001",)
    summary = "an evaluation-only loop records autograd for a backward pass that never comes"
    axes = {
        "form": ("loop", "function", "generator", "predictor_class", "topk", "accuracy"),
        "mode": ("eval", "train_mode", "eval_in_helper"),
        "fix": ("no_grad", "inference_mode", "decorator"),
        "model": MODELS,
    }
    steps = 150
    diagnose_args = ("--active", "20")

    def valid(self, axes: dict[str, str]) -> bool:
        # a decorator needs a function to decorate
        return axes["fix"] != "decorator" or axes["form"] in ("function", "predictor_class", "generator")

    def program(self, axes: dict[str, str], rng: random.Random, fixed: bool) -> Prog:
        m = model(axes["model"], rng, batch=rng.choice((8, 16)), depth=rng.choice((8, 12)))
        p = Prog("", m, driver="infer", optimizer=None)
        ctx = {"no_grad": "torch.no_grad()", "inference_mode": "torch.inference_mode()"}.get(axes["fix"])
        deco = ["@torch.no_grad()"] if fixed and axes["fix"] == "decorator" else []
        if axes["mode"] == "eval":
            p.setup = ["model.eval()"]
        elif axes["mode"] == "eval_in_helper":
            p.defs.append("def prepare(model: nn.Module) -> nn.Module:\n    model.eval()\n    return model\n")
            p.setup = ["model = prepare(model)"]
        form = axes["form"]
        if form == "loop":
            p.out = ["scores = model(x)", "kept.append(scores.argmax(dim=1))"]
            p.setup += ["kept = []"]
        elif form == "function":
            p.defs.append("\n".join([*deco, "def predict(model: nn.Module, x: torch.Tensor) -> torch.Tensor:",
                                     "    return model(x).softmax(dim=1)\n"]))
            p.out = ["probs = predict(model, x)"]
        elif form == "generator":
            p.defs.append("\n".join([*deco, "def stream(model: nn.Module, batches: list, n: int):",
                                     "    for step in range(n):", "        x, _ = batches[step % len(batches)]",
                                     "        yield model(x).argmax(dim=1)\n"]))
            p.driver = "custom_infer"
        elif form == "predictor_class":
            body = ["        return self.model(x).argmax(dim=1)"]
            if deco:
                body = ["        return self._run(x)", "", "    @torch.no_grad()",
                        "    def _run(self, x: torch.Tensor) -> torch.Tensor:", "        return self.model(x).argmax(dim=1)"]
            p.defs.append(PREDICTOR.format(body="\n".join(body)))
            p.setup += ["predictor = Predictor(model)"]
            p.out = ["labels = predictor(x)"]
        elif form == "topk":
            p.out = ["top = model(x).softmax(dim=-1).topk(3, dim=-1)", "confidence = top.values[:, 0].mean()"]
        else:
            p.setup += ["correct = 0"]
            p.out = ["correct += int((model(x).argmax(dim=1) == y).sum())"]
        if p.driver == "custom_infer":
            p.driver = "infer"
            loop = ["for step, labels in enumerate(stream(model, batches, STEPS)):", "    _tick()"]
            p.out = []
            p.custom_loop = loop
        if fixed and ctx:
            p.wrap_loop = ctx
        return p


FAMILY = Inference()
