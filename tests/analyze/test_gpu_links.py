"""GPU ops linked to launch call, operator, source line and module.

On the real fixtures (which carry no Python stacks) every kernel, copy and
memset reaches its launch call and operator. The link on to the user's line
is shown on a small trace in Kineto's format with Python frames, the way
``with_stack=True`` records them.
"""

from __future__ import annotations

import json

import pytest

from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import run_analyzers
from advisor.load.kineto import load_kineto
from conftest import fixture_path

LAUNCH_APIS = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync", "hipLaunchKernel",
               "hipExtModuleLaunchKernel", "hipMemcpyWithStream", "cuLaunchKernel", "cudaMemcpy"}


@pytest.mark.parametrize("name", [
    "a100_alexnet_cuda_sync.pt.trace.json.gz", "a100_ddp_nccl_rank0.pt.trace.json.gz",
    "mi250_rocm_minitoy.pt.trace.json.gz", "v100_resnet_single_rank.pt.trace.json.gz",
    "a100_recsys_2of128_ranks/rank0.pt.trace.json.gz",  # flow events stripped: correlation args still link
])
def test_every_gpu_op_reaches_its_launch_and_operator(name: str) -> None:
    ops = TraceView(load_kineto(fixture_path("kineto", name))).gpu.ops
    assert len(ops) > 0
    assert (ops["launch"] >= 0).all()
    assert set(ops["launch_name"]) <= LAUNCH_APIS
    assert (ops["op"] != "").mean() > 0.95
    assert (ops["launch_ts"] <= ops["ts"]).all()  # launched before it ran


def test_alexnet_kernels_reach_the_layers_that_launched_them() -> None:
    ops = TraceView(load_kineto(fixture_path("kineto", "a100_alexnet_cuda_sync.pt.trace.json.gz"))).gpu.ops
    sgemm = ops[ops["name"] == "ampere_sgemm_32x32_sliced1x4_tn"]
    assert set(sgemm["op"]) == {"aten::linear"} and set(sgemm["op_inner"]) == {"aten::addmm"}
    copies = ops[ops["kind"] == "memcpy"]
    assert set(copies["op"]) == {"aten::to"} and set(copies["launch_name"]) == {"cudaMemcpyAsync"}


def _x(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def stacked_trace() -> dict:
    """One step of ``train.py``: a matmul in Net.forward, then ``loss.item()``, with Python frames."""
    return {"traceEvents": [
        _x("user_annotation", "ProfilerStep#1", 0, 1000),
        _x("python_function", "train.py(30): main", 1, 998),
        _x("python_function", "nn.Module: Net_0", 10, 300),
        _x("python_function", "train.py(12): forward", 11, 298),
        _x("cpu_op", "aten::mm", 20, 100, **{"External id": 5, "Input type": ["float", "float"]}),
        _x("cuda_runtime", "cudaLaunchKernel", 30, 8, correlation=77, **{"External id": 5}),
        _x("kernel", "ampere_sgemm_128x64_nn", 40, 500, pid=0, tid=7, device=0, stream=7, correlation=77,
           **{"External id": 5}),
        _x("python_function", "train.py(33): main", 400, 590),
        _x("cpu_op", "aten::item", 410, 570, **{"External id": 9}),
        _x("cpu_op", "aten::_local_scalar_dense", 412, 566, **{"External id": 10}),
        _x("cuda_runtime", "cudaMemcpyAsync", 420, 10, correlation=80, **{"External id": 10}),
        _x("cuda_runtime", "cudaStreamSynchronize", 432, 540, correlation=81, **{"External id": 10}),
        _x("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 545, 2, pid=0, tid=7, device=0, stream=7,
           correlation=80, bytes=4),
        _x("cuda_sync", "Stream Sync", 433, 539, pid=0, tid=7, device=0, stream=7, correlation=81,
           cuda_sync_kind="Stream Sync"),
    ], "deviceProperties": [{"id": 0, "name": "NVIDIA A100", "computeMajor": 8, "computeMinor": 0}]}


@pytest.fixture()
def stacked(tmp_path) -> TraceView:
    path = tmp_path / "stacked.pt.trace.json"
    path.write_text(json.dumps(stacked_trace()))
    return TraceView(load_kineto(path))


def test_kernel_copy_and_sync_reach_the_users_line(stacked: TraceView) -> None:
    ops = stacked.gpu.ops.set_index("name")
    k = ops.loc["ampere_sgemm_128x64_nn"]
    assert (k["op"], k["src_file"], k["src_line"], k["src_func"], k["module"]) == (
        "aten::mm", "train.py", 12, "forward", "Net_0")
    assert k["input_types"] == '["float","float"]'
    copy = ops.loc["Memcpy DtoH (Device -> Pageable)"]
    assert (copy["op"], copy["src_line"]) == ("aten::item", 33)
    sync = stacked.gpu.host_syncs.set_index("name").loc["cudaStreamSynchronize"]
    assert (sync["sync"], bool(sync["item"]), sync["src_line"]) == ("stream", True, 33)
    assert stacked.gpu.sync_events.iloc[0]["src_line"] == 33


def test_analyzers_report_the_sites(stacked: TraceView) -> None:
    f = run_analyzers(stacked).values()
    top = f["kernels.top"][0]
    assert (top["site"], top["file"], top["line"], top["module"]) == ("train.py:12 (forward)", "train.py", 12, "Net_0")
    assert f["kernels.by_line"][0]["site"] == "train.py:12 (forward)"
    assert f["sync.site"] == "train.py:33 (main)" and f["sync.line"] == 33
    assert f["sync.items_per_step"] == 1
    points = {p["api"]: p for p in f["sync.points"]}
    assert points["cudaStreamSynchronize"]["item"] is True
    assert points["cudaMemcpyAsync"]["kind"] == "pageable_copy"
    # the GPU idles from the copy's end to the window's end while the host is inside the sync,
    # and after it returns: all of that is charged to the sync
    assert f["gpu.idle.sync.ms"] > 0
    assert f["precision.dtype_source"] == "operator inputs"
