"""DataLoader workers restarted every epoch: persistent_workers=False with epochs of a few batches (DL002)."""

from __future__ import annotations

import random

from bench.variants.families.base import Family
from bench.variants.program import MODELS, Prog, model, setting

DATASETS = {
    "tensor": ([], "TensorDataset(inputs, labels)"),
    "mapped": (['''\
class Records(Dataset):
    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor) -> None:
        self.inputs, self.labels = inputs, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.inputs[i] * 0.5, self.labels[i]
'''], "Records(inputs, labels)"),
    "lazy_table": (['''\
class Vocabulary(Dataset):
    """Looks each sample up in a table its worker builds on first use."""

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor) -> None:
        self.inputs, self.labels = inputs, labels
        self.table = None

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        if self.table is None:
            self.table = torch.randperm(200_000).sort().indices.float() / 200_000
        return self.inputs[i] + self.table[i], self.labels[i]
'''], "Vocabulary(inputs, labels)"),
    "worker_init": (['''\
def seed_worker(worker_id: int) -> None:
    torch.manual_seed(1000 + worker_id)
    torch.randn(300_000).sort()  # the worker's own set-up
'''], "TensorDataset(inputs, labels)"),
}


class WorkerRestarts(Family):
    name = "worker_restarts"
    rules = ("DL002",)
    summary = "DataLoader workers start afresh every epoch, and an epoch is a few batches"
    axes = {
        "dataset": tuple(DATASETS),
        "how": ("default", "literal", "config", "argparse", "env", "dict"),
        "loop": ("epochs", "next_batch", "function", "accelerate"),
        "model": MODELS,
    }

    def program(self, axes: dict[str, str], rng: random.Random, fixed: bool) -> Prog:
        m = model(axes["model"], rng)
        batches_per_epoch = rng.choice((4, 5))
        driver = {"epochs": "loader", "next_batch": "plain", "function": "function", "accelerate": "accelerate"}
        p = Prog("", m, driver=driver[axes["loop"]], feed="loader")
        defs, ctor = DATASETS[axes["dataset"]]
        p.defs += defs
        p.imports += ["from torch.utils.data import DataLoader, Dataset, TensorDataset"]
        kwargs = ", worker_init_fn=seed_worker" if axes["dataset"] == "worker_init" else ""
        if axes["how"] == "default":
            persistent = ", persistent_workers=True" if fixed else ""
        else:
            s = setting(axes["how"], "persistent_workers", "True" if fixed else "False", kind="bool")
            p.setup_early = p.settings(s)
            persistent = f", persistent_workers={s.expr}"
        shape = m.x_shape.strip("()").split(", ", 1)[1]
        p.loader = [f"inputs = torch.randn({m.batch * batches_per_epoch}, {shape})",
                    f"labels = torch.randint(0, {m.classes}, ({m.batch * batches_per_epoch},))",
                    f"loader = DataLoader({ctor}, batch_size={m.batch}, shuffle=True, num_workers=2{persistent}{kwargs})"]
        return p


FAMILY = WorkerRestarts()
