"""The collector's host hooks and settings, in this process, with the real profiler and a real DataLoader."""

from __future__ import annotations

import gzip
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from advisor.collect import environment, host_hooks
from advisor.naming import SAVE_RANGE, WORKERS_START_RANGE, source_label


@pytest.fixture
def hooks() -> Iterator[None]:
    undo = host_hooks.install(lambda: source_label("train.py", 7, "main"))
    host_hooks.CALLED_AT.clear()
    try:
        yield
    finally:
        undo()
        host_hooks.CALLED_AT.clear()


def _names(prof: torch.profiler.profile, tmp_path: Path) -> list[str]:
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [e.get("name", "") for e in json.load(f)["traceEvents"]]


def test_torch_save_is_a_range_with_its_caller_only_while_recording(hooks: None, tmp_path: Path) -> None:
    torch.save({"w": torch.ones(3)}, tmp_path / "before.pt")  # no profiler: the plain call
    with torch.profiler.profile() as prof:
        torch.save({"w": torch.ones(3)}, tmp_path / "inside.pt")
    names = _names(prof, tmp_path)
    assert names.count(SAVE_RANGE) == 1
    assert source_label("train.py", 7, "main") in names
    assert torch.load(tmp_path / "inside.pt")["w"].sum() == 3


def test_undo_restores_every_function() -> None:
    originals = (torch.save, torch.set_num_threads, torch.set_anomaly_enabled,
                 torch.utils.data.dataloader._MultiProcessingDataLoaderIter.__init__)
    host_hooks.install()()
    assert (torch.save, torch.set_num_threads, torch.set_anomaly_enabled,
            torch.utils.data.dataloader._MultiProcessingDataLoaderIter.__init__) == originals


def test_the_callers_of_set_num_threads_and_anomaly_mode_are_noted(hooks: None) -> None:
    here = sys._getframe()
    torch.set_num_threads(torch.get_num_threads())
    threads_line = here.f_lineno - 1
    with torch.autograd.detect_anomaly():
        anomaly_line = here.f_lineno - 1
        settings = environment.thread_settings()
    name = here.f_code.co_name
    assert host_hooks.CALLED_AT["set_num_threads"] == (__file__, threads_line, name)
    assert host_hooks.CALLED_AT["anomaly_on"] == (__file__, anomaly_line, name)
    assert settings["set_num_threads_at"] == [__file__, threads_line, name]
    assert settings["debug"]["anomaly_detection"] is True
    node = settings["anomaly_node"]
    assert node["us"] > 0 and node["depth"] > node["user_depth"] >= 1
    assert not torch.is_anomaly_enabled()


class _Squares(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(float(i * i))


def test_worker_start_is_a_range_and_the_workers_are_known(hooks: None, tmp_path: Path) -> None:
    loader = DataLoader(_Squares(), batch_size=4, num_workers=2)
    with torch.profiler.profile() as prof:
        it = iter(loader)
        first = next(it)
    assert first.tolist() == [0.0, 1.0, 4.0, 9.0]
    pids = host_hooks.worker_pids()
    assert len(pids) == 2 and all(pid != os.getpid() for pid in pids)
    cpu = host_hooks.worker_cpu(pids)
    assert set(cpu) == set(pids) and all(seconds[0] >= 0 for seconds in cpu.values())
    settings = environment.thread_settings()
    assert settings["dataloader_workers"] == 2
    del it  # the iterator's workers stop with it
    assert WORKERS_START_RANGE in _names(prof, tmp_path)
    after = environment.describe_environment()["threads"]
    assert after["workers_busy_cores"] >= 0 and after["workers_measured_s"] > 0


def test_thread_settings_name_cores_debug_apis_and_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    settings = environment.thread_settings()
    assert settings["usable_cores"] == len(os.sched_getaffinity(0))
    assert settings["debug"]["CUDA_LAUNCH_BLOCKING"] == "1"
    assert settings["debug"]["anomaly_detection"] is False and "anomaly_node" not in settings
    if torch.get_num_threads() >= 2:
        assert settings["parallel_region_us"] > 0
    else:
        assert "parallel_region_us" not in settings
    assert not torch.cuda.is_initialized()  # asking about the sync debug mode would have initialised it
