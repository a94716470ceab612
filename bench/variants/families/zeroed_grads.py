"""Zeroed gradients: zero_grad(set_to_none=False), or zero_() by hand, on a big model every step (OPT002).

On a CPU the fix pays only where freed memory stays in the process (examples/zeroed_grads.py), so variant and
twin both run with glibc's thresholds raised (the family's env)."""

from __future__ import annotations

import random

from bench.variants.families.base import Family
from bench.variants.program import Model, Prog, setting

KEEP_MEMORY = {"MALLOC_TRIM_THRESHOLD_": "1000000000", "MALLOC_MMAP_THRESHOLD_": "100000000"}
RESET = '''\
def reset_grads(model: nn.Module) -> None:
    for q in model.parameters():
        if q.grad is not None:
{body}
'''


def big_model(kind: str, rng: random.Random) -> Model:
    """About 25 MB of parameters, small batches: the step is mostly passes over the parameters."""
    c = 10
    if kind == "wide_mlp":
        w, n = 1024, rng.choice((5, 6))
        return Model(kind, "WideMLP", [f"self.body = nn.Sequential(*[layer for _ in range({n})",
                                        f"                            for layer in (nn.Linear({w}, {w}), nn.ReLU())])",
                                        f"self.head = nn.Linear({w}, {c})"], ["h = self.body(x)"], w, c, 16,
                     f"(16, {w})")
    if kind == "wide_transformer":
        e = 512
        return Model(kind, "WideTransformer", [
            f"layer = nn.TransformerEncoderLayer({e}, 8, {4 * e}, dropout=0.0, batch_first=True)",
            "self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)",
            f"self.head = nn.Linear({e}, {c})"], ["h = self.encoder(x).mean(dim=1)"], e, c, 4, f"(4, 8, {e})")
    if kind == "wide_lstm":
        h = 384
        return Model(kind, "WideLSTM", [f"self.rnn = nn.LSTM({h}, {h}, num_layers=2, batch_first=True)",
                                        f"self.head = nn.Linear({h}, {c})"],
                     ["seq, _ = self.rnn(x)", "h = seq[:, -1]"], h, c, 4, f"(4, 4, {h})")
    if kind == "cnn_big_head":
        return Model(kind, "ConvBigHead", [
            "self.conv = nn.Conv2d(3, 16, 3, stride=2, padding=1)",
            "self.fc = nn.Sequential(nn.Flatten(), nn.Linear(16 * 16 * 16, 1024), nn.ReLU(),",
            "                        nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU())",
            f"self.head = nn.Linear(1024, {c})"], ["h = self.fc(torch.relu(self.conv(x)))"], 1024, c, 8,
            "(8, 3, 32, 32)")
    raise ValueError(kind)


class ZeroedGrads(Family):
    name = "zeroed_grads"
    rules = ("OPT002",)
    summary = "every gradient of a big model is zeroed in place each step, and backward adds into the zeros"
    axes = {
        "how": ("optimizer_zero_grad", "model_zero_grad", "hand_loop", "helper_detach", "config", "argparse",
                "env", "dict"),
        "when": ("before_forward", "after_step"),
        "driver": ("plain", "while", "function", "eval_first", "closure", "accelerate"),
        "model": ("wide_mlp", "wide_transformer", "wide_lstm", "cnn_big_head"),
    }

    def valid(self, axes: dict[str, str]) -> bool:
        # a closure zeroes inside itself, before its forward
        return axes["driver"] != "closure" or axes["when"] == "before_forward"

    def env(self, axes: dict[str, str], fixed: bool) -> dict[str, str]:
        return dict(KEEP_MEMORY)

    def program(self, axes: dict[str, str], rng: random.Random, fixed: bool) -> Prog:
        m = big_model(axes["model"], rng)
        p = Prog("", m, driver=axes["driver"], optimizer="torch.optim.SGD(model.parameters(), lr=1e-3)")
        how = axes["how"]
        none = "True" if fixed else "False"
        if how == "optimizer_zero_grad":
            zero = [f"optimizer.zero_grad(set_to_none={none})"]
        elif how == "model_zero_grad":
            zero = [f"model.zero_grad(set_to_none={none})"]
        elif how == "hand_loop":
            zero = ["for q in model.parameters():", "    if q.grad is not None:",
                    "        q.grad = None" if fixed else "        q.grad.zero_()"]
        elif how == "helper_detach":
            body = ["            q.grad = None"] if fixed else ["            q.grad.detach_()", "            q.grad.zero_()"]
            p.defs.append(RESET.format(body="\n".join(body)))
            zero = ["reset_grads(model)"]
        else:
            s = setting(how, "set_to_none", none, kind="bool")
            p.setup_early = p.settings(s)
            zero = [f"optimizer.zero_grad(set_to_none={s.expr})"]
        if axes["when"] == "after_step":
            p.zero, p.post = [], zero + p.post
        else:
            p.zero = zero
        if axes["driver"] == "closure":
            p.optimizer = "torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=1, history_size=2)"
        return p


FAMILY = ZeroedGrads()
