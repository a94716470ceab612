"""The GPU analyzers on the real fixture traces: kernels, launches, syncs, copies, precision, comm, ranks, memory."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import all_specs, run_analyzers
from advisor.load.kineto import load_kineto
from advisor.pipeline import analyze_traces, find_kineto_traces, load_traces
from conftest import fixture_path

_CACHE: dict[str, dict] = {}


def facts(name: str) -> dict:
    if name not in _CACHE:
        _CACHE[name] = run_analyzers(TraceView(load_kineto(fixture_path("kineto", name)))).values()
    return _CACHE[name]


ALEXNET = "a100_alexnet_cuda_sync.pt.trace.json.gz"
DDP = "a100_ddp_nccl_rank0.pt.trace.json.gz"
V100 = "v100_resnet_single_rank.pt.trace.json.gz"
MI250 = "mi250_rocm_minitoy.pt.trace.json.gz"


@pytest.mark.parametrize("name", [ALEXNET, DDP, V100, MI250])
def test_kernel_table_contract(name: str) -> None:
    f = facts(name)
    top = f["kernels.top"]
    for column in ("name", "ms", "share", "calls_per_step", "op", "site", "file", "line", "module"):
        assert all(column in row for row in top)
    assert sum(r["share"] for r in top) <= 1.0 + 1e-9
    assert f["kernels.top3_share"] == pytest.approx(sum(r["share"] for r in top[:3]))
    assert f["kernels.ms"] == pytest.approx(sum(r["ms"] for r in top) / sum(r["share"] for r in top), rel=1e-6)
    assert f["kernels.count_per_step"] > 0


def test_alexnet_sync_points_and_pageable_copies() -> None:
    f = facts(ALEXNET)
    points = {(p["kind"], p["api"], p["op"]) for p in f["sync.points"]}
    assert ("stream", "cudaStreamSynchronize", "aten::to") in points
    assert ("device", "cudaDeviceSynchronize", "") in points
    assert f["sync.top_api"] == "cudaFree" and f["sync.site"] == "cudaFree in aten::conv2d"
    kinds = {e["kind"] for e in f["sync.events"]}
    assert {"Stream Sync", "Context Sync", "Stream Wait Event"} <= kinds
    # every host-to-device copy of the model's weights is from pageable memory, and blocks the host
    assert f["copies.pageable_fraction"] == 1.0
    assert f["copies.pageable_per_step"] == 16
    assert f["copies.pageable_host_ms"] > f["copies.pageable_ms"] * 0.9
    assert f["gpu.idle.top_cause"] == "sync"


def test_precision_on_three_generations() -> None:
    v100, ddp, mi = facts(V100), facts(DDP), facts(MI250)
    assert (v100["precision.tensor_cores"], v100["precision.tf32_capable"]) == (True, False)
    assert v100["precision.tensor_core_share"] == 0 and v100["precision.fp32_share"] == 1.0
    assert ddp["precision.tf32_capable"] and ddp["precision.tensor_core_share"] > 0.9
    assert mi["precision.tensor_core_share"] == 1.0  # MFMA (MI16x16x1) Tensile kernels
    alexnet = facts(ALEXNET)
    fp32 = {k["name"] for k in alexnet["precision.fp32_kernels"]}
    assert "ampere_sgemm_32x32_sliced1x4_tn" in fp32  # matmul without TF32 on an A100


def test_precision_of_matmul_kernels_that_last_no_time(tmp_path: Path) -> None:
    """Found by the fuzzer (issue 19): kernels without `dur` are counted as 0 long, and the precision shares of
    0 ms of matmul were a ZeroDivisionError. No matmul time: no shares, the device facts still given."""
    doc = json.loads(gzip.decompress(fixture_path("kineto", ALEXNET).read_bytes()))
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel":
            event.pop("dur", None)
    (tmp_path / "t.json").write_text(json.dumps(doc))
    trace = load_kineto(tmp_path / "t.json")
    assert trace.quality.bad > 0  # counted, not dropped
    found = run_analyzers(TraceView(trace)).values()
    assert found["precision.tf32_capable"] is True and found.get("precision.matmul_ms") is None


def test_ddp_communication() -> None:
    f = facts(DDP)
    assert f["comm.backend"] == "nccl" and f["comm.world_size"] == 2
    colls = {c["collective"]: c for c in f["comm.collectives"]}
    assert set(colls) == {"AllReduce", "Broadcast"} and colls["AllReduce"]["per_step"] == 5
    assert 0 < f["comm.overlap_fraction"] < 1
    assert f["comm.exposed_ms"] == pytest.approx(f["comm.ms"] * (1 - f["comm.overlap_fraction"]))
    assert f["gpu.idle_fraction"] > 0.5 and f["gpu.idle.top_cause"] == "cpu"


def test_gloo_cpu_only_trace_has_host_collectives() -> None:
    f = facts("cpu_only_gloo_rank34.pt.trace.json.gz")
    assert f["comm.backend"] == "gloo" and f["comm.world_size"] == 300
    assert f["comm.host_ms"] > 0
    assert "gpu.busy_fraction" not in f


def test_ranks_straggler_and_collective_wait() -> None:
    traces = load_traces(find_kineto_traces(fixture_path("kineto", "a100_recsys_2of128_ranks")))
    f = analyze_traces(traces).values()
    assert f["ranks.gpu.count"] == 2
    assert f["ranks.gpu.straggler"] == 1 and f["comm.wait_rank"] == 0
    table = {r["rank"]: r for r in f["ranks.gpu.table"]}
    assert table[1]["compute_ms"] > table[0]["compute_ms"]
    assert f["comm.wait_ms"] == pytest.approx(table[0]["wait_ms"])
    # waits are matched step by step (rank 1 waits in one of the two steps too), so the waiting rank's wait is
    # at least the difference of the whole windows: the sum of max(0, c0 - c1) over steps is >= that of c0 - c1
    assert f["comm.wait_ms"] >= table[0]["comm_ms"] - table[1]["comm_ms"] and table[1]["wait_ms"] > 0
    assert f["ranks.gpu.compute_imbalance"] == pytest.approx(
        (table[1]["compute_ms"] - table[0]["compute_ms"]) / ((table[0]["compute_ms"] + table[1]["compute_ms"]) / 2))


def test_memory_from_a_real_profile_memory_trace(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for _ in range(4):
            x = torch.randn(512, 512)
            (x @ x).relu().sum()
    path = tmp_path / "mem.pt.trace.json"
    prof.export_chrome_trace(str(path))
    f = run_analyzers(TraceView(load_kineto(path))).values()
    assert f["memory.device"] == "cpu"
    assert f["memory.peak_allocated_bytes"] >= 512 * 512 * 4
    assert f["memory.allocs_per_step"] >= 2
    assert f["memory.churn_ratio"] > 0


def test_every_gpu_fact_is_declared_once() -> None:
    specs = all_specs()
    for name in ("gpu.busy_fraction", "gpu.idle_fraction", "gpu.idle_ms", "kernels.count_per_step",
                 "kernels.top3_share", "kernels.top"):
        assert name in specs
    assert set(specs["kernels.top"].columns) >= {"name", "ms", "share", "calls_per_step", "op", "site", "file",
                                                 "line", "module"}
