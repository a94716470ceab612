"""The Kineto loader on every real fixture trace, and on broken files."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from advisor.errors import TraceError
from advisor.load.kineto import ALL_ARGS, load_kineto
from conftest import KINETO_TRACES, fixture_path


@pytest.mark.parametrize("name", KINETO_TRACES)
def test_loads_every_fixture_with_int64_ns(name: str) -> None:
    trace = load_kineto(fixture_path("kineto", name))
    events = trace.events
    assert len(events) > 0
    for column in ("ts", "dur", "end"):
        assert events[column].dtype == np.int64
    assert (events["end"] >= events["ts"]).all()
    assert events["ts"].is_monotonic_increasing


def test_v100_counts_and_nanosecond_timestamps() -> None:
    trace = load_kineto(fixture_path("kineto", "v100_resnet_single_rank.pt.trace.json.gz"))
    counts = trace.events["cat"].value_counts()
    assert counts["kernel"] == 4350
    assert counts["cpu_op"] == 23910
    assert counts["gpu_memcpy"] == 1600
    # sub-microsecond timestamps survive the conversion to ns
    assert (trace.events["ts"] % 1000 != 0).any()
    assert trace.devices[0]["name"] == "Tesla V100-SXM2-32GB"


def test_distributed_info_and_its_absence() -> None:
    ddp = load_kineto(fixture_path("kineto", "a100_ddp_nccl_rank0.pt.trace.json.gz"))
    assert (ddp.meta["rank"], ddp.meta["world_size"], ddp.meta["backend"]) == (0, 2, "nccl")
    plain = load_kineto(fixture_path("kineto", "no_distributed_info.pt.trace.json.gz"))
    assert plain.rank == 0 and "world_size" not in plain.meta


def test_rocm_trace_maps_hip_runtime() -> None:
    trace = load_kineto(fixture_path("kineto", "mi250_rocm_minitoy.pt.trace.json.gz"))
    runtime = trace.of("cuda_runtime")
    assert runtime["name"].astype(str).str.startswith("hip").any()
    assert trace.has_gpu


def test_not_json(tmp_path) -> None:
    bad = tmp_path / "trace.json"
    bad.write_text("this is not json")
    with pytest.raises(TraceError, match=r"trace.json: is not valid JSON"):
        load_kineto(bad)


def test_truncated_gzip(tmp_path) -> None:
    raw = fixture_path("kineto", "a100_alexnet_cuda_sync.pt.trace.json.gz").read_bytes()
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceError, match="cut.json.gz: the gzip stream is truncated"):
        load_kineto(bad)


def test_json_that_is_not_a_trace(tmp_path) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    with pytest.raises(TraceError, match="no `traceEvents` list"):
        load_kineto(other)


def test_missing_and_directory(tmp_path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        load_kineto(tmp_path / "nope.json")
    with pytest.raises(TraceError, match="is a directory"):
        load_kineto(tmp_path)


def test_cuda_sync_events_and_device_wide_stream() -> None:
    trace = load_kineto(fixture_path("kineto", "a100_alexnet_cuda_sync.pt.trace.json.gz"))
    syncs = trace.of("cuda_sync")
    assert syncs["sync_kind"].astype(str).value_counts().to_dict() == {"Stream Wait Event": 20, "Stream Sync": 16, "Context Sync": 5}
    # Context Sync is device-wide: Kineto writes stream 4294967295, the loader -1
    assert (syncs.loc[syncs["sync_kind"] == "Context Sync", "stream"] == -1).all()
    assert (syncs.loc[syncs["sync_kind"] == "Stream Wait Event", "wait_stream"] >= 0).all()
    assert (syncs["correlation"] >= 0).all()


def test_gpu_op_args() -> None:
    ddp = load_kineto(fixture_path("kineto", "a100_ddp_nccl_rank0.pt.trace.json.gz"))
    nccl = ddp.events[ddp.events["name"].astype(str).str.startswith("ncclKernel")]
    assert set(nccl["collective"]) == {"allreduce", "broadcast"}
    assert (nccl["group_size"] == 2).all() and (nccl["stream"] >= 0).all()
    kernels = load_kineto(fixture_path("kineto", "a100_ddp_nccl_rank0.pt.trace.json.gz"), args=ALL_ARGS).of("kernel")
    assert (kernels["queued"] >= 0).all() and (kernels["grid"] != "").all()
    assert "queued" not in ddp.events  # an extra column: read only when asked for
    rocm = load_kineto(fixture_path("kineto", "mi250_rocm_minitoy.pt.trace.json.gz"))
    assert set(rocm.of("gpu_memcpy")["copy_kind"]) == {"HtoD"}
    assert set(rocm.of("kernel")["device"]) == {2}


def test_old_category_names_are_mapped(tmp_path) -> None:
    """Kineto before PyTorch 1.9 wrote Operator/Runtime/Kernel/Memcpy; the tables use today's names."""
    events = [
        {"ph": "X", "cat": "Operator", "name": "aten::mm", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "ts": 2, "dur": 3, "pid": 1, "tid": 1,
         "args": {"correlation": 5}},
        {"ph": "X", "cat": "Kernel", "name": "sgemm", "ts": 6, "dur": 4, "pid": 0, "tid": 7,
         "args": {"correlation": 5, "stream": 7, "device": 0}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "ts": 11, "dur": 1, "pid": 0,
         "tid": 7, "args": {"bytes": 64}},
    ]
    path = tmp_path / "old.json"
    path.write_text(__import__("json").dumps({"traceEvents": events}))
    trace = load_kineto(path)
    assert list(trace.events["cat"].astype(str)) == ["cpu_op", "cuda_runtime", "kernel", "gpu_memcpy"]
    assert trace.has_gpu
