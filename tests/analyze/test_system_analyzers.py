"""System-stage analyzers: on a small hand-made capture with known answers, and on the real exports."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from advisor.analyze.registry import run_analyzers
from advisor.analyze.system.osrt import category_of
from advisor.analyze.system.view import SystemView
from advisor.load.nsys_sqlite import NsysTrace, load_nsys_sqlite
from conftest import fixture_path

MS = 1_000_000
MAIN, WORKER = (100, 100), (101, 101)


def _frame(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=columns)
    if "start" in frame:
        frame["dur"] = frame["end"] - frame["start"]
    return frame


def _two_steps() -> NsysTrace:
    """Two 100 ms steps; each: dataloader 0-40 ms (main thread reads 5-35 ms, copies at 36 ms),
    forward 40-70 (kernel 45-65, launched at 41 inside the user range "my_block" 40-50),
    backward 70-95 (kernel 72-92), optimizer 95-100 (cudaStreamSynchronize 95-99)."""
    nvtx, osrt, kernels, runtime, memcpy = [], [], [], [], []
    for i, base in enumerate((0, 100)):
        t = lambda ms: (base + ms) * MS  # noqa: E731
        nvtx.append(dict(start=t(0), end=t(100), pid=100, tid=100, name=f"ProfilerStep#{i + 3}", domain="", kind="range"))
        for phase, lo, hi in (("dataloader", 0, 40), ("forward", 40, 70), ("backward", 70, 95), ("optimizer", 95, 100)):
            nvtx.append(dict(start=t(lo), end=t(hi), pid=100, tid=100, name=f"advisor::{phase}", domain="", kind="range"))
        nvtx.append(dict(start=t(40), end=t(50), pid=100, tid=100, name="my_block", domain="", kind="range"))
        osrt.append(dict(start=t(5), end=t(35), pid=100, tid=100, name="read", return_value=0, nesting=0))
        osrt.append(dict(start=t(6), end=t(7), pid=100, tid=100, name="read", return_value=0, nesting=1))
        osrt.append(dict(start=t(10), end=t(90), pid=101, tid=101, name="poll", return_value=0, nesting=0))
        for corr, launch, lo, hi in ((10 * i + 1, 41, 45, 65), (10 * i + 2, 71, 72, 92)):
            kernels.append(dict(start=t(lo), end=t(hi), device=0, context=1, stream=7, correlation=corr, pid=100,
                                name="gemm", full_name="gemm", grid="1,1,1", block="1,1,1", registers=32,
                                shared_bytes=0))
            runtime.append(dict(start=t(launch), end=t(launch) + 10_000, pid=100, tid=100, correlation=corr,
                                name="cudaLaunchKernel_v7000", api="cudaLaunchKernel", layer="runtime",
                                return_value=0, callchain=-1))
        runtime.append(dict(start=t(36), end=t(39), pid=100, tid=100, correlation=10 * i + 3,
                            name="cudaMemcpyAsync_v3020", api="cudaMemcpyAsync", layer="runtime", return_value=0,
                            callchain=-1))
        memcpy.append(dict(start=int(t(36.5)), end=int(t(38.5)), device=0, stream=7, correlation=10 * i + 3, pid=100,
                           bytes=4_000_000, kind="HtoD", src_memory="Pageable", dst_memory="Device"))
        runtime.append(dict(start=t(95), end=t(99), pid=100, tid=100, correlation=10 * i + 4,
                            name="cudaStreamSynchronize_v3020", api="cudaStreamSynchronize", layer="runtime",
                            return_value=0, callchain=-1))
    tables = {
        "nvtx": _frame(nvtx, ["start", "end", "pid", "tid", "name", "domain", "kind"]),
        "osrt": _frame(osrt, ["start", "end", "pid", "tid", "name", "return_value", "nesting"]),
        "kernels": _frame(kernels, ["start", "end", "device", "context", "stream", "correlation", "pid", "name",
                                    "full_name", "grid", "block", "registers", "shared_bytes"]),
        "runtime": _frame(runtime, ["start", "end", "pid", "tid", "correlation", "name", "api", "layer",
                                    "return_value", "callchain"]),
        "memcpy": _frame(memcpy, ["start", "end", "device", "stream", "correlation", "pid", "bytes", "kind",
                                  "src_memory", "dst_memory"]),
        "memset": _frame([], ["start", "end", "device", "stream", "correlation", "pid", "bytes", "memory"]),
        "sync": _frame([], ["start", "end", "device", "stream", "correlation", "pid", "sync_type"]),
        "threads": pd.DataFrame([dict(pid=100, tid=100, name="python", process="python"),
                                 dict(pid=101, tid=101, name="pt_data_worker", process="python")]),
    }
    return NsysTrace(Path("made-up.sqlite"), tables, set(tables), {"product_version": "test"})


@pytest.fixture(scope="module")
def facts() -> dict:
    view = SystemView(_two_steps())
    return run_analyzers(view, "system").values()


def test_steps_and_phase_timeline(facts) -> None:
    assert facts["system.steps.count"] == 2
    assert facts["system.steps.time_ms"] == pytest.approx(100.0)
    timeline = facts["system.phases.timeline"]
    assert [r["step"] for r in timeline] == [3, 4]
    assert [r["start_ms"] for r in timeline] == [0.0, 100.0]
    assert timeline[1]["dataloader_ms"] == pytest.approx(40.0)
    assert timeline[1]["optimizer_ms"] == pytest.approx(5.0) and timeline[1]["other_ms"] == pytest.approx(0.0)


def test_os_waits_by_thread_and_phase(facts) -> None:
    # 30 ms of top-level read per step; the nested read inside it does not count twice
    assert facts["system.osrt.main_wait_ms_per_step"] == pytest.approx(30.0)
    assert facts["system.osrt.main_wait_share"] == pytest.approx(0.30)
    assert facts["system.osrt.main_top_call"] == "read"
    assert facts["system.osrt.main_top_category"] == "file I/O"
    assert facts["system.osrt.main_top_phase"] == "dataloader"
    assert facts["system.osrt.dataloader_wait_share"] == pytest.approx(0.75)
    assert facts["system.osrt.worker_processes"] == 1
    worker = [r for r in facts["system.osrt.waits"] if r["thread"] == "pt_data_worker"]
    assert worker[0]["call"] == "poll" and worker[0]["phase"] == "(other thread)"
    assert worker[0]["ms_per_step"] == pytest.approx(80.0)


def test_gpu_idle_by_phase(facts) -> None:
    # busy per step: two 20 ms kernels and a 2 ms copy
    assert facts["system.gpu.busy_fraction"] == pytest.approx(0.42)
    assert facts["system.gpu.idle_ms_per_step"] == pytest.approx(58.0)
    by_phase = {r["phase"]: r for r in facts["system.gpu.by_phase"]}
    assert by_phase["dataloader"]["idle_ms_per_step"] == pytest.approx(38.0)
    assert by_phase["forward"]["idle_ms_per_step"] == pytest.approx(10.0)
    assert by_phase["backward"]["utilisation"] == pytest.approx(20 / 25)
    assert facts["system.gpu.top_idle_phase"] == "dataloader"
    assert facts["system.gpu.top_idle_phase_share"] == pytest.approx(38 / 58)
    longest = facts["system.gpu.gaps"][0]
    assert longest["phase"] == "dataloader" and longest["cpu"].startswith("read")
    low = {(r["phase"], r["step"]) for r in facts["system.gpu.low_util_windows"]}
    assert ("dataloader", 3) in low and ("optimizer", 4) in low and ("forward", 3) not in low


def test_kernels_attributed_to_the_launching_range(facts) -> None:
    by_range = {r["range"]: r for r in facts["system.kernels.by_range"]}
    assert set(by_range) == {"my_block", "backward"}  # the user's range wins over the phase around it
    assert by_range["my_block"]["gpu_ms_per_step"] == pytest.approx(20.0)
    assert facts["system.kernels.count_per_step"] == 2.0
    assert facts["system.kernels.top3_share"] == pytest.approx(1.0)


def test_syncs_and_blocking_copies(facts) -> None:
    assert facts["system.sync.ms_per_step"] == pytest.approx(4.0)
    assert facts["system.sync.share"] == pytest.approx(0.04)
    assert facts["system.sync.top_api"] == "cudaStreamSynchronize"
    assert facts["system.sync.top_caller"] == "optimizer"
    assert facts["system.memcpy.pageable_async_per_step"] == 1.0
    assert facts["system.memcpy.pageable_async_ms_per_step"] == pytest.approx(3.0)
    assert facts["system.memcpy.blocking_share"] == pytest.approx(0.03)
    row = facts["system.memcpy.table"][0]
    assert (row["kind"], row["memory"], row["caller"], row["blocking"]) == ("HtoD", "Pageable", "dataloader", True)
    assert row["gb_per_s"] == pytest.approx(2.0)


def test_streams(facts) -> None:
    assert facts["system.streams.count"] == 1
    assert facts["system.streams.overlap_fraction"] == 0.0
    assert facts["system.streams.copy_overlap_fraction"] == 0.0


def test_os_call_categories() -> None:
    assert [category_of(c) for c in ("clock_nanosleep", "pread64", "fopen64", "epoll_wait", "pthread_cond_timedwait",
                                     "sem_timedwait", "waitpid", "recvmsg", "mmap64", "ioctl", "getpid")] == [
        "sleep", "file I/O", "file I/O", "poll/select", "lock/condition", "lock/condition", "process/thread",
        "socket/pipe", "memory map", "ioctl", "other"]


def test_saxpy_export() -> None:
    view = SystemView(load_nsys_sqlite(fixture_path("nsys", "saxpy_mpi_cuda_nvtx_nsys2022.2.sqlite")))
    findings = run_analyzers(view, "system")
    facts = findings.values()
    assert "system_osrt" in findings.skipped  # this capture did not trace the OS runtime
    assert facts["system.steps.count"] == 0
    assert facts["system.steps.source"].startswith("the whole export")
    # every saxpy kernel is launched inside the user's "saxpy" NVTX range
    assert facts["system.kernels.by_range"] == [pytest.approx({
        "range": "saxpy", "kernels_per_step": 5.0, "gpu_ms_per_step": 88.57348, "share": 1.0, "top_kernel": "saxpy"})]
    # all 15 copies are synchronous cudaMemcpy from or to pageable memory
    assert facts["system.memcpy.sync_per_step"] == 15.0
    assert facts["system.memcpy.pageable_async_per_step"] == 0.0
    assert facts["system.memcpy.mb_per_step"] == pytest.approx(15 * 262.144)
    assert facts["system.sync.calls_per_step"] == 0.0  # no explicit synchronisation calls
    blocking = {r["api"]: r for r in facts["system.sync.table"]}
    assert blocking["cudaMemcpy"]["calls_per_step"] == 15.0
    gaps = facts["system.gpu.gaps"]
    assert gaps[0]["range"] == "MPI_Init"  # the longest gap is MPI start-up


def test_vecadd_export() -> None:
    view = SystemView(load_nsys_sqlite(fixture_path("nsys", "vecadd_nsys2025.5.sqlite")))
    findings = run_analyzers(view, "system")
    facts = findings.values()
    assert "system_timeline" in findings.skipped  # no NVTX in this capture
    assert facts["system.sync.top_api"] == "cudaDeviceSynchronize"
    assert facts["system.sync.calls_per_step"] == 1.0
    assert facts["system.kernels.top"][0]["name"] == "kernVectorAdd"
    assert facts["system.osrt.main_top_call"] == "ioctl"
    threads = {r["thread"] for r in facts["system.osrt.threads"]}
    assert "CUPTI worker thread" not in threads  # the profiler's own threads are left out
