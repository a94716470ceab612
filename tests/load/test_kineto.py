"""The Kineto loader on every real fixture trace, and on broken files."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from advisor.errors import TraceError
from advisor.load.kineto import load_kineto
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
