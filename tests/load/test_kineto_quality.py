"""The loader's data-quality check: every event it cannot use as recorded is counted, by kind and field.

Real traces come first: none of the fixture traces has a bad event (a check that cries wolf on real data is a bug).
Then a real trace (the ROCm mini trace, 112 events) with one kind of damage at a time.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest

from advisor.errors import TraceError
from advisor.load.kineto import load_kineto
from advisor.load.kineto_quality import NOTE_SHARE, STEP_KIND
from conftest import KINETO_TRACES, fixture_path

SMALL = "mi250_rocm_minitoy.pt.trace.json.gz"


@pytest.mark.parametrize("name", KINETO_TRACES)
def test_real_traces_have_no_bad_events(name: str) -> None:
    quality = load_kineto(fixture_path("kineto", name)).quality
    assert quality.events > 0
    assert quality.bad == 0, quality.note()
    assert not quality.material


def _doc() -> dict:
    return json.loads(gzip.decompress(fixture_path("kineto", SMALL).read_bytes()))


def _complete(doc: dict, cat: str | None = None) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and (cat is None or e.get("cat") == cat)]


def _load(tmp_path: Path, doc: dict, name: str = "t.json"):  # noqa: ANN202
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return load_kineto(path)


def _problems(quality) -> dict[tuple[str, str, str], int]:  # noqa: ANN001
    return {(p.kind, p.field, p.problem): p.count for p in quality.problems}


def test_missing_dur_is_counted_per_kind_and_kept_as_zero(tmp_path) -> None:
    doc = _doc()
    ops = _complete(doc, "cpu_op")
    for e in ops[:10]:
        del e["dur"]
    trace = _load(tmp_path, doc)
    q = trace.quality
    assert _problems(q) == {("cpu_op", "dur", "missing or not a number"): 10}
    assert q.bad == 10 and q.events == 112 and q.material
    assert len(trace.events) == 112  # kept, 0 long
    assert "`dur` missing or not a number on 10 of 70 cpu_op (counted as 0 long)" in q.note()


def test_missing_ts_is_counted_although_the_event_is_left_out(tmp_path) -> None:
    doc = _doc()
    step = next(e for e in _complete(doc) if e["name"].startswith("ProfilerStep#"))
    del step["ts"]
    for e in _complete(doc, "kernel")[:3]:
        del e["ts"]
    trace = _load(tmp_path, doc)
    q = trace.quality
    assert _problems(q) == {(STEP_KIND, "ts", "missing"): 1, ("kernel", "ts", "missing"): 3}
    assert q.bad == 4 and q.bad_steps == 1 and q.events == 112
    assert len(trace.events) == 108
    assert q.note().startswith("data quality: 4 of 112 events (4%, 1 of them ProfilerStep ranges)")


def test_impossible_values(tmp_path) -> None:
    doc = _doc()
    ops = _complete(doc, "cpu_op")
    ops[0]["dur"] = -5.0  # ends before it starts
    ops[1]["ts"] = ops[1]["ts"] + 1e13  # centuries after the trace
    ops[2]["ts"] = "soon"  # not a number
    kernels = _complete(doc, "kernel")
    del kernels[0]["args"]["stream"]
    kernels[1]["args"]["device"] = "gpu zero"
    del kernels[2]["args"]["correlation"]
    doc["traceEvents"].append(copy.deepcopy(ops[5]))  # the same event twice
    trace = _load(tmp_path, doc)
    assert _problems(trace.quality) == {
        ("cpu_op", "dur", "negative (the event ends before it starts)"): 1,
        ("cpu_op", "", "outside the profiled span"): 1,
        ("cpu_op", "ts", "not a number"): 1,
        ("kernel", "stream", "missing"): 1,
        ("kernel", "device", "missing"): 1,
        ("kernel", "correlation", "missing"): 1,
        ("cpu_op", "", "duplicated"): 1,
    }
    assert trace.quality.bad == 7 and trace.quality.events == 113
    events = trace.events
    assert len(events) == 112  # only the one outside the span is left out
    assert events["ts"].between(events["ts"].min(), events["ts"].min() + 10**10).all()  # no overflowed times


def test_runtime_calls_sharing_a_correlation_id(tmp_path) -> None:
    doc = _doc()
    runtime = _complete(doc, "cuda_runtime")
    runtime[3]["args"]["correlation"] = runtime[2]["args"]["correlation"]
    assert _problems(_load(tmp_path, doc).quality) == {("cuda_runtime", "", "duplicated"): 1}


def test_a_few_bad_events_in_a_big_trace_are_not_material(tmp_path) -> None:
    doc = json.loads(gzip.decompress(fixture_path("kineto", "v100_resnet_single_rank.pt.trace.json.gz").read_bytes()))
    ops = _complete(doc, "cpu_op")
    for e in ops[:100]:  # 100 of 45,419: 0.2%
        del e["dur"]
    q = _load(tmp_path, doc).quality
    assert q.bad == 100 and q.share < NOTE_SHARE and not q.material


@pytest.mark.parametrize(("doc", "message"), [
    ({"traceEvents": []}, "has no events: its traceEvents list is empty"),
    ({"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}]},
     r"has 1 events but no complete \(\"ph\": \"X\"\) event"),
])
def test_a_trace_with_nothing_to_analyse_is_an_error(tmp_path, doc, message) -> None:
    with pytest.raises(TraceError, match=r"t.json: " + message):
        _load(tmp_path, doc)


def test_every_time_removed_is_an_error_naming_the_field(tmp_path) -> None:
    doc = _doc()
    for e in doc["traceEvents"]:
        e.pop("ts", None)
        e.pop("dur", None)
    with pytest.raises(TraceError, match=r"t.json: none of its 112 complete events can be placed in time.*"
                                         r"`ts` missing on 3 of 3 ProfilerStep, 70 of 70 cpu_op"):
        _load(tmp_path, doc)


def test_every_duration_removed_is_an_error_naming_the_field(tmp_path) -> None:
    doc = _doc()
    for e in doc["traceEvents"]:
        e.pop("dur", None)
    with pytest.raises(TraceError, match=r"none of its 112 complete events lasts any time.*`dur` missing"):
        _load(tmp_path, doc)


def test_top_level_values_of_the_wrong_type_are_left_out_and_said(tmp_path) -> None:
    """A `rank` of text or a device list with numbers in it is left out of the metadata, and the note says so."""
    doc = _doc()
    doc["deviceProperties"] = [{"name": "MI250X", "totalGlobalMem": "lots"}, 7]
    doc["distributedInfo"] = {"rank": "x", "world_size": 2, "backend": 5}
    trace = _load(tmp_path, doc)
    assert trace.quality.meta_notes == ["`deviceProperties`: 2 device(s) with fields of the wrong type (left out)",
                                        "`distributedInfo.rank`, `distributedInfo.backend` not a valid value "
                                        "(left out)"]
    assert trace.meta["deviceProperties"] == [{"name": "MI250X"}] and "rank" not in trace.meta
    assert trace.quality.material and trace.quality.bad == 0
    assert trace.quality.note() == "data quality: " + "; ".join(trace.quality.meta_notes)


def test_huge_times_are_outside_the_span_not_an_overflow(tmp_path) -> None:
    """Times beyond what int64 ns can hold (1e300, 2**64 µs) are counted as outside the span and left out."""
    doc = _doc()
    ops = _complete(doc, "cpu_op")
    ops[0]["ts"], ops[1]["ts"], ops[2]["dur"] = 1e300, 2**64, 1e18
    ops[3]["args"] = {"Input Dims": 2**70}  # beyond 64 bits: kept as its text
    trace = _load(tmp_path, doc)
    assert _problems(trace.quality) == {("cpu_op", "", "outside the profiled span"): 3}
    events = trace.events
    assert len(events) == 109
    assert events["ts"].between(events["ts"].min(), events["ts"].min() + 10**10).all()
