"""Optimizer for-loops: foreach=False over hundreds of small parameter tensors (OPT001)."""

from __future__ import annotations

import random

from bench.variants.families.base import Family
from bench.variants.program import Model, Prog, setting

OPTIMIZERS = {
    "adam": "torch.optim.Adam({params}, lr=1e-3, foreach={foreach})",
    "adamw": "torch.optim.AdamW({params}, lr=1e-3, weight_decay=0.01, foreach={foreach})",
    "sgd": "torch.optim.SGD({params}, lr=0.01, momentum=0.9, foreach={foreach})",
    "rmsprop": "torch.optim.RMSprop({params}, lr=1e-3, foreach={foreach})",
    "adagrad": "torch.optim.Adagrad({params}, lr=0.01, foreach={foreach})",
    "nadam": "torch.optim.NAdam({params}, lr=1e-3, foreach={foreach})",
}


def many_params_model(kind: str, rng: random.Random) -> Model:
    """A model of many small parameter tensors, each a few hundred numbers."""
    c = 10
    if kind == "deep_mlp":
        n, w = rng.choice((60, 80)), rng.choice((16, 24))
        return Model(kind, "DeepMLP", [
            f"self.stem = nn.Linear(32, {w})",
            f"self.blocks = nn.Sequential(*[nn.Sequential(nn.Linear({w}, {w}), nn.LayerNorm({w}), nn.ReLU())",
            f"                              for _ in range({n})])",
            f"self.head = nn.Linear({w}, {c})"], ["h = self.blocks(self.stem(x))"], w, c, 32, "(32, 32)")
    if kind == "param_list":
        n, w = rng.choice((100, 120)), rng.choice((16, 32))
        return Model(kind, "ScaledFeatures", [
            f"self.stem = nn.Linear(32, {w})",
            f"self.scales = nn.ParameterList([nn.Parameter(torch.ones({w})) for _ in range({n})])",
            f"self.shifts = nn.ParameterList([nn.Parameter(torch.zeros({w})) for _ in range({n})])",
            f"self.head = nn.Linear({w}, {c})"],
            ["h = self.stem(x)", "for scale, shift in zip(self.scales, self.shifts):",
             "    h = torch.tanh(h * scale + shift)"], w, c, 32, "(32, 32)")
    if kind == "deep_cnn":
        n, w = rng.choice((24, 32)), 8
        return Model(kind, "DeepConvNet", [
            f"self.stem = nn.Conv2d(3, {w}, 3, padding=1)",
            f"self.blocks = nn.Sequential(*[nn.Sequential(nn.Conv2d({w}, {w}, 3, padding=1), nn.BatchNorm2d({w}),",
            f"                                            nn.ReLU()) for _ in range({n})])",
            f"self.head = nn.Linear({w}, {c})"], ["h = self.blocks(self.stem(x)).mean(dim=(2, 3))"], w, c, 8,
            "(8, 3, 8, 8)")
    if kind == "rnn_stack":
        n, w = rng.choice((16, 20)), 16
        return Model(kind, "StackedGRU", [
            f"self.stem = nn.Linear(8, {w})",
            f"self.layers = nn.ModuleList([nn.GRU({w}, {w}, batch_first=True) for _ in range({n})])",
            f"self.norms = nn.ModuleList([nn.LayerNorm({w}) for _ in range({n})])",
            f"self.head = nn.Linear({w}, {c})"],
            ["h = self.stem(x)", "for layer, norm in zip(self.layers, self.norms):", "    h = norm(layer(h)[0])",
             "h = h.mean(dim=1)"], w, c, 16, "(16, 4, 8)")
    if kind == "deep_transformer":
        n, e = rng.choice((10, 12)), 16
        return Model(kind, "DeepTransformer", [
            f"self.embed = nn.Linear(8, {e})",
            f"layer = nn.TransformerEncoderLayer({e}, 2, {2 * e}, dropout=0.0, batch_first=True)",
            f"self.encoder = nn.TransformerEncoder(layer, {n}, enable_nested_tensor=False)",
            f"self.head = nn.Linear({e}, {c})"], ["h = self.encoder(self.embed(x)).mean(dim=1)"], e, c, 8, "(8, 6, 8)")
    raise ValueError(kind)


MANY_PARAMS = ("deep_mlp", "param_list", "deep_cnn", "rnn_stack", "deep_transformer")


class OptimizerLoop(Family):
    name = "optimizer_loop"
    rules = ("OPT001",)
    summary = "a for-loop optimizer (foreach=False) walks hundreds of small parameter tensors one by one"
    axes = {
        "optimizer": tuple(OPTIMIZERS),
        "how": ("literal", "const", "config", "argparse", "env", "dict", "param_groups"),
        "driver": ("plain", "while", "function", "loader", "eval_first", "accelerate"),
        "model": MANY_PARAMS,
    }

    def program(self, axes: dict[str, str], rng: random.Random, fixed: bool) -> Prog:
        m = many_params_model(axes["model"], rng)
        p = Prog("", m, driver=axes["driver"])
        value = "True" if fixed else "False"
        template = OPTIMIZERS[axes["optimizer"]]
        if axes["how"] == "param_groups":
            p.setup_early = ["def param_groups(model: nn.Module) -> list:",
                             "    decay = [q for q in model.parameters() if q.dim() > 1]",
                             "    rest = [q for q in model.parameters() if q.dim() <= 1]",
                             '    return [{"params": decay}, {"params": rest}]']
            p.optimizer = template.format(params="param_groups(model)", foreach=value)
        else:
            s = setting(axes["how"], "foreach", value, kind="bool")
            p.setup_early = p.settings(s)
            p.optimizer = template.format(params="model.parameters()", foreach=s.expr)
        return p


FAMILY = OptimizerLoop()
