"""The collector's probe of what a DataLoader worker's hand-over of a batch costs the training process, run for real
(a worker process, shared memory), and the first batch's tensors it is sized from."""

from __future__ import annotations

from collections import UserDict

import torch

from advisor.collect.labels import FetchTimes
from advisor.collect.worker_handover import measure_worker_handover


def test_the_probe_times_ready_batches_from_a_real_worker() -> None:
    probe = measure_worker_handover(3, 3 * 4096)
    assert probe is not None
    assert probe["tensors"] == 3 and probe["bytes"] == 3 * 4096 and probe["batches"] == 20
    # a hand-over is a socket message, a mapping and an unpickling: tens of microseconds at least, well under
    # a second even on a loaded machine
    assert 0.01 < probe["ms"] < 1000


def test_no_tensors_no_probe_and_a_big_batch_is_probed_smaller() -> None:
    assert measure_worker_handover(0, 0) is None
    probe = measure_worker_handover(2, 1 << 30)  # a batch of 1 GB: a container's /dev/shm holds 64 MB
    assert probe is not None and probe["bytes"] == 16 << 20


def test_the_probe_forks_even_where_the_script_chose_spawn(monkeypatch) -> None:
    """A spawned worker would import torch (seconds of the user's wait); the hand-over is the same."""
    import multiprocessing

    import advisor.collect.worker_handover as probe_module

    contexts = []
    real = probe_module.DataLoader

    def loader(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        contexts.append(kwargs.get("multiprocessing_context"))
        return real(*args, **kwargs)

    monkeypatch.setattr(probe_module, "DataLoader", loader)
    before = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("spawn", force=True)
    try:
        assert measure_worker_handover(2, 1024) is not None
    finally:
        multiprocessing.set_start_method(before, force=True)
    assert contexts == ["fork"]


class _Encoding(UserDict):
    """Like transformers' BatchEncoding: a mapping that is not a dict."""


def test_the_first_batch_gives_the_loader_kind_and_its_tensors() -> None:
    times = FetchTimes()
    batch = {"input_ids": torch.zeros(4, 8, dtype=torch.int64), "extra": [torch.zeros(2), "text", 3],
             "enc": _Encoding(mask=torch.zeros(4, 8, dtype=torch.bool))}
    times.note_batch(batch, 0)
    assert times.in_process is True and times.tensors == 3 and times.nbytes == 4 * 8 * 8 + 2 * 4 + 4 * 8
    times.note_batch((torch.zeros(1000),), 4)  # later batches are left alone
    assert times.in_process is True and times.tensors == 3
    workers = FetchTimes()
    workers.note_batch((torch.zeros(2),), 2)
    assert workers.in_process is False
    json = {**FetchTimes(fetches=1, wall_ns=10**6, cpu_ns=10**6).as_json()}
    assert json["in_process"] is None and json["tensors"] == 0
