"""Traces over the memory budget are analysed on a window of steps, the same events a full load has there, and say so."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest

from advisor.engine.rulebook import RuleBook
from advisor.errors import TraceError
from advisor.load import json_stream
from advisor.load.kineto import load_kineto
from advisor.load.kineto_window import FIXED_MB, MEMORY_ENV, MEMORY_PER_JSON, budget_bytes, json_size, plan_window
from advisor.pipeline import analyze_traces, diagnose_findings, load_traces
from conftest import fixture_path

V100 = "v100_resnet_single_rank.pt.trace.json.gz"


def _ns(us: float) -> int:
    """µs on the trace's clock -> ns, as the loader converts (exactly, near an integer origin)."""
    base = math.floor(us)
    return round((us - base) * 1000) + base * 1000


def test_json_size_of_gzip_and_plain_files(tmp_path) -> None:
    path = fixture_path("kineto", V100)
    text = gzip.decompress(path.read_bytes())
    assert json_size(path) == len(text)
    plain = tmp_path / "t.json"
    plain.write_bytes(text)
    assert json_size(plain) == len(text)


def test_under_the_budget_there_is_no_window() -> None:
    path = fixture_path("kineto", V100)
    assert plan_window(path, budget=json_size(path)) is None


def test_the_window_is_steps_in_the_middle_that_fit() -> None:
    path = fixture_path("kineto", V100)
    full = load_kineto(path)
    window = plan_window(path, budget=json_size(path) // 2)
    assert window is not None
    assert window.total_steps == 5
    assert 1 <= len(window.steps) < 5
    assert window.steps == list(range(window.steps[0], window.steps[0] + len(window.steps)))
    assert window.events <= window.total_events // 2 + 1
    # the steps chosen are ProfilerSteps of the trace, and the window spans exactly them
    steps = full.events[full.events["name"].astype(str).str.startswith("ProfilerStep#")]
    chosen = steps[steps["name"].isin([f"ProfilerStep#{n}" for n in window.steps])]
    # (the end is the step's start plus its length in µs floats: within a µs of the loader's exact ns)
    assert _ns(window.lo_us) == chosen["ts"].min() and abs(_ns(window.hi_us) - chosen["end"].max()) < 1000
    assert "the middle of the trace" in window.note()


@pytest.mark.parametrize("skip", [True, False])
def test_a_window_holds_the_full_loads_events_that_overlap_it(skip: bool, monkeypatch) -> None:
    """Every event overlapping the window, nothing else: as a full load filtered afterwards (pieces skipped or not)."""
    monkeypatch.setattr(json_stream, "PIECE_BYTES", 64 << 10)  # many pieces, so that some lie outside the window
    path = fixture_path("kineto", V100)
    full = load_kineto(path)
    window = plan_window(path, budget=json_size(path) // 3)
    assert window is not None and window.skip  # pieces wholly outside the window exist
    if not skip:
        window.skip = {}
    part = load_kineto(path, window=window)
    lo, hi = _ns(window.lo_us), _ns(window.hi_us)
    e = full.events
    inside = e[((e["ts"] < hi) & ((e["ts"] >= lo) | (e["end"] > lo))).to_numpy()].reset_index(drop=True)
    got = part.events
    for column in ("ts", "dur", "end", "pid", "tid", "external_id", "correlation", "stream"):
        np.testing.assert_array_equal(got[column].to_numpy(), inside[column].to_numpy(), err_msg=column)
    for column in ("cat", "name", "input_types"):
        assert got[column].astype(str).tolist() == inside[column].astype(str).tolist(), column
    assert len(part.flows) < len(full.flows)
    assert part.meta["advisor_window"]["steps"] == window.steps


def test_the_report_says_which_steps_were_analysed_and_why(monkeypatch) -> None:
    path = fixture_path("kineto", V100)
    monkeypatch.setenv(MEMORY_ENV, str(FIXED_MB + json_size(path) / 2 / (1 << 20) * MEMORY_PER_JSON))
    traces = load_traces([path])
    findings = analyze_traces(traces)
    facts = findings.values()
    window = traces[0].meta["advisor_window"]
    assert facts["trace.partial"] is True and facts["trace.total_steps"] == 5
    assert facts["steps.count"] == len(window["steps"])
    assert facts["trace.analysed_steps"].startswith(f"only step")
    assert f"${MEMORY_ENV}" in facts["trace.analysed_steps"]
    assert any(window["note"] in note for note in findings.notes)
    verdict = diagnose_findings(findings, RuleBook.load([])).verdict
    assert verdict.missing[0] == facts["trace.analysed_steps"]
    assert verdict.status != "inconclusive" or len(verdict.missing) > 1  # a window alone still supports a verdict


def test_a_whole_trace_is_not_partial() -> None:
    facts = analyze_traces(load_traces([fixture_path("kineto", "a100_ddp_nccl_rank0.pt.trace.json.gz")])).values()
    assert facts["trace.partial"] is False and "trace.analysed_steps" not in facts


def test_budget_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(MEMORY_ENV, raising=False)
    assert budget_bytes() == int((3072 - FIXED_MB) / MEMORY_PER_JSON * (1 << 20))  # about 1.7 GiB of JSON
    monkeypatch.setenv(MEMORY_ENV, str(FIXED_MB + 10 * MEMORY_PER_JSON))
    assert abs(budget_bytes() - 10 * (1 << 20)) <= 1
    monkeypatch.setenv(MEMORY_ENV, "lots")
    with pytest.raises(TraceError, match="not a number of megabytes"):
        budget_bytes()
    monkeypatch.setenv(MEMORY_ENV, "64")
    with pytest.raises(TraceError, match="more than"):
        budget_bytes()


def test_a_trace_without_steps_is_windowed_by_time(tmp_path) -> None:
    events = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 1, "tid": 1, "ts": 1000.0 + 10 * i,
               "dur": 5.0, "args": {"External id": i}} for i in range(4000)]
    path = tmp_path / "nosteps.json"
    path.write_text(json.dumps({"traceEvents": events}))
    window = plan_window(path, budget=path.stat().st_size // 4)
    assert window is not None and window.steps == [] and window.total_steps == 0
    part = load_kineto(path, window=window)
    assert 900 <= len(part.events) <= 1001
    middle = part.events["ts"].to_numpy() / 1000
    assert middle.min() >= 1000 + 10 * 1400 and middle.max() <= 1000 + 10 * 2600
    assert "no ProfilerStep ranges" in window.note()
