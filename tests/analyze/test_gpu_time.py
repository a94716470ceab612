"""GPU busy/idle time on the real fixture traces: it adds up, and it agrees with the peer's numbers.

The peer (Holistic Trace Analysis 0.5.0, ../shared/fixtures/README.md) measures
differently from the advisor in three ways, and :func:`hta_events` reproduces
each of them so that both are measured over the same window and events:

1. Window and events: HTA keeps GPU ops launched (by correlation) by host
   events that start before the last ProfilerStep, and measures from the
   first kept op's start to the last one's end. The advisor measures over all
   analysed steps (or, without steps, the span of GPU ops).
2. HTA counts cuda_sync events (Context/Stream/Event Sync) as GPU time
   (non-compute); the advisor counts them as idle: they are waits, not work.
3. For traces with fractional-microsecond timestamps HTA rounds every event
   inward to whole microseconds (start up, end down, the end computed in
   float64 at epoch magnitude, where doubles have 0.25 us resolution). The
   advisor keeps nanoseconds.

With those applied, the advisor's own interval code (busy_breakdown,
comm_overlap) reproduces the reference table within 1%.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from advisor.analyze.framework.gpu_idle import CAUSES
from advisor.analyze.framework.gpu_links import op_kind
from advisor.analyze.framework.gpu_time import busy_breakdown
from advisor.analyze.framework.view import TraceView
from advisor.analyze.ranks.comm import comm_overlap
from advisor.analyze.registry import run_analyzers
from advisor.load.kineto import load_kineto
from conftest import fixture_path

GPU_TRACES = [
    "a100_alexnet_cuda_sync.pt.trace.json.gz",
    "a100_ddp_nccl_rank0.pt.trace.json.gz",
    "mi250_rocm_minitoy.pt.trace.json.gz",
    "v100_resnet_single_rank.pt.trace.json.gz",
    "a100_recsys_2of128_ranks/rank0.pt.trace.json.gz",
    "a100_recsys_2of128_ranks/rank1.pt.trace.json.gz",
]

#: ../shared/fixtures/README.md, "Reference numbers from a peer": idle, compute, non-compute (us), overlap %
REFERENCE = {
    "v100_resnet_single_rank.pt.trace.json.gz": (10_113, 372_150, 2_371, None),
    "a100_ddp_nccl_rank0.pt.trace.json.gz": (338_781, 75_169, 21_636, 14.31),
    "a100_alexnet_cuda_sync.pt.trace.json.gz": (12_929_684, 10_637, 55_690, None),
    "a100_recsys_2of128_ranks/rank0.pt.trace.json.gz": (321_378, 106_252, 172_428, 11.81),
    "a100_recsys_2of128_ranks/rank1.pt.trace.json.gz": (328_671, 135_548, 136_455, 20.05),
}

_CACHE: dict[str, dict] = {}


def facts(name: str) -> dict:
    if name not in _CACHE:
        view = TraceView(load_kineto(fixture_path("kineto", name)))
        _CACHE[name] = run_analyzers(view).values()
    return _CACHE[name]


@pytest.mark.parametrize("name", GPU_TRACES)
def test_busy_and_idle_add_up_to_the_window(name: str) -> None:
    f = facts(name)
    assert f["gpu.busy_ms"] + f["gpu.idle_ms"] == pytest.approx(f["gpu.window_ms"], rel=1e-9)
    assert f["gpu.busy_fraction"] + f["gpu.idle_fraction"] == pytest.approx(1.0)
    assert f["gpu.compute_ms"] + f["gpu.noncompute_ms"] == pytest.approx(f["gpu.busy_ms"], rel=1e-9)
    causes = sum(f[f"gpu.idle.{c}.ms"] for c in CAUSES)
    assert causes == pytest.approx(f["gpu.idle_ms"], rel=1e-9, abs=1e-9)
    assert sum(r["of_idle"] for r in f["gpu.idle.table"]) == pytest.approx(1.0)
    shares = f["gpu.busy_fraction"] + sum(f[f"gpu.idle.{c}.share"] for c in CAUSES)
    assert shares == pytest.approx(1.0)
    for row in f["gpu.steps"]:
        assert row["busy_ms"] + row["idle_ms"] == pytest.approx(row["time_ms"])
    for row in f["gpu.streams"]:
        assert 0 <= row["ms"] <= f["gpu.window_ms"] + 1e-9
    assert f["gpu.window"]  # the definition is recorded for the report


def hta_events(name: str) -> tuple[pd.DataFrame, int, int]:
    """The GPU events and window HTA 0.5.0 measures, with its rounding (see the module docstring)."""
    e = load_kineto(fixture_path("kineto", name)).events
    ts_us = e["ts"].to_numpy() / 1000.0
    end_us = ts_us + e["dur"].to_numpy() / 1000.0  # float64 at epoch magnitude, as HTA computes it
    fractional = bool((e["ts"] % 1000 != 0).any() or (e["dur"] % 1000 != 0).any())
    if fractional:
        start = np.ceil(ts_us).astype("int64") * 1000
        end = np.floor(end_us).astype("int64") * 1000
        e = e.assign(ts=start, end=np.maximum(end, start))
    gpu = e[e["cat"].isin(("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"))]
    names = e["name"].astype(str)
    steps = e[(e["cat"] == "user_annotation") & names.str.startswith("ProfilerStep")]
    if len(steps) > 1:
        host = e[~e["cat"].isin(("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation"))]
        launched = host.loc[host["ts"] < steps["ts"].max(), "correlation"]
        gpu = gpu[gpu["correlation"].isin(launched[launched >= 0])]
    kinds = ["sync" if c == "cuda_sync" else op_kind(c, n) for c, n in zip(gpu["cat"].astype(str), gpu["name"].astype(str))]
    gpu = gpu.assign(kind=kinds)
    return gpu, int(gpu["ts"].min()), int(gpu["end"].max())


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_agrees_with_the_peer_over_the_same_window(name: str) -> None:
    idle, compute, noncompute, overlap = REFERENCE[name]
    events, lo, hi = hta_events(name)
    b = busy_breakdown(events, lo, hi)
    assert b["idle"] / 1000 == pytest.approx(idle, rel=0.01)
    assert b["compute"] / 1000 == pytest.approx(compute, rel=0.01)
    assert b["noncompute"] / 1000 == pytest.approx(noncompute, rel=0.01)
    assert 100 * b["idle"] / b["window"] == pytest.approx(100 * idle / (idle + compute + noncompute), abs=0.01)
    if overlap is not None:
        comm, overlapped = comm_overlap(events, lo, hi)
        assert 100 * overlapped / comm == pytest.approx(overlap, rel=0.01)


def test_the_advisors_own_window_differs_only_by_its_definition() -> None:
    """a100_alexnet has no ProfilerStep: both use the GPU span; only the cuda_sync events differ.

    HTA's span runs from a Stream Sync and ends at a Context Sync, 76 ms wider than
    the span of kernels, copies and memsets; over that span the idle share agrees.
    """
    f = facts("a100_alexnet_cuda_sync.pt.trace.json.gz")
    events, lo, hi = hta_events("a100_alexnet_cuda_sync.pt.trace.json.gz")
    work = events[events["kind"] != "sync"]
    assert f["gpu.window_ms"] == pytest.approx((work["end"].max() - work["ts"].min()) / 1e6)
    assert f["gpu.compute_ms"] == pytest.approx(REFERENCE["a100_alexnet_cuda_sync.pt.trace.json.gz"][1] / 1000, rel=0.01)
    assert f["gpu.idle_fraction"] == pytest.approx(0.9949, abs=0.001)
    assert "no ProfilerStep" in f["gpu.window"]


def test_ns_timestamps_are_kept() -> None:
    """Without HTA's rounding, v100's sub-microsecond ops leave less idle time than HTA reports."""
    events, lo, hi = hta_events("v100_resnet_single_rank.pt.trace.json.gz")
    raw = load_kineto(fixture_path("kineto", "v100_resnet_single_rank.pt.trace.json.gz")).events
    exact = raw.loc[raw.index.isin(events.index)].assign(kind=events["kind"])
    rounded = busy_breakdown(events, lo, hi)["idle"]
    precise = busy_breakdown(exact, lo, hi)["idle"]
    assert precise < rounded
    assert math.isclose(rounded / 1000, 10_113, rel_tol=0.06)  # HTA's figure, for scale
