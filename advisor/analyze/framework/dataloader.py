"""How the training loop waits for data: time per step, workers, the loop's line, and the step once loading overlaps.

``dataloader.remaining_ms`` models the step after the fix DL001 asks for: how far it stays above the
training alone. With batches loaded in the
training process (``num_workers=0``), the fix moves the loading into worker processes, one per core
(``dataloader.cores``: the machine's cores per training process, from run.json). They run beside the
training, so the step becomes the longest of

- the training alone, ``compute_ms`` (the step less its data wait);
- one step's loading spread over the workers, ``wait / cores``;
- all the CPU work of a step spread over the cores, ``(train_cpu + load_cpu) / cores``: the training's own
  CPU time is its operators' time on ``train_threads`` threads plus the rest of the step on one; the
  loading's is the wait times ``dataloader.fetch_cpu_ratio``, the process's CPU time during the fetches
  over their wall time (the collector times both, run.json ``dataloader_fetch``). Below 1, a fetch waits
  (storage, a network file system, a sleep) and leaves the core to the training; above 1, it computes on
  several threads.
  The trace cannot tell reading from computing inside a fetch, so without that measurement (a trace
  from elsewhere) the whole wait counts as CPU work.

Each batch a worker loads then reaches the training process through shared memory, which costs that
process a fixed time per batch, ``dataloader.handover_ms``, that the collector measures on the machine with
batches of the loop's own tensors (run.json ``dataloader_handover``, :mod:`advisor.collect.worker_handover`):
the training's part becomes ``compute + batches * handover``, in the first and last terms alike. Where that
exceeds the wait, workers cost more than they save (an in-memory ``TensorDataset`` of 64-row batches: 0.8 ms
a fetch in process, 1.7-2.0 ms a hand-over) and what is left is more than the wait.

On two cores with two intra-op threads that keeps about half the wait: the workers' work takes the cores
from the training. Without the cores recorded (a trace from elsewhere), the training alone. With workers
already on, a batch that was ready is handed over in the shortest fetch seen (``ready_fetch_ms``), so the
step once the workers keep ahead is the step less the wait beyond that.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from advisor.analyze.findings import FactSpec
from advisor.analyze.framework.per_step import NS_PER_MS, call_site_of_rows, site, step_ms
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer
from advisor.naming import PHASE_NAMES

PROVIDES = (
    FactSpec("dataloader.batches_per_step", "count", "DataLoader batches fetched per step"),
    FactSpec("dataloader.fetch_ms", "ms", "mean time the training loop waits for one batch"),
    FactSpec("dataloader.multiprocess", "bool", "batches come from worker processes (num_workers > 0)"),
    FactSpec("dataloader.site", "text", "the user's line that iterates the DataLoader"),
    FactSpec("dataloader.file", "text", "file of that line"),
    FactSpec("dataloader.line", "count", "line number of that line"),
    FactSpec("dataloader.dataset_site", "text", "the user's line inside dataset code that takes the most fetch time"),
    FactSpec("dataloader.ready_fetch_ms", "ms", "the shortest fetch: handing over a batch that was ready"),
    FactSpec("dataloader.cores", "count", "CPU cores per training process, shared by the loading and the training"),
    FactSpec("dataloader.train_threads", "count",
             "threads the training's operators run on (torch intra-op threads, at most the cores; 1 on a GPU)"),
    FactSpec("dataloader.compute_ms", "ms", "the step less its data wait: the training's own time per step"),
    FactSpec("dataloader.fetch_cpu_ratio", "ratio",
             "the training process's CPU time during its DataLoader fetches over their wall time, as the collector "
             "timed them: below 1 the fetches waited (storage, a network file system, a sleep), above 1 they "
             "computed on several threads"),
    FactSpec("dataloader.handover_ms", "ms",
             "the training process's time to take one ready batch of the loop's tensors from a worker process, "
             "measured on this machine by the collector (where the loop fetched in process)"),
    FactSpec("dataloader.remaining_ms", "ms",
             "data loading's cost per step once it keeps ahead of the training (workers beside it): how far the "
             "step stays above the training alone"),
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
    out.update(_overlap(view, fetches, bool(out["dataloader.multiprocess"])))
    inner = host.loc[((host["phase"] == "dataloader") & host["op_top"] & (host["src_line"] >= 0)).to_numpy(),
                     ["src_file", "src_line", "src_func", "dur"]]
    if out.get("dataloader.line") is not None:
        inner = inner[~((inner["src_file"] == out["dataloader.file"]) & (inner["src_line"] == out["dataloader.line"]))]
    if len(inner):
        top = inner.groupby(["src_file", "src_line", "src_func"], observed=True)["dur"].sum().idxmax()
        out["dataloader.dataset_site"] = site(*top)
    return out


def _cores(view: TraceView) -> tuple[int | None, int]:
    """CPU cores per training process, and the intra-op threads at capture, from run.json (None, 1 unknown)."""
    meta = view.run_meta
    cores = (meta.get("environment") or {}).get("cpu_count")
    if not isinstance(cores, int) or cores < 1:
        return None, 1
    per_process = max(cores // max(int(meta.get("nproc_per_node") or 1), 1), 1)
    threads = (meta.get("threads_at_capture") or (meta.get("environment") or {}).get("threads") or {})
    torch_threads = threads.get("torch_num_threads")
    return per_process, min(torch_threads, per_process) if isinstance(torch_threads, int) and torch_threads > 0 else 1


def _overlap(view: TraceView, fetches: np.ndarray, multiprocess: bool) -> dict[str, Any]:
    """What loading still costs once it keeps ahead of the training (see the module's docstring)."""
    host = view.host
    steps = max(view.step_count, 1)
    durs = host["dur"].to_numpy()[fetches]
    step = step_ms(view)
    wait = float(durs.sum(dtype="float64")) / steps / NS_PER_MS
    compute = max(step - wait, 0.0)
    ready = float(durs.min()) / NS_PER_MS
    out: dict[str, Any] = {"dataloader.ready_fetch_ms": ready, "dataloader.compute_ms": compute}
    if multiprocess:
        out["dataloader.remaining_ms"] = min(ready * len(fetches) / steps, wait)
        return out
    cores, threads = _cores(view)
    if cores is None:
        out["dataloader.remaining_ms"] = 0.0
        return out
    threads = 1 if view.trace.has_gpu else threads
    on_main = (host["tid"] == view.main_tid).to_numpy() & (host["step"] >= 0).to_numpy() & host["op_top"].to_numpy()
    op_ms = float(host["dur"].to_numpy()[on_main & (host["phase"] != "dataloader").to_numpy()].sum()) / steps / NS_PER_MS
    op_ms = min(op_ms, compute)
    train_cpu = threads * op_ms + (compute - op_ms)
    cpu_ratio = _fetch_cpu_ratio(view.run_meta.get("dataloader_fetch"))
    if cpu_ratio is not None:
        out["dataloader.fetch_cpu_ratio"] = cpu_ratio
    load_cpu = wait * (1.0 if cpu_ratio is None else cpu_ratio)
    handover = _handover_ms(view.run_meta.get("dataloader_handover"))
    taking = 0.0
    if handover is not None:
        out["dataloader.handover_ms"] = handover
        taking = handover * len(fetches) / steps
    step_after = max(compute + taking, wait / cores, (train_cpu + taking + load_cpu) / cores)
    out.update({"dataloader.cores": cores, "dataloader.train_threads": threads,
                "dataloader.remaining_ms": step_after - compute})
    return out


def _handover_ms(probe: Any) -> float | None:
    """The collector's measured hand-over of a ready batch (run.json ``dataloader_handover``), in ms; None
    where it measured none (workers already on, a trace from elsewhere, a probe that could not start one)."""
    ms = probe.get("ms") if isinstance(probe, dict) else None
    if not isinstance(ms, (int, float)) or isinstance(ms, bool) or not ms >= 0:
        return None
    return float(ms)


def _fetch_cpu_ratio(timed: Any) -> float | None:
    """CPU time over wall time of the fetches the collector timed (run.json ``dataloader_fetch``), at least 0;
    None when it timed none."""
    if not isinstance(timed, dict):
        return None
    wall, cpu = timed.get("wall_ms"), timed.get("cpu_ms")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (wall, cpu)) or wall <= 0:
        return None
    return max(cpu / wall, 0.0)
