"""The cross-rank analysis on real rank traces (recorded on A100s by others), and its rule's knowledge entry."""

from __future__ import annotations

import pytest

from advisor.analyze.registry import registered
from advisor.pipeline import analyze_traces, load_traces
from advisor.resources import knowledge_dir
from conftest import fixture_path

PHASES = ("dataloader", "forward", "backward", "optimizer", "other")


@pytest.fixture(scope="module")
def recsys() -> dict:
    paths = [fixture_path("kineto", "a100_recsys_2of128_ranks", f"rank{r}.pt.trace.json.gz") for r in (0, 1)]
    return analyze_traces(load_traces(paths)).values()


def test_each_rank_gets_its_own_figures(recsys: dict) -> None:
    assert recsys["ranks.count"] == 2
    rows = recsys["ranks.step_ms"]
    assert [r["rank"] for r in rows] == [0, 1]
    for row in rows:
        assert row["steps"] == 2
        # a row adds up: the phases outside collectives, plus the collectives, make the step
        assert row["busy_ms"] + row["collective_ms"] == pytest.approx(row["step_ms"])
        assert sum(row[f"{p}_ms"] for p in PHASES) + row["collective_ms"] == pytest.approx(row["step_ms"])
        assert row["collective_ms"] > 0  # nccl:all_to_all and c10d::alltoall_base_ on the host
    # waits are matched step by step, so the rank that waits least may still wait in one of the steps
    assert all(0 <= r["wait_ms"] <= r["collective_ms"] for r in rows)
    assert min(r["wait_ms"] for r in rows) < 0.1 * min(r["collective_ms"] for r in rows)


def test_cross_rank_view(recsys: dict) -> None:
    rows = {r["rank"]: r for r in recsys["ranks.step_ms"]}
    assert recsys["ranks.straggler"] == max(rows, key=lambda r: rows[r]["busy_ms"])
    assert recsys["ranks.slowest"] == max(rows, key=lambda r: rows[r]["step_ms"])
    steps = [r["step_ms"] for r in rows.values()]
    assert recsys["ranks.spread"] == pytest.approx((max(steps) - min(steps)) / (sum(steps) / 2))
    other = 1 - recsys["ranks.straggler"]
    assert recsys["ranks.collective_wait_ms"] == pytest.approx(rows[other]["wait_ms"])
    assert recsys["ranks.straggler_phase"] in PHASES
    # the per-trace findings stay those of the first rank
    assert recsys["trace.rank"] == 0 and recsys["trace.world_size"] == 128


def test_ranks_without_distinct_numbers_are_numbered_in_file_order() -> None:
    paths = [fixture_path("kineto", name) for name in ("no_distributed_info.pt.trace.json.gz",
                                                        "v100_resnet_single_rank.pt.trace.json.gz")]
    findings = analyze_traces(load_traces(paths))
    assert [r["rank"] for r in findings.get("ranks.step_ms")] == [0, 1]
    assert any("numbered in file order" in note for note in findings.notes)


def test_one_trace_has_no_rank_comparison() -> None:
    findings = analyze_traces(load_traces([fixture_path("kineto", "a100_ddp_nccl_rank0.pt.trace.json.gz")]))
    assert "ranks.count" not in findings and "ranks" not in findings.skipped


def test_rank_analyzers_are_declared_as_such() -> None:
    names = {"ranks", "gpu_ranks", "rank_skew", "rank_pool_waits", "rank_work"}
    assert {a.name for a in registered("framework", scope="ranks")} == names
    assert not names & {a.name for a in registered("framework", scope="trace")}


def test_straggler_knowledge_entry_has_every_section() -> None:
    text = (knowledge_dir() / "straggler-rank.md").read_text()
    assert text.startswith("---\nid: straggler-rank\n")
    for section in ("What it looks like", "Why it slows training", "How to fix", "Expected gain", "References"):
        assert f"\n## {section}\n" in text, section
    assert "```python" in text


def test_waits_are_matched_step_by_step() -> None:
    """Seen on two gloo ranks here: the straggler (rank 0) waited 164 ms in its first profiled step for rank 1,
    whose profiler started later, and rank 1 waited ~40 ms for it in each step after. Comparing whole windows
    made rank 1 the rank that 'never waits'; step by step, its wait shows."""
    from advisor.analyze.ranks.waits import matched_waits

    def _waits(rows: list[dict]) -> list[float]:
        return matched_waits([r["collective_ns_by_step"] for r in rows], [r["collective_ms"] for r in rows])

    ms = 1_000_000
    rows = [{"collective_ms": (166 + 2 + 3) / 3, "collective_ns_by_step": {2: 166 * ms, 3: 2 * ms, 4: 3 * ms}},
            {"collective_ms": (46 + 42 + 39) / 3, "collective_ns_by_step": {2: 46 * ms, 3: 42 * ms, 4: 39 * ms}}]
    assert _waits(rows) == pytest.approx([120 / 3, (40 + 36) / 3])
    # no step in common (a window without ProfilerStep ranges): whole windows are compared
    rows[1]["collective_ns_by_step"] = {-1: 127 * ms}
    assert _waits(rows) == pytest.approx([171 / 3 - 127 / 3, 0])
