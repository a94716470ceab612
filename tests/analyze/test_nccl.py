"""NCCL bandwidth and synchronisation skew on real rank traces (A100s, recorded by others).

Figures worked by hand from the raw events (``zcat ... | python -m json.tool``):

- a100_ddp_nccl_rank0, the 31.5 MB all-reduce of step 0: ``In msg nelems`` 7875584, ``dtype`` Float,
  ``Group size`` 2; ``dur`` 2424.415 us. 7875584 * 4 = 31502336 bytes / 2424415 ns = 12.99 GB/s algbw;
  the all-reduce factor 2 (n - 1) / n is 1 for two ranks, so busbw is the same.
- its fifteen all-reduces (five per step, 8.2 to 31.5 MB, all "large"): 3 * 102228128 bytes over
  46762159 ns of kernels = 6.56 GB/s time-weighted (step 2's three slowest, near 6 ms each, pull it down),
  2.19 % of NVLink3's 300 GB/s; at 0.7 of it they would take 306684384 / 210 GB/s = 1.46 ms, against
  46.76 ms: 15.10 ms per step of excess.
- a100_recsys_2of128_ranks: 10 SendRecv kernels per rank, no message sizes. Paired by order within each
  ProfilerStep, four pairs end together: rank 0 / rank 1 end differences -55, +332, +8, -189 us (the six
  others differ by 8.9 to 134 ms), so rank 1's clock is 23.5 us behind (the median of the four). Rank 1
  arrives last at all four: raw start differences 3302, 84, 22328 and 1292 us, each 23.5 us more once
  aligned: (27006 + 4 * 23.5) us / 2 steps = 13.55 ms per step of skew.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import fixture_path

from advisor.analyze.framework import gpu_spec
from advisor.analyze.framework.view import TraceView
from advisor.analyze.ranks import skew as skew_mod
from advisor.analyze.ranks.collectives import bus_factor, collective_kernels, collective_type
from advisor.analyze.ranks.nccl_bandwidth import ATTAINABLE_SHARE, LARGE_BYTES
from advisor.engine.evaluate import evaluate_rules
from advisor.engine.rulebook import RuleBook
from advisor.errors import InputError
from advisor.pipeline import analyze_traces, load_traces

RECSYS = [fixture_path("kineto", "a100_recsys_2of128_ranks", f"rank{r}.pt.trace.json.gz") for r in (0, 1)]


@pytest.fixture(scope="module")
def ddp_view() -> TraceView:
    [trace] = load_traces([fixture_path("kineto", "a100_ddp_nccl_rank0.pt.trace.json.gz")])
    return TraceView(trace)


@pytest.fixture(scope="module")
def ddp(ddp_view: TraceView) -> dict:
    return analyze_traces([ddp_view.trace]).values()


@pytest.fixture(scope="module")
def recsys() -> dict:
    return analyze_traces(load_traces(RECSYS)).values()


def test_bus_factors_follow_nccl_tests() -> None:
    assert bus_factor("allreduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("allreduce", 2) == 1.0
    assert bus_factor("allgather", 4) == bus_factor("reducescatter", 4) == bus_factor("alltoall", 4) == 0.75
    assert bus_factor("broadcast", 8) == bus_factor("reduce", 8) == bus_factor("sendrecv", 128) == 1.0
    assert bus_factor("other", 8) == 1.0


def test_collective_types_from_c10d_or_the_kernel_name() -> None:
    assert collective_type("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)") == \
        "allreduce"
    assert collective_type("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == \
        "reducescatter"
    assert collective_type("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "all_gather") == "allgather"
    assert collective_type("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)") == "sendrecv"


def test_one_row_per_kernel_with_its_message(ddp_view: TraceView) -> None:
    rows = collective_kernels(ddp_view)
    assert len(rows) == 21 and set(rows["collective"]) == {"allreduce", "broadcast"}
    assert set(rows["algo"]) == {"RING"} and set(rows["proto"]) == {"LL"} and set(rows["group"]) == {2}
    big = rows[rows["bytes"] == 7875584 * 4].iloc[0]  # hand-worked: see the module docstring
    assert big["dur"] == 2424415
    assert big["algbw_gb_s"] == pytest.approx(12.99, abs=0.01)
    assert big["busbw_gb_s"] == big["algbw_gb_s"]


def test_large_collectives_against_nvlink(ddp: dict) -> None:
    assert ddp["comm.link"] == "NVLink3" and ddp["comm.link_gb_s"] == 300
    assert ddp["comm.large_busbw_gb_s"] == pytest.approx(306684384 / 46762159, rel=1e-6)
    assert ddp["comm.large_ms"] == pytest.approx(46.762159 / 3, rel=1e-6)
    assert ddp["comm.large_link_share"] == pytest.approx(306684384 / 46762159 / 300, rel=1e-6)
    ideal_ms = 306684384 / (ATTAINABLE_SHARE * 300) / 1e6
    assert ddp["comm.large_excess_ms"] == pytest.approx((46.762159 - ideal_ms) / 3, rel=1e-6)
    assert ddp["comm.large_best_busbw_gb_s"] == pytest.approx(12.99, abs=0.01)
    table = ddp["comm.bandwidth"]
    assert sum(r["calls"] for r in table) == 21
    assert {r["collective"] for r in table if r["bytes"] < LARGE_BYTES} == {"broadcast"}


def test_no_link_peak_gives_a_note(ddp_view: TraceView, tmp_path) -> None:
    spec = tmp_path / "gpus.yaml"
    spec.write_text("gpus:\n  - {name: A100 without link, match: A100, memory_tb_s: 1.5, vector: {fp32: 19.5}}\n")
    findings = analyze_traces([ddp_view.trace], run_meta={"gpu_spec": str(spec)}).values()
    assert "no link figure" in findings["comm.link_note"]
    assert "comm.large_link_share" not in findings and findings["comm.large_busbw_gb_s"] > 0


def test_single_gpu_trace_has_no_collectives() -> None:
    findings = analyze_traces(load_traces([fixture_path("kineto", "v100_resnet_single_rank.pt.trace.json.gz")]))
    facts = findings.values()
    assert not any(k.startswith(("comm.large", "comm.bandwidth", "ranks.skew")) for k in facts)


def test_recsys_skew_against_the_hand_worked_figures(recsys: dict) -> None:
    """Four SendRecv exchanges are the k-th of their step on both ranks (ends within 0.4 ms once aligned); a
    fifth is rank 0's second of step 551 and rank 1's first (both end at ...898187835 us, the first and second
    of each rank are 62.8 and 41.4 ms apart otherwise): matched by its end, its 4.88 ms of skew count too."""
    assert recsys["ranks.skew.unaligned"] is False
    assert recsys["ranks.skew.matched"] == 5
    rows = {r["rank"]: r for r in recsys["ranks.skew.table"]}
    assert rows[0]["collectives"] == rows[1]["collectives"] == 10
    assert rows[1]["offset_us"] == pytest.approx(-23.5, abs=0.01) and rows[1]["agreeing"] == 4
    # the k-th pairs' 27.1 ms, and step 551's pair matched by its end: rank 1 starts at ...898129911 us, rank 0
    # at ...898125052 us, 23.5 us apart on the clocks
    by_order = (27006 + 4 * 23.5) / 1e3
    by_end = (129911 + 23.5 - 125052) / 1e3
    assert recsys["ranks.skew.ms_per_step"] == pytest.approx((by_order + by_end) / 2, abs=0.001)
    assert rows[0]["skew_ms"] == pytest.approx(recsys["ranks.skew.ms_per_step"]) and rows[1]["skew_ms"] == 0
    assert recsys["ranks.skew.last_rank"] == 1 and recsys["ranks.skew.last_share"] == 1.0
    # the exchange after rank 1 arrives: 8.4 + 42.6 + 13.8 + 62.3 ms, and 57.9 ms for the end-matched one
    # (mean of the ranks), over two steps
    assert recsys["ranks.skew.comm_ms_per_step"] == pytest.approx((127.0 + 57.9) / 2, abs=0.05)
    skew, comm = recsys["ranks.skew.ms_per_step"], recsys["ranks.skew.comm_ms_per_step"]
    assert recsys["ranks.skew.share"] == pytest.approx(skew / (skew + comm))


def test_sendrecv_is_matched_by_its_end_not_its_order() -> None:
    """match_by_end pairs nearest ends first, each kernel once, within the tolerance; other types keep k-th keys."""
    ms = 1_000_000
    ref = {(1, "sendrecv", 0, 0): (0, 10 * ms), (1, "sendrecv", 0, 1): (11 * ms, 30 * ms),
           (1, "allreduce", 64, 0): (40 * ms, 41 * ms)}
    other = {(1, "sendrecv", 0, 0): (5 * ms, 30 * ms + 100), (1, "sendrecv", 0, 1): (31 * ms, 50 * ms),
             (1, "allreduce", 64, 0): (40 * ms, 42 * ms)}
    matched = skew_mod.match_by_end(ref, other, offset=0.0)
    assert matched == {(1, "sendrecv", 0, 1): (5 * ms, 30 * ms + 100), (1, "allreduce", 64, 0): (40 * ms, 42 * ms)}
    shifted = skew_mod.match_by_end(ref, {k: (a + 7 * ms, b + 7 * ms) for k, (a, b) in other.items()}, 7 * ms)
    assert set(shifted) == set(matched)  # the clock offset is taken off first
    assert skew_mod.match_by_end(ref, other, offset=skew_mod.TOLERANCE_NS + 101) == {
        (1, "allreduce", 64, 0): (40 * ms, 42 * ms)}  # beyond the tolerance: no partner


def test_clock_offset_is_the_agreeing_pairs_median() -> None:
    us = 1e3
    diffs = np.array([62789, 87882, -55, 134153, 332, -67842, 28808, -13869, 8, -189]) * us
    offset, agreeing = skew_mod.clock_offset(diffs)
    assert agreeing == 4 and offset == pytest.approx(-23.5 * us)
    assert skew_mod.clock_offset(np.array([0.0, 5e6, 9e6]))[1] == 1  # nothing agrees: below MIN_AGREEING


def test_clocks_that_cannot_be_aligned(monkeypatch) -> None:
    monkeypatch.setattr(skew_mod, "MIN_AGREEING", 5)
    findings = analyze_traces(load_traces(RECSYS)).values()
    assert findings["ranks.skew.unaligned"] is True and findings["ranks.skew.matched"] == 0
    assert "ranks.skew.ms_per_step" not in findings


BOOK = RuleBook.load(env=False)


def _fired(values: dict) -> dict[str, object]:
    diagnoses, _ = evaluate_rules([BOOK[r] for r in ("GPU007", "DIST004", "DIST005")], values,
                                  values.get("steps.time_ms"))
    return {d.rule_id: d for d in diagnoses}


def test_low_bandwidth_is_told_once_on_the_ddp_run_only(ddp: dict, recsys: dict) -> None:
    """The DDP run's large all-reduces are slow (2% of NVLink3) and exposed (13.2 ms per step): one story, GPU007,
    which tells the bandwidth too; DIST004 stays quiet, and the gain is counted once."""
    fired = _fired(ddp)
    assert set(fired) == {"GPU007"}
    gpu007 = fired["GPU007"]
    assert "2% of the NVLink3 link's peak" in gpu007.what and "NCCL_DEBUG_SUBSYS" in gpu007.fix
    # both fixes act on the exposed 13.2 ms: overlap (half of it) and bandwidth (its 15.1 ms excess over 70% of
    # NVLink3, at most the exposed time) together give back E * (1 - 0.5 * (1 - min(excess, E) / E)) = E here
    exposed, excess = ddp["comm.exposed_ms"], ddp["comm.large_excess_ms"]
    assert excess > exposed and gpu007.impact_ms == pytest.approx(exposed)
    hidden = {**ddp, "comm.exposed_share": 0.01}  # the same collectives hidden behind compute: DIST004 tells them
    fired = _fired(hidden)
    assert set(fired) == {"DIST004"} and fired["DIST004"].impact_ms == pytest.approx(min(excess, exposed))
    assert not {"DIST004", "DIST005"} & set(_fired(recsys))  # no message sizes; 18% skew (GPU007 fires: exposed)
    v100 = analyze_traces(load_traces([fixture_path("kineto", "v100_resnet_single_rank.pt.trace.json.gz")]))
    assert not _fired(v100.values())


def test_every_nvidia_gpu_has_a_link_with_its_source() -> None:
    for spec in gpu_spec.load_specs():
        if spec.name.startswith("NVIDIA"):
            assert spec.link is not None and spec.link.gb_s > 0 and spec.link.source.startswith("https://"), spec.name
    a100 = next(s for s in gpu_spec.load_specs() if s.name == "NVIDIA A100 SXM4 40GB")
    assert (a100.link.name, a100.link.gb_s) == ("NVLink3", 300)  # 600 GB/s both directions, halved


def test_a_malformed_link_is_an_input_error(tmp_path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text("gpus:\n  - {name: X, match: X, memory_tb_s: 1, link: {name: NVLink, gb_s: -1}}\n")
    with pytest.raises(InputError, match="link"):
        gpu_spec.load_specs(path)
