"""Closures, nested phases and inference: the step split where one phase runs inside another.

The collector's own runs of Lightning, LBFGS and inference loops are in tests/frameworks; these tests pin the
analysis on small traces shaped like what the profiler writes, and on real inference traces recorded by others.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import run_analyzers
from advisor.load.kineto import load_kineto
from advisor.naming import CLOSURE, PHASE_NAMES
from advisor.pipeline import analyze_traces, load_traces
from conftest import fixture_path


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def _op(name: str, ts: float, dur: float, seq: int | None = None) -> dict:
    return _x("cpu_op", name, ts, dur, **({"Sequence number": seq} if seq is not None else {}))


def _view(tmp_path: Path, events: list[dict], run_meta: dict | None = None) -> TraceView:
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return TraceView(load_kineto(path), run_meta)


def _closure_step(start: float, labels: bool) -> list[dict]:
    """One 1000 us step: optimizer.step(closure) whose closure runs forward (300 us) and backward (400 us),
    then a 200 us update; as the collector writes it (labels) or as torch alone does (``Optimizer.step#``)."""
    t = start
    events = [_x("user_annotation", f"ProfilerStep#{int(start) // 1000}", t, 1000)]
    if labels:
        events += [
            _x("user_annotation", PHASE_NAMES["optimizer"], t + 10, 40),         # before the closure
            _x("user_annotation", CLOSURE, t + 50, 720),
            _x("user_annotation", PHASE_NAMES["forward"], t + 60, 300),
            _x("user_annotation", PHASE_NAMES["backward"], t + 400, 400 - 40),
            _x("user_annotation", PHASE_NAMES["optimizer"], t + 770, 200),        # the update
        ]
    else:
        events += [
            _x("user_annotation", "Optimizer.step#LBFGS.step", t + 10, 960),
            _x("python_function", "nn.Module: Net_0", t + 60, 300),
            _op("autograd::engine::evaluate_function: AddmmBackward0", t + 400, 360, seq=1),
        ]
    events += [_op("aten::addmm", t + 70, 280, seq=1), _op("aten::mm", t + 410, 340), _op("aten::add_", t + 780, 180)]
    return events


@pytest.mark.parametrize("labels", [True, False], ids=["collector labels", "torch annotations"])
def test_a_closure_is_forward_and_backward_not_optimizer(tmp_path: Path, labels: bool) -> None:
    view = _view(tmp_path, [e for s in (0, 1000, 2000) for e in _closure_step(s, labels)])
    f = run_analyzers(view).values()
    assert f["steps.count"] == 3
    assert f["phases.forward.ms"] == pytest.approx(0.300)
    assert f["phases.backward.ms"] == pytest.approx(0.360)
    # the optimizer phase is what is left of the step call: the update (and the little before the closure)
    expected_optimizer = 0.240 if labels else 0.960 - 0.300 - 0.360
    assert f["phases.optimizer.ms"] == pytest.approx(expected_optimizer)
    assert f["workload.kind"] == "training"
    assert f["optimizer.closure"] is True
    assert f["optimizer.closure_ms"] == pytest.approx(0.660)  # the forward and backward inside it


def test_a_closure_that_does_nothing_is_no_closure_loop(tmp_path: Path) -> None:
    """Lightning's manual optimization: training_step runs forward and backward, then optimizer.step() with a
    closure that does nothing. The report must not say that forward and backward ran inside the step."""
    events = []
    for s in (0, 1000, 2000):
        events += [_x("user_annotation", f"ProfilerStep#{s // 1000}", s, 1000),
                   _x("user_annotation", PHASE_NAMES["forward"], s + 10, 300), _op("aten::addmm", s + 20, 280, seq=1),
                   _x("user_annotation", PHASE_NAMES["backward"], s + 400, 300), _op("aten::mm", s + 410, 280),
                   _x("user_annotation", PHASE_NAMES["optimizer"], s + 750, 10),
                   _x("user_annotation", CLOSURE, s + 760, 5),
                   _x("user_annotation", PHASE_NAMES["optimizer"], s + 765, 200), _op("aten::add_", s + 770, 180)]
    f = run_analyzers(_view(tmp_path, events)).values()
    assert (f["optimizer.closure"], f["optimizer.closure_ms"]) == (False, 0.0)
    assert f["phases.forward.ms"] == pytest.approx(0.300) and f["phases.backward.ms"] == pytest.approx(0.300)


def test_a_plain_training_loop_has_no_closure(tmp_path: Path) -> None:
    events = []
    for s in (0, 1000, 2000):
        events += [_x("user_annotation", f"ProfilerStep#{s // 1000}", s, 1000),
                   _x("user_annotation", PHASE_NAMES["forward"], s + 10, 300), _op("aten::addmm", s + 20, 280, seq=1),
                   _x("user_annotation", PHASE_NAMES["backward"], s + 400, 300), _op("aten::mm", s + 410, 280),
                   _x("user_annotation", PHASE_NAMES["optimizer"], s + 750, 200), _op("aten::add_", s + 760, 180)]
    f = run_analyzers(_view(tmp_path, events)).values()
    assert (f["optimizer.closure"], f["optimizer.closure_ms"]) == (False, 0.0)
    assert f["phases.optimizer.ms"] == pytest.approx(0.200)


def test_recompute_inside_backward_stays_backward(tmp_path: Path) -> None:
    """Activation checkpointing: a module's forward runs again inside backward (in traces from elsewhere)."""
    events = []
    for s in (0, 1000, 2000):
        events += [_x("user_annotation", f"ProfilerStep#{s // 1000}", s, 1000),
                   _x("python_function", "nn.Module: Block_0", s + 10, 200), _op("aten::addmm", s + 20, 180, seq=3),
                   _op("autograd::engine::evaluate_function: CheckpointFunctionBackward", s + 300, 600, seq=3),
                   _x("python_function", "nn.Module: Block_0", s + 310, 200)]
    f = run_analyzers(_view(tmp_path, events)).values()
    assert f["phases.forward.ms"] == pytest.approx(0.200)
    assert f["phases.backward.ms"] == pytest.approx(0.600)


def _inference(tmp_path: Path, recorded: bool, run_meta: dict | None = None) -> dict:
    events = []
    for s in (0, 1000, 2000, 3000):
        events += [_x("user_annotation", f"ProfilerStep#{s // 1000}", s, 1000),
                   _x("user_annotation", PHASE_NAMES["forward"], s + 10, 800),
                   _op("aten::linear", s + 20, 300, seq=s // 500 if recorded else None),  # a new node each
                   _op("aten::gelu", s + 330, 100, seq=s // 500 + 1 if recorded else None),
                   _op("aten::argmax", s + 850, 50)]
    return run_analyzers(_view(tmp_path, events, run_meta)).values()


def test_an_inference_loop(tmp_path: Path) -> None:
    f = _inference(tmp_path, recorded=False)
    assert f["workload.kind"] == "inference"
    assert f["workload.autograd_share"] == 0.0 and f["workload.forward_ops_per_step"] == 2
    assert "optimizer.closure" not in f
    recorded = _inference(tmp_path, recorded=True)
    assert recorded["workload.autograd_share"] == 1.0
    assert "workload.autograd_ms" not in recorded  # a trace recorded elsewhere: no cost measured


def test_autograd_recording_is_priced_by_the_kind_of_op(tmp_path: Path) -> None:
    """The linear layer at the matrix product's cost, gelu at the pointwise op's; argmax recorded nothing."""
    costs = {"dispatch_us": 3.0, "autograd_us": 2.0, "autograd_us_by_kind": {"pointwise": 2.0, "matmul": 20.0}}
    f = _inference(tmp_path, recorded=True, run_meta={"host_costs": costs})
    assert f["workload.autograd_ms"] == pytest.approx((20.0 + 2.0) / 1e3)
    assert f["workload.autograd_step_share"] == pytest.approx(0.022)
    old = _inference(tmp_path, recorded=True, run_meta={"host_costs": {"autograd_us": 2.0}})
    assert old["workload.autograd_ms"] == pytest.approx(2 * 2.0 / 1e3)  # a run.json before the kinds: per node


def test_autograd_recording_is_stretched_as_the_profiler_stretched_the_step(tmp_path: Path) -> None:
    """The probes price an op without the profiler; the recorded steps (1 ms) took twice the unprofiled ones."""
    costs = {"dispatch_us": 3.0, "autograd_us": 2.0, "autograd_us_by_kind": {"pointwise": 2.0, "matmul": 20.0}}
    f = _inference(tmp_path, recorded=True, run_meta={"host_costs": costs, "unprofiled_step_ms": [0.5, 0.4, 0.6]})
    assert f["workload.autograd_ms_unprofiled"] == pytest.approx(0.022)
    assert f["workload.autograd_ms"] == pytest.approx(0.044)
    assert f["workload.autograd_step_share"] == pytest.approx(0.044)  # the same share of the unprofiled step
    # unprofiled steps that were slower than the recorded ones (a burst of other work): never shrunk
    slower = _inference(tmp_path, recorded=True, run_meta={"host_costs": costs, "unprofiled_step_ms": [2.0]})
    assert slower["workload.autograd_ms"] == pytest.approx(0.022)


# real inference traces (AMD MI300X, recorded by others with the PyTorch Profiler) --------------------------------

SGLANG = ("tracelens", "mi300x", "sglang_qwen3_8b_decode_graph", "trace.json.gz")


@pytest.fixture(scope="module")
def sglang():
    findings = analyze_traces(load_traces([fixture_path(*SGLANG)]))
    return findings.values()


def test_graph_replays_are_not_launch_bound(sglang: dict) -> None:
    """One hipGraphLaunch issues 544 of the trace's 555 kernels: they are not 544 slow launches."""
    assert sglang["launch.graph_kernel_fraction"] == pytest.approx(544 / 555)
    assert sglang["launch.call_us_median"] < 20  # the eager launches only, not the 1.57 ms graph launch
    # the 463 ms gap: a kernel launched early that started only after the host's blocking copy returned
    assert sglang["gpu.idle.top_cause"] == "other"
    assert sglang["gpu.idle.launch.ms"] < 1
    assert sglang["workload.kind"] == "inference"


def test_rules_on_a_graph_replaying_server(sglang: dict) -> None:
    from advisor.engine.evaluate import evaluate_rules
    from advisor.engine.rulebook import RuleBook

    diagnoses, _ = evaluate_rules(RuleBook.load(env=False).active("framework"), sglang)
    fired = {d.rule_id: d for d in diagnoses}
    assert "GPU003" not in fired  # graphs are the fix GPU003 would give
    assert fired["GPU011"].severity == "medium"
    assert "hipMemcpyWithStream" in fired["GPU011"].where


def test_a_step_unlike_the_others_does_not_move_the_profilers_share(tmp_path: Path) -> None:
    """A loop that evaluates on a held-out tensor every five steps, with no DataLoader to tell the evaluation
    apart: one recorded step of 23.9 ms among steps of 2.6-3.6, and one such step among the five timed after the
    window. The mean recorded step over the median unprofiled one read the profiler as making the steps 235%
    longer, and every gain as 30% of itself without it; the medians on both sides give 28%."""
    from advisor.analyze.framework.per_step import profiler_stretch
    from advisor.analyze.framework.step_split import step_split
    from advisor.report.model import profiler_note

    events, t = [], 0.0
    for n, ms in enumerate((3.6, 2.6, 23.9, 2.7, 2.55)):
        events += [_x("user_annotation", f"ProfilerStep#{n + 8}", t, ms * 1e3), _op("aten::addmm", t + 10, ms * 500)]
        t += ms * 1e3
    view = _view(tmp_path, events, {"unprofiled_step_ms": [3.018, 2.111, 20.233, 2.05, 1.928]})
    facts = step_split(view)
    assert facts["steps.time_ms_median"] == pytest.approx(2.7)
    assert facts["steps.profiler_overhead"] == pytest.approx(2.7 / 2.111 - 1)
    assert profiler_stretch(view) == pytest.approx(2.7 / 2.111)
    note = profiler_note(facts)
    assert "against 2.7 ms recorded (the median): profiling made the recorded steps 28% longer" in note, note


def test_a_step_far_longer_than_the_median_is_named(tmp_path: Path) -> None:
    from advisor.report.model import loop_note, outlier_note

    rows = [{"step": n + 8, "time_ms": ms} for n, ms in enumerate((3.6, 2.6, 23.9, 2.7, 2.55))]
    facts = {"steps.table": rows, "steps.time_ms_median": 2.7}
    note = outlier_note(facts)
    assert note.startswith("Step 10 took 23.9 ms, 2 times the median step (2.7 ms) or more: the figures are means "
                           "over the 5 steps, that one included."), note
    assert loop_note(facts) == note
    assert outlier_note({**facts, "steps.table": [{**r, "time_ms": 3.0} for r in rows]}) is None  # steady steps
    assert outlier_note({**facts, "steps.table": rows[:2]}) is None  # too few to say
    # an evaluation pass that the finder named says it instead
    named = {**facts, "steps.evaluation": 1, "steps.evaluation_steps": "10", "steps.evaluation_left_out": 0,
             "steps.count": 5}
    assert "evaluation pass" in loop_note(named) and "median step" not in loop_note(named)
