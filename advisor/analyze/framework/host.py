"""The host's configuration as the run had it: threads against cores, and debugging APIs left on.

Both read the run metadata the collector wrote (``run.json``: the thread
settings, cores, DataLoader workers, debugging APIs and the probes of
:mod:`advisor.collect.environment`) together with the trace. A trace analysed
without its run directory has no such metadata, and these facts are absent
(their rules are not applicable).

Threads. An operator that runs on the intra-op pool (a parallel region) needs
every thread of the pool to get a core before it can finish. When the process's
threads, the threads of the other ranks on the machine and the busy DataLoader
workers together want more cores than there are, the pool's threads spin,
waiting for one another, and each parallel region waits for the scheduler to
hand a core over. The collector times one small parallel operator when the
recording starts and after every optimizer step of the window
(:data:`~advisor.naming.POOL_PROBE_RANGE`): tens of microseconds normally, a
scheduler time slice (milliseconds) when the pool waits. The trace's own small
operators are probes too: one whose own time is under 0.1 ms in most calls (a
ReLU, an in-place add) that once took milliseconds waited for the scheduler,
and where two kinds or more did, the median of their waits stands for one (on two ranks of
examples/thread_oversubscription.py, one run in six had the collector's probes
land where the other rank left the cores free, while its ReLUs took 7.8 ms).
The longest of those says whether the pool waited; the operators of the steps
with a millisecond or more of their own time are then the ones that waited (a
parallel region waits once for the pool to start and once at its end, so each
counts up to two of the longest waits). Their own time includes their work, so
the estimate overstates the gain by that. These ``host.pool_*`` facts are the
first rank's; :mod:`advisor.analyze.ranks.pool_waits` measures every rank's
trace the same way (:func:`pool_wait_figures`), since which rank the scheduler
starves changes from run to run and the others wait for it.

Anomaly detection. With ``torch.autograd.set_detect_anomaly(True)`` autograd
saves the Python stack of every node it records in the forward pass and checks
every output of every node in the backward pass for NaN. The checks are
operators in the trace (``aten::isnan``, ``aten::_is_any_true`` and
``aten::item`` under each ``autograd::engine::evaluate_function``), and the
engine's own time per node grows with them. The stack captures are not
operators; they sit in the own time of the forward operators that record a
node (see :func:`_forward_captures_ms`). Without view operators to measure the
cheapest capture on, the collector's own timing of one node (moved to the
forward pass's stack depth) stands in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze.findings import FactSpec
from advisor.analyze.framework.per_step import NS_PER_MS, site, step_ms
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer
from advisor.naming import POOL_PROBE_RANGE

__all__ = ["capture_settings", "debug_apis", "host_threads", "pool_wait_figures"]

THREAD_FACTS = (
    FactSpec("host.cores", "count", "cores the training process may run on (its CPU affinity) when the recording began"),
    FactSpec("host.torch_threads", "count", "intra-op threads of the training process (torch.get_num_threads())"),
    FactSpec("host.interop_threads", "count", "inter-op threads of the training process"),
    FactSpec("host.local_ranks", "count", "training processes (ranks) on this machine"),
    FactSpec("host.ranks_threads", "count", "intra-op threads of all the ranks on this machine together"),
    FactSpec("host.dataloader_workers", "count", "DataLoader worker processes alive when the recording began"),
    FactSpec("host.workers_busy_cores", "ratio", "cores the DataLoader workers kept busy, on average, during the recording"),
    FactSpec("host.workers_wanted_cores", "ratio", "cores the DataLoader workers wanted: running, or runnable and waiting "
                                                   "for a core (busy_cores where the kernel does not say)"),
    FactSpec("host.worker_busy_share", "fraction", "workers_wanted_cores per worker: 1 when no worker ever waits for "
                                                   "work (CPU-bound), near 0 when they mostly wait (for storage, say)"),
    FactSpec("host.cpu_demand", "ratio", "cores the run wants at once: every rank's intra-op threads plus the cores the "
                                         "workers want"),
    FactSpec("host.demand_excess", "ratio", "cpu_demand minus the usable cores (above 0: more threads than cores)"),
    FactSpec("host.load_average", "ratio", "the machine's 1-minute load average when the recording began (all processes)"),
    FactSpec("host.parallel_region_ms", "ms", "the longest time of one small operator on the intra-op pool (tens of us "
                                              "with free cores): the collector's probe, timed when the recording began "
                                              "and after each step, or the typical wait of the trace's small "
                                              "operators (own time under 0.1 ms in most calls) that took a "
                                              "millisecond or more once"),
    FactSpec("host.pool_waits_per_step", "count", "operators per step with a millisecond or more of their own time"),
    FactSpec("host.pool_wait_ms", "ms", "their own time per step, at most two parallel_region_ms each"),
    FactSpec("host.pool_wait_share", "fraction", "pool_wait_ms as a share of the step"),
    FactSpec("host.threads_text", "text", "the thread settings in words (threads, ranks, workers, cores)"),
    FactSpec("host.threads_site", "text", "the user's line that last called torch.set_num_threads"),
    FactSpec("host.allocator", "text", "the training process's host allocator: glibc, jemalloc, tcmalloc or mimalloc"),
    FactSpec("host.allocator_keeps_memory", "bool", "whether that allocator keeps freed memory for the next "
             "allocation (jemalloc, tcmalloc, mimalloc, or glibc with MALLOC_TRIM_THRESHOLD_ and "
             "MALLOC_MMAP_THRESHOLD_ set); glibc's defaults give large freed blocks back to the system"),
    FactSpec("host.allocator_text", "text", "what was seen of the allocator, in words"),
)

DEBUG_FACTS = (
    FactSpec("debug.anomaly_detection", "bool", "autograd anomaly detection was on when the recording began"),
    FactSpec("debug.apis_on", "text", "the debugging APIs and variables that were on, in words ('' when none)"),
    FactSpec("debug.cuda_launch_blocking", "bool", "CUDA_LAUNCH_BLOCKING=1: every kernel launch waits for the kernel"),
    FactSpec("debug.deterministic_algorithms", "bool", "torch.use_deterministic_algorithms(True) was on"),
    FactSpec("debug.anomaly_site", "text", "the user's line that last switched anomaly detection on"),
    FactSpec("anomaly.nodes_per_step", "count", "autograd nodes evaluated per step (each is also recorded in the forward pass)"),
    FactSpec("anomaly.nan_check_ms", "ms", "time per step of the NaN checks of the backward outputs and of the engine's own work per node"),
    FactSpec("anomaly.stack_us", "us", "time to record one node with its stack capture, at the forward pass's stack depth"),
    FactSpec("anomaly.stack_ms", "ms", "nodes per step times stack_us: anomaly mode's forward cost per step"),
    FactSpec("anomaly.ms", "ms", "anomaly mode's cost per step: backward checks plus forward stack captures"),
    FactSpec("anomaly.share", "fraction", "anomaly.ms as a share of the step"),
)

_EVALUATE = "autograd::engine::evaluate_function: "
#: an operator's own time from which, while the pool waits for cores, it counts as having waited
_WAITED_MS = 1.0
#: a small operator, as a probe of the pool: median own time under this (ms), at least this many calls
_SMALL_OP_MS = 0.1
_SMALL_OP_CALLS = 5
#: how many kinds of small operator must have waited a millisecond before their waits count (three profiled
#: steps of examples/thread_oversubscription.py had two in one run of six)
_SMALL_OPS_WAITED = 2
#: the operators of anomaly mode's NaN check of each backward output: isnan(x)._is_any_true().item()
_NAN_CHECKS = ("aten::isnan", "aten::_is_any_true", "aten::item")
#: what a stack capture costs beyond its frames, in frames (see _node_us_in_forward)
_BASE_FRAMES = 10
#: operators that only make a view: with autograd, their own time is dispatch plus recording the node
_VIEW_OPS = frozenset({
    "aten::t", "aten::transpose", "aten::permute", "aten::view", "aten::_unsafe_view", "aten::expand",
    "aten::unsqueeze", "aten::squeeze", "aten::select", "aten::slice", "aten::split", "aten::narrow",
    "aten::detach", "aten::alias", "aten::as_strided", "aten::unflatten",
})
_MIN_SAMPLES = 5


def capture_settings(view: TraceView) -> dict[str, Any]:
    """What the collector recorded when the recording began (rank 0's), or {} without run metadata."""
    settings = view.run_meta.get("threads_at_capture")
    return settings if isinstance(settings, dict) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@analyzer("host_threads", needs=("cpu_op",), provides=THREAD_FACTS)
def host_threads(view: TraceView) -> dict[str, Any]:
    """Threads of the ranks and busy workers against the usable cores, and the time parallel operators waited."""
    at = capture_settings(view)
    threads, cores = _number(at.get("torch_num_threads")), _number(at.get("usable_cores"))
    if threads is None or cores is None:
        return {}
    ranks = _local_ranks(view.run_meta, at)
    ranks_threads = _ranks_threads(view.run_meta, threads, ranks)
    end = (view.run_meta.get("environment") or {}).get("threads") or {}
    busy = _number(end.get("workers_busy_cores")) or 0.0
    wanted = _number(end.get("workers_wanted_cores"))
    wanted = busy if wanted is None else wanted
    demand = ranks_threads + wanted
    workers = int(at.get("dataloader_workers") or 0)
    out: dict[str, Any] = {
        "host.cores": int(cores), "host.torch_threads": int(threads),
        "host.interop_threads": at.get("torch_num_interop_threads"),
        "host.local_ranks": ranks, "host.ranks_threads": int(ranks_threads), "host.dataloader_workers": workers,
        "host.workers_busy_cores": round(busy, 3), "host.workers_wanted_cores": round(wanted, 3),
        "host.worker_busy_share": round(min(1.0, wanted / workers), 3) if workers and end else None,
        "host.cpu_demand": round(demand, 3),
        "host.demand_excess": round(demand - cores, 3), "host.load_average": _number(at.get("load_average")),
        "host.threads_text": _threads_text(int(threads), ranks, workers, wanted, int(cores)),
    }
    out["host.threads_site"] = _called_at(view, "set_num_threads_at")
    allocator = at.get("allocator")
    if isinstance(allocator, dict):
        out.update({"host.allocator": allocator.get("name"),
                    "host.allocator_keeps_memory": bool(allocator.get("keeps_freed_memory")),
                    "host.allocator_text": allocator.get("how")})
    capture_us = _number(at.get("parallel_region_us"))
    out.update(pool_wait_figures(view, capture_us / 1e3 if capture_us is not None else None))
    return out


def pool_wait_figures(view: TraceView, capture_probe_ms: float | None = None) -> dict[str, Any]:
    """``host.parallel_region_ms`` and the pool waits of one trace (the ``host.pool_*`` facts), from its probe
    ranges, its small operators and ``capture_probe_ms`` (the collector's probe as the recording began, which only
    the first rank's run metadata holds); {} where the trace has no probe of the pool (the collector did not run
    with the pool on)."""
    probes = list(_ranges_ms(view, POOL_PROBE_RANGE))
    if capture_probe_ms is not None:
        probes.append(capture_probe_ms)
    if not probes:
        return {}
    ops = _step_ops(view)
    return _pool_waits(view, float(max([*probes, _small_op_wait_ms(view, ops)])), ops)


def _step_ops(view: TraceView) -> np.ndarray:
    """The operators inside the steps, less the probe's own."""
    host = view.host
    ops = ((host["cat"] == "cpu_op") & (host["step"] >= 0)).to_numpy()
    parent = host["parent"].to_numpy()
    probe = view.host_names(lambda n: n == POOL_PROBE_RANGE, bool)
    return ops & ~np.where(parent >= 0, probe[np.maximum(parent, 0)], False)


def _small_op_wait_ms(view: TraceView, ops: np.ndarray) -> float:
    """A typical wait of the trace's small operators (ms): for each operator called at least five times in the
    window whose median own time is under 0.1 ms, and under a millisecond in three calls of four, its longest
    own time beyond its median; the median of those that reach a millisecond, where at least two operators
    do (0 otherwise). A wait for a core hits every kind of operator; one kind that is sometimes long (a copy
    that is small in most calls and large in a few) is doing work, and the median keeps it from setting the
    figure. ``ops``: the rows of :func:`_step_ops`."""
    if not ops.any():
        return 0.0
    own = pd.Series(view.host["self_ns"].to_numpy()[ops] / NS_PER_MS)
    by_name = own.groupby(view.host["name"].to_numpy()[ops], observed=True)
    stats = pd.DataFrame({"median": by_name.median(), "p75": by_name.quantile(0.75), "max": by_name.max(),
                          "calls": by_name.size()})
    small = stats[(stats["calls"] >= _SMALL_OP_CALLS) & (stats["median"] < _SMALL_OP_MS) & (stats["p75"] < _WAITED_MS)]
    excess = (small["max"] - small["median"]).to_numpy()
    excess = excess[excess >= _WAITED_MS]
    return float(np.median(excess)) if len(excess) >= _SMALL_OPS_WAITED else 0.0


def _ranges_ms(view: TraceView, name: str) -> np.ndarray:
    host = view.host
    rows = ((host["step"] >= 0) & (host["name"] == name)).to_numpy()
    return host["dur"].to_numpy()[rows] / NS_PER_MS


def _called_at(view: TraceView, key: str) -> str | None:
    """The user's line the collector noted for a call (``set_num_threads_at``, ``anomaly_on_at``)."""
    where = capture_settings(view).get(key)
    if not (isinstance(where, list) and len(where) == 3):
        return None
    return site(_shown_path(str(where[0]), view.run_meta), int(where[1]), str(where[2])) or None


def _shown_path(path: str, meta: Mapping[str, Any]) -> str:
    """A path relative to the first source root it lies in, as the trace's own call sites are shown."""
    for root in meta.get("source_roots") or []:
        relative = os.path.relpath(path, root)
        if not relative.startswith(".."):
            return relative
    return path


def _local_ranks(meta: Mapping[str, Any], at: Mapping[str, Any]) -> int:
    for value in (meta.get("nproc_per_node"), at.get("LOCAL_WORLD_SIZE")):
        try:
            if value is not None and int(value) >= 1:
                return int(value)
        except ValueError:
            continue
    return 1


def _ranks_threads(meta: Mapping[str, Any], threads: float, ranks: int) -> float:
    """Every local rank's intra-op threads; ranks that left no figure are taken to have this rank's."""
    recorded = [_number((r.get("threads_at_capture") or {}).get("torch_num_threads"))
                for r in meta.get("ranks") or [] if isinstance(r, dict)]
    known = [t for t in recorded if t is not None][:ranks]
    return sum(known) + threads * (ranks - len(known))


def _threads_text(threads: int, ranks: int, workers: int, wanted: float, cores: int) -> str:
    who = f"each of {ranks} ranks runs {threads}" if ranks > 1 else f"the training process runs {threads}"
    text = f"{who} intra-op thread{'s' if threads != 1 else ''}"
    if workers:
        text += f", and {workers} DataLoader worker{'s' if workers != 1 else ''} want {wanted:.1f} cores"
    return f"{text}, on {cores} usable core{'s' if cores != 1 else ''}"


def _pool_waits(view: TraceView, wait_ms: float, ops: np.ndarray) -> dict[str, Any]:
    """The operators of the steps that took a millisecond or more of their own, each counted up to two
    pool waits: with the pool waiting for cores, those are the parallel ones, and most of their time
    is the wait (on two ranks of examples/thread_oversubscription.py, 7% more than the measured gain
    in the median of 12 runs)."""
    host = view.host
    own_ms = host["self_ns"].to_numpy() / NS_PER_MS
    waited = ops & (own_ms >= _WAITED_MS)
    steps = max(view.step_count, 1)
    total = float(np.minimum(own_ms[waited], 2 * wait_ms).sum()) / steps
    step = step_ms(view)
    return {"host.parallel_region_ms": round(wait_ms, 4), "host.pool_waits_per_step": round(int(waited.sum()) / steps, 2),
            "host.pool_wait_ms": round(total, 3), "host.pool_wait_share": round(total / step, 4) if step else None}


@analyzer("debug_apis", needs=("cpu_op",), provides=DEBUG_FACTS)
def debug_apis(view: TraceView) -> dict[str, Any]:
    """Which debugging APIs were on, and what anomaly detection costs per step."""
    debug = capture_settings(view).get("debug")
    if not isinstance(debug, dict):
        return {}
    anomaly = bool(debug.get("anomaly_detection"))
    out: dict[str, Any] = {
        "debug.anomaly_detection": anomaly,
        "debug.apis_on": ", ".join(_apis_on(debug)),
        "debug.cuda_launch_blocking": str(debug.get("CUDA_LAUNCH_BLOCKING", "0")).strip() not in ("", "0"),
        "debug.deterministic_algorithms": bool(debug.get("deterministic_algorithms")),
        "debug.anomaly_site": _called_at(view, "anomaly_on_at") if anomaly else None,
    }
    if anomaly:
        out.update(_anomaly_cost(view, capture_settings(view).get("anomaly_node")))
    return out


def _apis_on(debug: Mapping[str, Any]) -> list[str]:
    words = {"anomaly_detection": "anomaly detection", "deterministic_algorithms": "deterministic algorithms",
             "cudnn_deterministic": "cudnn.deterministic"}
    on = [text for key, text in words.items() if debug.get(key)]
    if debug.get("cuda_sync_debug_mode"):
        on.append(f"CUDA sync debug mode {debug['cuda_sync_debug_mode']}")
    on += [f"{k}={v}" for k, v in debug.items() if k.isupper() and str(v).strip() not in ("", "0")]
    return on


def _anomaly_cost(view: TraceView, probe: Any) -> dict[str, Any]:
    host = view.host
    in_steps = (host["step"] >= 0).to_numpy()
    evaluate = in_steps & view.host_names(lambda n: n.startswith(_EVALUATE), bool)
    parent = host["parent"].to_numpy()
    under_node = np.zeros(len(parent), bool)
    has_parent = parent >= 0
    under_node[has_parent] = evaluate[parent[has_parent]]
    checks = under_node & view.host_names(lambda n: n in _NAN_CHECKS, bool)
    steps = max(view.step_count, 1)
    nodes = int(evaluate.sum()) / steps
    # the engine's own time per node, which anomaly mode raises (it tracks the node it evaluates)
    backward_ms = float(host["dur"].to_numpy()[checks].sum() + host["self_ns"].to_numpy()[evaluate].sum())
    backward_ms /= steps * NS_PER_MS
    out: dict[str, Any] = {"anomaly.nodes_per_step": round(nodes, 2), "anomaly.nan_check_ms": round(backward_ms, 3)}
    stack_ms = _forward_captures_ms(view, nodes)
    if stack_ms is None:
        node_us = _node_us_in_forward(view, probe)
        stack_ms = None if node_us is None else nodes * node_us / 1e3
    if stack_ms is not None:
        total = backward_ms + stack_ms
        step = step_ms(view)
        out.update({"anomaly.stack_us": round(stack_ms * 1e3 / nodes, 1) if nodes else None,
                    "anomaly.stack_ms": round(stack_ms, 3),
                    "anomaly.ms": round(total, 3), "anomaly.share": round(total / step, 4) if step else None})
    return out


def _forward_captures_ms(view: TraceView, nodes: float) -> float | None:
    """The forward pass's stack captures per step, from its operators that record an autograd node.

    Each such operator's own time is its work plus the captures of the nodes it records (its own, and
    the AccumulateGrad node of a parameter it is the first to use). Its work is about the same every
    step, the captures are not (the garbage they make is collected now and then): so every call's own
    time beyond the least of the same operator in the same module is capture, and every node costs at
    least the cheapest capture, the least own time of a view operator that records a node (``aten::t``
    in each nn.Linear: it computes nothing). None without five such view operators.
    """
    host = view.host
    if "seq" not in host or "module" not in host:  # a trace without sequence numbers or module labels
        return None
    rows = np.flatnonzero(((host["phase"] == "forward") & (host["seq"] >= 0) & (host["cat"] == "cpu_op")
                           & (host["step"] >= 0)).to_numpy())
    views = rows[view.host_names(lambda n: n in _VIEW_OPS, bool)[rows]]
    if len(views) < _MIN_SAMPLES:
        return None
    own = host["self_ns"].to_numpy()[rows].astype("float64")
    keys = pd.DataFrame({"name": host["name"].to_numpy()[rows], "module": host["module"].to_numpy()[rows]})
    least = pd.Series(own).groupby([keys["name"].astype(str), keys["module"].astype(str)]).transform("min")
    excess = float((own - least.to_numpy()).sum())
    cheapest = float(host["self_ns"].to_numpy()[views].min())
    return (excess / max(view.step_count, 1) + nodes * cheapest) / NS_PER_MS


def _node_us_in_forward(view: TraceView, probe: Any) -> float | None:
    """The collector's time to record one node, moved to the stack depth of the forward pass (for a
    forward pass without view operators that record a node).

    A stack capture costs about as much as formatting ten frames, plus one frame's worth for each frame
    on the stack (measured on PyTorch 2.13: 90 us at 2 frames, 390 us at 42). The forward pass runs
    the model's operators three frames deeper for each level of nn.Module nesting (``__call__``,
    ``_call_impl``, ``forward``) than the training loop, plus one for a functional call.
    """
    if not isinstance(probe, dict) or _number(probe.get("us")) is None:
        return None
    depth, user_depth = _number(probe.get("depth")) or 0, _number(probe.get("user_depth")) or 0
    host = view.host
    if "seq" not in host or "module" not in host:
        return None
    forward = ((host["phase"] == "forward") & (host["seq"] >= 0) & (host["cat"] == "cpu_op")).to_numpy()
    modules = host["module"].to_numpy()[forward]
    levels = float(np.mean([str(m).count(".") + 1 if str(m) not in ("", "nan") else 0 for m in modules])) \
        if len(modules) else 0.0
    forward_depth = user_depth + 3 * levels + 1
    return float(probe["us"]) * (_BASE_FRAMES + forward_depth) / (_BASE_FRAMES + depth)
