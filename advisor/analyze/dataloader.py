"""How the training loop waits for data: time per step, workers, and the loop's line."""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze.common import call_site_of_rows, site
from advisor.analyze.findings import FactSpec
from advisor.analyze.registry import analyzer
from advisor.analyze.view import TraceView
from advisor.naming import PHASE_NAMES

PROVIDES = (
    FactSpec("dataloader.batches_per_step", "count", "DataLoader batches fetched per step"),
    FactSpec("dataloader.fetch_ms", "ms", "mean time the training loop waits for one batch"),
    FactSpec("dataloader.multiprocess", "bool", "batches come from worker processes (num_workers > 0)"),
    FactSpec("dataloader.site", "text", "the user's line that iterates the DataLoader"),
    FactSpec("dataloader.file", "text", "file of that line"),
    FactSpec("dataloader.line", "count", "line number of that line"),
    FactSpec("dataloader.dataset_site", "text", "the user's line inside dataset code that takes the most fetch time"),
)


def _is_loader_iter(name: str) -> bool:
    return name.startswith("enumerate(DataLoader)#")


def _fetches(view: TraceView) -> np.ndarray:
    """Rows of ``view.host``: the collector's data-loading ranges in the steps, else torch's DataLoader ones."""
    host = view.host
    ua = (host["step"] >= 0).to_numpy() & (host["cat"] == "user_annotation").to_numpy()
    ours = np.flatnonzero(ua & (host["name"] == PHASE_NAMES["dataloader"]).to_numpy())
    return ours if len(ours) else np.flatnonzero(ua & view.host_names(_is_loader_iter, bool))


@analyzer("dataloader", needs=("user_annotation",), provides=PROVIDES)
def dataloader(view: TraceView) -> dict[str, Any]:
    """Batches per step, mean fetch time, workers, and the line of the loop."""
    fetches = _fetches(view)
    if len(fetches) == 0:
        return {}
    host = view.host
    iters = view.host_names(_is_loader_iter, bool)
    multiprocess = view.host_names(lambda n: _is_loader_iter(n) and "MultiProcessing" in n, bool)
    durs = host["dur"].to_numpy()[fetches]
    out: dict[str, Any] = {
        "dataloader.batches_per_step": len(fetches) / max(view.step_count, 1),
        "dataloader.fetch_ms": float(durs.sum(dtype="float64") / len(durs)) / 1e6,
        "dataloader.multiprocess": bool(multiprocess.any()) if iters.any() else None,
    }
    where = call_site_of_rows(view, fetches)
    if where:
        out["dataloader.site"] = site(*where)
        out["dataloader.file"], out["dataloader.line"] = where[0], where[1]
    inner = host.loc[((host["phase"] == "dataloader") & host["op_top"] & (host["src_line"] >= 0)).to_numpy(),
                     ["src_file", "src_line", "src_func", "dur"]]
    if out.get("dataloader.line") is not None:
        inner = inner[~((inner["src_file"] == out["dataloader.file"]) & (inner["src_line"] == out["dataloader.line"]))]
    if len(inner):
        top = inner.groupby(["src_file", "src_line", "src_func"], observed=True)["dur"].sum().idxmax()
        out["dataloader.dataset_site"] = site(*top)
    return out
