"""Per-sample Python loops: a few tiny operators per sample, thousands a step (CPU001)."""

from __future__ import annotations

import random

from bench.variants.families.base import Family
from bench.variants.program import MODELS, Prog, model

LOSS_LOOP = '''\
def per_sample_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    total = logits.new_zeros(())
    for i in range(logits.shape[0]):
        row = logits[i] - logits[i].max()
        total = total + (row.exp().sum().log() - row[targets[i]])
    return total / logits.shape[0]
'''
LOSS_FIXED = '''\
def per_sample_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits, targets)
'''
HELPER_LOOP = '''\
def margin_penalty(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    penalties = []
    for i in range(len(targets)):
        correct = scores[i, targets[i]]
        penalties.append(torch.relu(1.0 - correct + scores[i]).sum())
    return torch.stack(penalties).mean()
'''
HELPER_FIXED = '''\
def margin_penalty(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    correct = scores.gather(1, targets[:, None])
    return torch.relu(1.0 - correct + scores).sum(dim=1).mean()
'''
NESTED_LOOP = '''\
def smoothness(scores: torch.Tensor) -> torch.Tensor:
    total = scores.new_zeros(())
    for i in range(scores.shape[0]):
        for j in range(1, scores.shape[1], 5):
            total = total + (scores[i, j] - scores[i, j - 1]).abs()
    return total / scores.shape[0]
'''
NESTED_FIXED = '''\
def smoothness(scores: torch.Tensor) -> torch.Tensor:
    idx = torch.arange(1, scores.shape[1], 5)
    return (scores[:, idx] - scores[:, idx - 1]).abs().sum() / scores.shape[0]
'''
METHOD_LOOP = '''\
def normalize(self, h: torch.Tensor) -> torch.Tensor:
    rows = []
    for i in range(h.shape[0]):
        rows.append(h[i] / (h[i].norm() + 1e-6))
    return torch.stack(rows)
'''
METHOD_FIXED = '''\
def normalize(self, h: torch.Tensor) -> torch.Tensor:
    return h / (h.norm(dim=1, keepdim=True) + 1e-6)
'''
GATE_LOOP = '''\
class PerSampleGate(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gate = nn.Parameter(torch.ones(dim))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.stack([h[i] * torch.sigmoid(self.gate * h[i].mean()) for i in range(h.shape[0])])
'''
GATE_FIXED = '''\
class PerSampleGate(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gate = nn.Parameter(torch.ones(dim))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h * torch.sigmoid(self.gate * h.mean(dim=1, keepdim=True))
'''


class Loops(Family):
    name = "loops"
    rules = ("CPU001",)
    summary = "a per-sample Python loop makes a few tiny operators per sample, thousands a step"
    axes = {
        "where": ("loss_fn", "helper", "comprehension", "nested", "forward_method", "submodule"),
        "driver": ("plain", "while", "function", "loader", "eval_first", "closure", "accelerate", "lightning"),
        "model": MODELS,
    }

    def valid(self, axes: dict[str, str]) -> bool:
        # Lightning takes seconds to import: a few of its variants, on the cheaper models
        return axes["driver"] != "lightning" or axes["model"] in ("mlp", "gru")

    def program(self, axes: dict[str, str], rng: random.Random, fixed: bool) -> Prog:
        batch = 64 if axes["model"] in ("cnn", "transformer") else 128
        m = model(axes["model"], rng, batch=batch)
        p = Prog("", m, driver=axes["driver"])
        where = axes["where"]
        if where == "loss_fn":
            p.defs.append(LOSS_FIXED if fixed else LOSS_LOOP)
            p.loss = ["loss = per_sample_loss(out, y)"]
        elif where == "helper":
            p.defs.append(HELPER_FIXED if fixed else HELPER_LOOP)
            p.loss = ["loss = nn.functional.cross_entropy(out, y) + 0.1 * margin_penalty(out, y)"]
        elif where == "comprehension":
            p.loss = (["loss = nn.functional.cross_entropy(out, y)"] if fixed else
                      ["loss = torch.stack([nn.functional.cross_entropy(out[i:i + 1], y[i:i + 1])",
                       "                     for i in range(out.shape[0])]).mean()"])
        elif where == "nested":
            p.defs.append(NESTED_FIXED if fixed else NESTED_LOOP)
            p.loss = ["loss = nn.functional.cross_entropy(out, y) + 0.01 * smoothness(out)"]
        elif where == "forward_method":
            p.methods.append(METHOD_FIXED if fixed else METHOD_LOOP)
            p.feat = ["h = self.normalize(h)"]
        else:
            p.defs.append(GATE_FIXED if fixed else GATE_LOOP)
            m.init = [*m.init, f"self.gate = PerSampleGate({m.feat})"]
            p.feat = ["h = self.gate(h)"]
        if axes["driver"] == "closure":
            p.optimizer = "torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=1, history_size=5)"
        return p


FAMILY = Loops()
