"""What loading still costs once it keeps ahead of the training (DL001's estimate), on small traces worked out by hand.

Two 100 ms steps: a 60 ms fetch (torch's own DataLoader range, with the collate's ``aten::stack`` inside),
then 40 ms of training operators. The cores and threads come from run.json, as ``advisor diagnose`` passes
them to the analyzers.
"""

from __future__ import annotations

import json

import pytest

from advisor.analyze.framework.dataloader import dataloader
from advisor.analyze.framework.view import TraceView
from advisor.load.kineto import load_kineto

SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def _x(cat: str, name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": {}}


def _trace(fetch: str, fetch_us: tuple[float, float] = (60000, 60000)) -> dict:
    events = []
    for n, f in enumerate(fetch_us):
        t = 100000 * n
        events += [_x("user_annotation", f"ProfilerStep#{n + 1}", t, 100000),
                   _x("user_annotation", fetch, t, f), _x("cpu_op", "aten::stack", t + f - 500, 400),
                   _x("cpu_op", "aten::convolution", t + f, 20000),
                   _x("cpu_op", "aten::convolution_backward", t + f + 20000, 100000 - f - 20000)]
    return {"traceEvents": events}


def _facts(tmp_path, trace: dict, meta: dict | None) -> dict:
    path = tmp_path / "trace.pt.trace.json"
    path.write_text(json.dumps(trace))
    return dataloader(TraceView(load_kineto(path), meta))


def _meta(cores: int, threads: int, nproc: int = 1) -> dict:
    return {"environment": {"cpu_count": cores}, "threads_at_capture": {"torch_num_threads": threads},
            "nproc_per_node": nproc}


def test_on_two_cores_the_workers_take_half_the_wait_back_from_the_training(tmp_path) -> None:
    facts = _facts(tmp_path, _trace(SINGLE), _meta(2, 2))
    assert facts["dataloader.multiprocess"] is False
    assert facts["dataloader.cores"] == 2 and facts["dataloader.train_threads"] == 2
    assert facts["dataloader.compute_ms"] == pytest.approx(40.0)
    # the training's 40 ms of operators on 2 threads plus 60 ms of loading, on 2 cores (the collate's
    # aten::stack is part of the loading)
    assert facts["dataloader.remaining_ms"] == pytest.approx((2 * 40.0 + 60.0) / 2 - 40.0)


def test_a_fetch_that_mostly_waits_leaves_its_core_to_the_training(tmp_path) -> None:
    """The collector timed the fetches: the process's CPU time was 10% of their wall time (a file system that
    keeps it waiting); only that part competes with the training for the cores."""
    meta = {**_meta(2, 2), "dataloader_fetch": {"fetches": 8, "wall_ms": 480.0, "cpu_ms": 48.0}}
    facts = _facts(tmp_path, _trace(SINGLE), meta)
    assert facts["dataloader.fetch_cpu_ratio"] == pytest.approx(0.1)
    assert facts["dataloader.remaining_ms"] == pytest.approx((2 * 40.0 + 6.0) / 2 - 40.0)
    # just under the wait spread over the workers: then that is the step
    meta["dataloader_fetch"]["cpu_ms"] = 0.0
    facts = _facts(tmp_path, _trace(SINGLE, (90000, 90000)), {**meta, "threads_at_capture": {"torch_num_threads": 1}})
    assert facts["dataloader.remaining_ms"] == pytest.approx(90.0 / 2 - 10.0)
    # all CPU work: as without the measurement
    meta["dataloader_fetch"]["cpu_ms"] = 480.0
    assert _facts(tmp_path, _trace(SINGLE), meta)["dataloader.remaining_ms"] == pytest.approx((2 * 40.0 + 60.0) / 2
                                                                                               - 40.0)
    # a collate on two threads: twice the wait in CPU work
    meta["dataloader_fetch"]["cpu_ms"] = 960.0
    facts = _facts(tmp_path, _trace(SINGLE), meta)
    assert facts["dataloader.fetch_cpu_ratio"] == pytest.approx(2.0)
    assert facts["dataloader.remaining_ms"] == pytest.approx((2 * 40.0 + 120.0) / 2 - 40.0)


@pytest.mark.parametrize("timed", [None, {}, {"fetches": 0, "wall_ms": 0.0, "cpu_ms": 0.0},
                                   {"wall_ms": "x", "cpu_ms": 1.0}, {"wall_ms": True, "cpu_ms": 1.0}])
def test_fetch_times_that_say_nothing_count_the_whole_wait_as_cpu_work(tmp_path, timed) -> None:
    facts = _facts(tmp_path, _trace(SINGLE), {**_meta(2, 2), "dataloader_fetch": timed})
    assert "dataloader.fetch_cpu_ratio" not in facts
    assert facts["dataloader.remaining_ms"] == pytest.approx((2 * 40.0 + 60.0) / 2 - 40.0)


def test_on_many_cores_the_step_falls_nearly_to_the_training_alone(tmp_path) -> None:
    facts = _facts(tmp_path, _trace(SINGLE), _meta(16, 16))
    assert facts["dataloader.remaining_ms"] == pytest.approx((16 * 40.0 + 60.0) / 16 - 40.0)
    # one thread: the training leaves the other cores to the workers
    facts = _facts(tmp_path, _trace(SINGLE), _meta(16, 1))
    assert facts["dataloader.remaining_ms"] == pytest.approx(0.0)


def test_ranks_on_one_machine_share_its_cores(tmp_path) -> None:
    facts = _facts(tmp_path, _trace(SINGLE), _meta(16, 8, nproc=8))
    assert facts["dataloader.cores"] == 2 and facts["dataloader.train_threads"] == 2


def test_without_the_cores_recorded_the_training_alone(tmp_path) -> None:
    facts = _facts(tmp_path, _trace(SINGLE), None)
    assert "dataloader.cores" not in facts
    assert facts["dataloader.remaining_ms"] == 0.0


def test_with_workers_each_wait_shrinks_to_the_hand_over_of_a_ready_batch(tmp_path) -> None:
    facts = _facts(tmp_path, _trace(MULTI, (30000, 2000)), _meta(2, 2))
    assert facts["dataloader.multiprocess"] is True
    assert facts["dataloader.ready_fetch_ms"] == pytest.approx(2.0)
    # of a mean wait of (30 + 2) / 2 ms, a ready batch's 2 ms stays
    assert facts["dataloader.remaining_ms"] == pytest.approx(2.0)  # one batch per step


def test_the_hand_over_of_each_batch_from_a_worker_stays_with_the_training(tmp_path) -> None:
    """The collector measured what taking a ready batch from a worker costs the training process (run.json
    ``dataloader_handover``): one batch a step, 5 ms each, on 16 cores with one training thread."""
    meta = {**_meta(16, 1), "dataloader_handover": {"ms": 5.0, "tensors": 2, "bytes": 33280, "batches": 20}}
    facts = _facts(tmp_path, _trace(SINGLE), meta)
    assert facts["dataloader.handover_ms"] == 5.0
    assert facts["dataloader.remaining_ms"] == pytest.approx(5.0)  # without it: 0 (the test above)
    # on 2 cores with 2 threads it lands in the CPU work spread over the cores
    facts = _facts(tmp_path, _trace(SINGLE), {**_meta(2, 2), "dataloader_handover": meta["dataloader_handover"]})
    assert facts["dataloader.remaining_ms"] == pytest.approx((2 * 40.0 + 5.0 + 60.0) / 2 - 40.0)


def test_a_hand_over_dearer_than_the_fetch_leaves_more_than_the_wait(tmp_path) -> None:
    """An in-memory dataset: a 1 ms fetch in process, a 2 ms hand-over from a worker. Workers would cost more
    than they save: what is left is more than the wait, and DL001 has nothing to give back."""
    meta = {**_meta(2, 1), "dataloader_handover": {"ms": 2.0}}
    facts = _facts(tmp_path, _trace(SINGLE, (1000, 1000)), meta)
    assert facts["dataloader.remaining_ms"] == pytest.approx(2.0)
    assert facts["dataloader.remaining_ms"] > facts["dataloader.fetch_ms"]


@pytest.mark.parametrize("probe", [None, {}, {"ms": None}, {"ms": "x"}, {"ms": True}, {"ms": -1.0}, {"ms": float("nan")},
                                   [1.0]])
def test_a_hand_over_probe_that_says_nothing_is_left_out(tmp_path, probe) -> None:
    facts = _facts(tmp_path, _trace(SINGLE), {**_meta(16, 1), "dataloader_handover": probe})
    assert "dataloader.handover_ms" not in facts
    assert facts["dataloader.remaining_ms"] == pytest.approx(0.0)
