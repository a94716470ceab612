"""One module per problem family; ``NAMES`` lists them in the order tables show them."""

from __future__ import annotations

import importlib

from bench.variants.families.base import Family, Variant, pick

__all__ = ["NAMES", "Family", "Variant", "all_families", "family", "pick"]

NAMES = ("loops", "threads", "dataloader", "optimizer_loop", "closure", "inference", "layout", "zeroed_grads",
            "anomaly", "checkpoint", "eval_first", "worker_restarts", "memory_churn", "hand_update", "healthy")


def family(name: str) -> Family:
    if name not in NAMES:
        raise KeyError(f"no family {name!r}; the families are: {', '.join(NAMES)}")
    return importlib.import_module(f"bench.variants.families.{name}").FAMILY


def all_families() -> dict[str, Family]:
    return {name: family(name) for name in NAMES}
