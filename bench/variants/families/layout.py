"""Layout copies: .contiguous() of transposes and permutes in every step (CPU002)."""

from __future__ import annotations

import random

from bench.variants.families.base import Family
from bench.variants.program import Model, Prog

MIXER = '''\
class MixerNet(nn.Module):
    """Token mixing across the sequence, then channel mixing, in {blocks} blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.norms = nn.ModuleList([nn.LayerNorm({c}) for _ in range({blocks})])
        self.token_mix = nn.ModuleList([nn.Linear({t}, {t}) for _ in range({blocks})])
        self.channel_mix = nn.ModuleList([nn.Linear({c}, {c}) for _ in range({blocks})])
        self.head = nn.Linear({c}, {classes})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for norm, token_mix, channel_mix in zip(self.norms, self.token_mix, self.channel_mix):
            h = norm(x)
{mix}
            x = x + channel_mix(torch.relu(h))
        return self.head(x.mean(dim=1))
'''
MIX_SLOW = ["h = h.transpose(1, 2).contiguous()", "h = token_mix(h)", "h = h.transpose(1, 2).contiguous()"]
MIX_FIXED = ["h = torch.matmul(token_mix.weight, h) + token_mix.bias[:, None]"]
HELPER_SLOW = '''\
def mix_tokens(layer: nn.Linear, h: torch.Tensor) -> torch.Tensor:
    """Applies a Linear over the sequence dimension of (batch, tokens, channels)."""
    return layer(h.transpose(1, 2).contiguous()).transpose(1, 2).contiguous()
'''
HELPER_FIXED = '''\
def mix_tokens(layer: nn.Linear, h: torch.Tensor) -> torch.Tensor:
    """Applies a Linear over the sequence dimension of (batch, tokens, channels)."""
    return torch.matmul(layer.weight, h) + layer.bias[:, None]
'''
POINTWISE = '''\
class PointwiseConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, {w}, 3, padding=1)
        self.pointwise = nn.Linear({w}, {w})
        self.conv2 = nn.Conv2d({w}, {w}, 3, padding=1)
        self.head = nn.Linear({w}, {classes})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x))
{mix}
        h = torch.relu(self.conv2(torch.relu(h)))
        return self.head(h.mean(dim=(2, 3)))
'''
POINT_SLOW = ["h = h.permute(0, 2, 3, 1).contiguous()  # channels last for the Linear",
              "h = self.pointwise(h)", "h = h.permute(0, 3, 1, 2).contiguous()"]
POINT_FIXED = ["h = nn.functional.conv2d(h, self.pointwise.weight[:, :, None, None], self.pointwise.bias)"]
TIME_MAJOR = '''\
class TimeMajorLSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear({c}, {c})
        self.rnn = nn.LSTM({c}, {h})
        self.head = nn.Linear({h}, {classes})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.proj(x))
{mix}
'''
TIME_SLOW = ["seq, _ = self.rnn(x.transpose(0, 1).contiguous())  # (tokens, batch, features)",
             "seq = seq.transpose(0, 1).contiguous()", "return self.head(seq.mean(dim=1))"]
TIME_FIXED = ["seq, _ = self.rnn(x.transpose(0, 1))", "return self.head(seq.mean(dim=0))"]
POOL = '''\
class PooledProjection(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear({c}, {c})
        self.head = nn.Linear({c}, {classes})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.proj(x)).amax(dim=1))
'''


class Layout(Family):
    name = "layout"
    rules = ("CPU002",)
    summary = "tensors are transposed and copied to a contiguous layout in every step"
    axes = {
        "where": ("mixer_forward", "mixer_helper", "channels_last", "time_major_rnn", "channels_first_data"),
        "driver": ("plain", "while", "function", "loader", "eval_first", "closure", "accelerate"),
    }

    def program(self, axes: dict[str, str], rng: random.Random, fixed: bool) -> Prog:
        classes = 10
        where = axes["where"]
        if where in ("mixer_forward", "mixer_helper"):
            b, t, c, blocks = rng.choice((128, 192)), 16, 64, rng.choice((3, 4))
            m = Model("mixer", "MixerNet", [], [], c, classes, b, f"({b}, {t}, {c})")
            if where == "mixer_forward":
                mix = MIX_FIXED if fixed else MIX_SLOW
            else:
                mix = ["h = mix_tokens(token_mix, h)"]
            src = MIXER.format(c=c, t=t, blocks=blocks, classes=classes,
                               mix="\n".join(" " * 12 + line for line in mix))
            p = Prog("", m, driver=axes["driver"], class_src=src)
            if where == "mixer_helper":
                p.defs.append(HELPER_FIXED if fixed else HELPER_SLOW)
        elif where == "channels_last":
            b, s, w = rng.choice((16, 24)), 16, 32
            m = Model("cnn", "PointwiseConvNet", [], [], w, classes, b, f"({b}, 3, {s}, {s})")
            mix = POINT_FIXED if fixed else POINT_SLOW
            p = Prog("", m, driver=axes["driver"], class_src=POINTWISE.format(
                w=w, classes=classes, mix="\n".join(" " * 8 + line for line in mix)))
        elif where == "time_major_rnn":
            b, t, c, h = rng.choice((64, 96)), 24, 64, 32
            m = Model("lstm", "TimeMajorLSTM", [], [], h, classes, b, f"({b}, {t}, {c})")
            mix = TIME_FIXED if fixed else TIME_SLOW
            p = Prog("", m, driver=axes["driver"], class_src=TIME_MAJOR.format(
                c=c, h=h, classes=classes, mix="\n".join(" " * 8 + line for line in mix)))
        else:  # recordings stored (batch, channels, time), the model wants (batch, time, channels)
            b, t, c = rng.choice((64, 128)), 64, 64
            m = Model("pool", "PooledProjection", [], [], c, classes, b, f"({b}, {c}, {t})")
            p = Prog("", m, driver=axes["driver"], class_src=POOL.format(c=c, classes=classes))
            if fixed:
                p.after_batches = ["batches = [(x.transpose(1, 2).contiguous(), y) for x, y in batches]  # once"]
            else:
                p.out = ["x = x.transpose(1, 2).contiguous()", "out = model(x)"]
        if axes["driver"] == "closure":
            p.optimizer = "torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=1, history_size=5)"
        return p


FAMILY = Layout()
