"""DataLoader starvation: a slow __getitem__ (or collate) read in the training process, num_workers=0 (DL001)."""

from __future__ import annotations

import random

from bench.variants.families.base import Family
from bench.variants.program import MODELS, Prog, model, setting

DATASET = '''\
class SampleStore(Dataset):
    """Samples read one at a time{what}."""

    def __init__(self, n: int, classes: int{extra_arg}) -> None:
        self.x = torch.randn(n, *{shape})
        self.y = torch.randint(0, classes, (n,)){extra_init}

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
{body}
'''
SLOW = {
    "sleep": ("from storage", ["time.sleep({per_sample})  # the read's latency", "return self.x[i], self.y[i]"]),
    "python": ("and decoded in Python", ["checksum = 0", "for v in range({work}):",
                                          "    checksum = (checksum * 31 + v) % 1000003",
                                          "return self.x[i] + checksum * 0.0, self.y[i]"]),
    "numpy": ("and augmented with numpy", ["noise = np.random.default_rng(i).standard_normal({work} * 8)",
                                            "shift = float(np.sort(noise)[len(noise) // 2])",
                                            "return self.x[i] + shift * 0.0, self.y[i]"]),
    "transform": ("through a transform", ["return self.transform(self.x[i]), self.y[i]"]),
    "collate": ("and batched by a slow collate function", ["return self.x[i], self.y[i]"]),
}
TRANSFORM = '''\
def jitter(x: torch.Tensor) -> torch.Tensor:
    time.sleep({per_sample})  # decoding the sample
    return x + 0.01 * torch.randn_like(x)
'''
COLLATE = '''\
def collate_records(samples: list):
    time.sleep({per_batch})  # parsing the batch's records
    return default_collate(samples)
'''


class DataloaderStarvation(Family):
    name = "dataloader"
    rules = ("DL001",)
    summary = "each sample is slow to read and the DataLoader reads them in the training process"
    axes = {
        "slow": tuple(SLOW),
        "how": ("literal", "const", "config", "argparse", "env", "dict"),
        "driver": ("loader", "plain", "function", "eval_first", "closure", "accelerate", "lightning"),
        "model": MODELS,
    }

    def valid(self, axes: dict[str, str]) -> bool:
        return axes["driver"] != "lightning" or axes["model"] in ("mlp", "gru")

    def program(self, axes: dict[str, str], rng: random.Random, fixed: bool) -> Prog:
        m = model(axes["model"], rng)
        p = Prog("", m, driver=axes["driver"], feed="loader")
        p.imports += ["from torch.utils.data import DataLoader, Dataset"]
        data_ms = rng.choice((8, 12, 16))
        per_sample = round(data_ms / 1000 / m.batch, 6)
        what, body = SLOW[axes["slow"]]
        extra_arg = extra_init = ""
        if axes["slow"] == "transform":
            p.defs.append(TRANSFORM.format(per_sample=per_sample))
            extra_arg, extra_init = ", transform", "\n        self.transform = transform"
        if axes["slow"] == "numpy":
            p.imports.append("import numpy as np")
        shape = m.x_shape.strip("()").split(", ", 1)[1]
        p.defs.insert(0, DATASET.format(
            what=what, extra_arg=extra_arg, extra_init=extra_init, shape=f"({shape},)" if "," not in shape else f"({shape})",
            body="\n".join("        " + line.format(per_sample=per_sample, work=int(per_sample * 1e6 * 6))
                           for line in body)))
        workers = setting({"literal": "literal", "const": "const", "config": "config", "argparse": "argparse",
                           "env": "env", "dict": "dict"}[axes["how"]], "num_workers", "2" if fixed else "0")
        p.setup_early = p.settings(workers)
        args = f"{m.x_shape.strip('()').split(', ')[0]} * 8, {m.classes}" + (", jitter" if extra_arg else "")
        kwargs = ""
        if axes["slow"] == "collate":
            p.defs.append(COLLATE.format(per_batch=round(data_ms / 1000, 4)))
            p.imports.append("from torch.utils.data import default_collate")
            kwargs = ", collate_fn=collate_records"
        p.loader = [f"dataset = SampleStore({args})",
                    f"loader = DataLoader(dataset, batch_size={m.batch}, shuffle=True{kwargs},",
                    f"                    num_workers={workers.expr}, persistent_workers={workers.expr} > 0)"]
        if axes["driver"] == "closure":
            p.optimizer = "torch.optim.SGD(model.parameters(), lr=0.01)"
        return p


FAMILY = DataloaderStarvation()
