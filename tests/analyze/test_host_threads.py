"""HOST001's wait figure on a small trace worked out by hand: the trace's own small operators stand in for the
collector's probe when the probe happened to run while the cores were free; with two ranks, the rank whose waits
took the largest share of its steps gives the figure.

Two 50 ms steps of two ranks with two threads each on two cores. Each step: eight ReLUs of 40 us, one of which
waited 6 ms for a core; an in-place add of 10 us that once waited 4 ms; a copy that is small in most calls and
large (20 ms) in one, which is its work, not a wait; and a matmul of 10 ms. (The 8 ReLUs and 4 adds are per step;
a kind must have five calls in the window.) The probe after each step took 80 us.
"""

from __future__ import annotations

import json

import pytest

from advisor.analyze.framework.host import host_threads
from advisor.analyze.framework.view import TraceView
from advisor.analyze.ranks.pool_waits import rank_pool_waits
from advisor.analyze.ranks.rankset import RankSet
from advisor.load.kineto import load_kineto
from advisor.naming import POOL_PROBE_RANGE

META = {"nproc_per_node": 2, "threads_at_capture": {"torch_num_threads": 2, "usable_cores": 2,
                                                   "parallel_region_us": 60.0}}


def _x(cat: str, name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": {}}


def _trace(relu_wait_us: float, add_wait_us: float, step_us: float = 50000.0) -> dict:
    events = []
    for n in range(2):
        t = step_us * n
        events.append(_x("user_annotation", f"ProfilerStep#{n + 1}", t, step_us))
        at = t + 100
        for i in range(8):
            dur = 40 + (relu_wait_us if n == 1 and i == 3 else 0)
            events.append(_x("cpu_op", "aten::relu", at, dur))
            at += dur + 10
        for i in range(4):
            dur = 10 + (add_wait_us if n == 0 and i == 0 else 0)
            events.append(_x("cpu_op", "aten::add_", at, dur))
            at += dur + 10
        for i in range(4):
            dur = 20000 if n == 0 and i == 0 else 20
            events.append(_x("cpu_op", "aten::copy_", at, dur))
            at += dur + 10
        events.append(_x("cpu_op", "aten::mm", at, 10000))
        at += 10010
        events.append(_x("user_annotation", POOL_PROBE_RANGE, at, 80))
        events.append(_x("cpu_op", "aten::fill_", at + 5, 70))
    return {"traceEvents": events}


def _facts(tmp_path, trace: dict) -> dict:
    path = tmp_path / "trace.pt.trace.json"
    path.write_text(json.dumps(trace))
    return host_threads(TraceView(load_kineto(path), META))


def test_small_operators_that_waited_give_the_wait(tmp_path) -> None:
    facts = _facts(tmp_path, _trace(relu_wait_us=6000, add_wait_us=4000))
    assert facts["host.demand_excess"] == 2
    # the median of the small operators' long calls (6, 4 and the copy's 20 ms), not the probe's 80 us
    assert facts["host.parallel_region_ms"] == pytest.approx(6.0, abs=0.01)
    # the operators with a millisecond of their own, each at most two waits (12 ms): two matmuls (10 ms), the copy
    # (20 ms, capped), the ReLU (6.04 ms) and the add (4.01 ms), over two steps
    assert facts["host.pool_waits_per_step"] == 2.5
    assert facts["host.pool_wait_ms"] == pytest.approx((10 + 10 + 12 + 6.04 + 4.01) / 2, abs=0.01)


def test_one_kind_of_long_operator_is_work_not_a_wait(tmp_path) -> None:
    facts = _facts(tmp_path, _trace(relu_wait_us=0, add_wait_us=0))
    assert facts["host.parallel_region_ms"] == pytest.approx(0.08)  # the probe's figure: no waits
    # each long operator counts two probe waits at most: two matmuls and the copy
    assert facts["host.pool_wait_ms"] == pytest.approx(3 * 0.16 / 2, abs=0.01)


def _rank_view(tmp_path, rank: int, trace: dict) -> TraceView:
    path = tmp_path / f"rank{rank}.pt.trace.json"
    path.write_text(json.dumps({**trace, "distributedInfo": {"rank": rank, "world_size": 2}}))
    return TraceView(load_kineto(path), META)


def test_the_rank_that_waited_longest_gives_the_ranks_figures(tmp_path) -> None:
    # The first rank's operators never waited; the second's ReLU and add did, as in the host_threads case above.
    views = [_rank_view(tmp_path, 0, _trace(relu_wait_us=0, add_wait_us=0)),
             _rank_view(tmp_path, 1, _trace(relu_wait_us=6000, add_wait_us=4000))]
    facts = rank_pool_waits(RankSet(views))
    assert facts["ranks.pool_wait_rank"] == 1
    assert facts["ranks.parallel_region_ms"] == pytest.approx(6.0, abs=0.01)
    assert facts["ranks.pool_waits_per_step"] == 2.5
    assert facts["ranks.pool_wait_ms"] == pytest.approx((10 + 10 + 12 + 6.04 + 4.01) / 2, abs=0.01)
    first = host_threads(views[0])
    assert first["host.pool_wait_ms"] == pytest.approx(3 * 0.16 / 2, abs=0.01)  # what HOST001 read before


def test_the_rank_that_waited_the_largest_share_of_its_steps_gives_the_figures(tmp_path) -> None:
    # The second rank's waits add up to more milliseconds per step, but over steps three times as long (a rank's
    # first and last recorded steps take in the other ranks' profiler start-up and export): the first rank's
    # share is the larger, and it gives the figures HOST001 prices on the first rank's step.
    views = [_rank_view(tmp_path, 0, _trace(relu_wait_us=6000, add_wait_us=4000)),
             _rank_view(tmp_path, 1, _trace(relu_wait_us=7000, add_wait_us=4000, step_us=150000.0))]
    second = host_threads(views[1])
    facts = rank_pool_waits(RankSet(views))
    assert second["host.pool_wait_ms"] == pytest.approx((10 + 10 + 14 + 7.04 + 4.01) / 2, abs=0.01)
    assert second["host.pool_wait_ms"] > facts["ranks.pool_wait_ms"]
    assert facts["ranks.pool_wait_rank"] == 0
    assert facts["ranks.pool_wait_ms"] == pytest.approx((10 + 10 + 12 + 6.04 + 4.01) / 2, abs=0.01)
    assert facts["ranks.pool_wait_share"] == pytest.approx(facts["ranks.pool_wait_ms"] / 50, abs=0.001)


def test_ranks_without_the_collectors_probes_give_no_figures(tmp_path) -> None:
    plain = {"traceEvents": [e for e in _trace(0, 0)["traceEvents"]
                             if e["name"] not in (POOL_PROBE_RANGE, "aten::fill_")]}
    views = [_rank_view(tmp_path, r, plain) for r in (0, 1)]
    assert rank_pool_waits(RankSet(views)) == {}
