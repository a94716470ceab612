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


def test_no_tensors_no_probe() -> None:
    assert measure_worker_handover(0, 0) is None


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
