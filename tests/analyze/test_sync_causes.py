"""Why the host synchronised: each sync point's cause, and the rule that tells it.

The fixtures show the causes a real trace gives (cuDNN's autotuner on the A100 AlexNet trace, an explicit
synchronize and a bool() read in an MI300X trace, blocking copies on the recommender's ranks). The causes that need the user's line (a tensor printed, a tensor created on the CPU) and those no
fixture has are shown on small traces in Kineto's format: a step whose line ``train.py:40`` runs the ops that
the cause runs, with the sync, and the GPU left idle after it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.analyze.framework.sync_causes import classify
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import run_analyzers
from advisor.engine.rulebook import RuleBook
from advisor.load.kineto import load_kineto
from advisor.pipeline import diagnose_findings
from conftest import fixture_path

BOOK = RuleBook.load(env=False)
#: the rules that tell the GPU idle time after syncs; at most one of them fires
SYNC_RULES = {"GPU001", "GPU012", "GPU013", "GPU014", "GPU015", "GPU016", "GPU017"}


def _x(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def _gpu(cat: str, name: str, ts: float, dur: float, corr: int, **args) -> dict:
    return _x(cat, name, ts, dur, pid=0, tid=7, device=0, stream=7, correlation=corr, **args)


class _Step:
    """The events of one step's line ``train.py:40``, from ``start`` on; its GPU work runs after the step's
    kernel, which ends at ``start + 250``, so every sync below lasts until then."""

    def __init__(self, start: float, corr: int) -> None:
        self.start, self.t, self.corr, self.events = start, start + 6, corr, []

    def next_corr(self) -> int:
        self.corr += 1
        return self.corr

    def op(self, name: str, dur: float, *inner: tuple) -> None:
        """A top-level op, with nested ``(name, dur, *children)`` ops and ``("call", api, dur, gpu)`` calls."""
        self.events.append(_x("python_function", "train.py(40): main", self.t, dur + 2))
        self._nest(name, self.t + 1, dur, inner)
        self.t += dur + 3

    def _nest(self, name: str, t: float, dur: float, inner: tuple) -> None:
        self.events.append(_x("cpu_op", name, t, dur))
        at = t + 1
        for child in inner:
            if child[0] == "call":
                _, api, d, gpu = child
                self.call(api, at, d, gpu)
            else:
                cname, d, *grand = child
                self._nest(cname, at, d, tuple(grand))
            at += (child[2] if child[0] == "call" else child[1]) + 1

    def call(self, api: str, t: float, dur: float, gpu: tuple | None = None) -> None:
        corr = self.next_corr()
        self.events.append(_x("cuda_runtime", api, t, dur, correlation=corr))
        if gpu is not None:
            cat, name, nbytes = gpu
            self.events.append(_gpu(cat, name, self.start + 252, 2, corr, bytes=nbytes))

    def bare_call(self, api: str, dur: float) -> None:
        self.events.append(_x("python_function", "train.py(40): main", self.t, dur + 2))
        self.call(api, self.t + 1, dur)
        self.t += dur + 3


def _copy(direction: str, nbytes: int = 8) -> tuple:
    side = "Device -> Pageable" if direction == "DtoH" else "Pageable -> Device"
    return ("call", "cudaMemcpyAsync", 20, ("gpu_memcpy", f"Memcpy {direction} ({side})", nbytes))


#: a blocking copy: the copy call, then a stream synchronize that returns after the step's kernel
def _synced(direction: str = "DtoH", nbytes: int = 8) -> tuple:
    return _copy(direction, nbytes), ("call", "cudaStreamSynchronize", 240, None)


def _to(direction: str) -> tuple:
    return ("aten::_to_copy", 266, ("aten::copy_", 264, *_synced(direction, 256)))


def cause_ops(step: _Step, cause: str) -> None:
    """What the line runs for each cause."""
    if cause == "item":
        step.op("aten::item", 266, ("aten::_local_scalar_dense", 264, *_synced()))
    elif cause == "print":  # torch/_tensor_str.py's _Formatter
        step.op("aten::isfinite", 5)
        step.op("aten::masked_select", 266, ("aten::nonzero", 264, *_synced()))
    elif cause == "to_host":
        step.op("aten::to", 268, _to("DtoH"))
    elif cause == "data_dependent":
        step.op("aten::index", 266, ("aten::nonzero", 264, *_synced()))
    elif cause == "explicit":
        step.bare_call("cudaDeviceSynchronize", 262)
    elif cause == "empty_cache":
        step.bare_call("cudaFree", 262)
    elif cause == "created_on_cpu":
        step.op("aten::zeros", 5)
        step.op("aten::to", 268, _to("HtoD"))
    elif cause == "to_device":
        step.op("aten::to", 268, _to("HtoD"))
    elif cause == "cudnn_autotune":
        step.op("aten::conv2d", 266, ("aten::cudnn_convolution", 264, ("call", "cudaFree", 262, None)))
    elif cause == "allocator":
        step.op("aten::linear", 266, ("aten::addmm", 264, ("call", "cudaFree", 262, None)))


def cause_trace(cause: str, steps: int = 3) -> dict:
    """``steps`` steps of 10 ms: a kernel of 2.5 ms, the cause's sync waiting for it, then an idle GPU."""
    events = []
    corr = 100
    for i in range(steps):
        start = i * 1000.0
        events.append(_x("user_annotation", f"ProfilerStep#{i + 1}", start, 1000))
        step = _Step(start, corr)
        kernel_corr = step.next_corr()
        events.append(_x("cpu_op", "aten::mm", start + 2, 3))
        events.append(_x("cuda_runtime", "cudaLaunchKernel", start + 3, 1, correlation=kernel_corr))
        events.append(_gpu("kernel", "ampere_sgemm_128x64_nn", start + 5, 250, kernel_corr))
        cause_ops(step, cause)
        # the next launch comes only after the sync returned: the GPU idles from the kernel's end until then
        launch = step.next_corr()
        at = step.t + 300
        events.append(_x("cpu_op", "aten::add", at, 4))
        events.append(_x("cuda_runtime", "cudaLaunchKernel", at + 1, 2, correlation=launch))
        events.append(_gpu("kernel", "vectorized_elementwise_kernel", at + 5, 20, launch))
        events += step.events
        corr = step.corr
    for e in events:  # to milliseconds: the rules do not judge gaps of a few hundred microseconds
        e["ts"], e["dur"] = e["ts"] * 10, e["dur"] * 10
    return {"traceEvents": events,
            "deviceProperties": [{"id": 0, "name": "NVIDIA A100", "computeMajor": 8, "computeMinor": 0}]}


def _view(tmp_path: Path, cause: str) -> TraceView:
    path = tmp_path / f"{cause}.pt.trace.json"
    path.write_text(json.dumps(cause_trace(cause)))
    return TraceView(load_kineto(path))


CAUSES = ["item", "print", "to_host", "data_dependent", "explicit", "empty_cache", "created_on_cpu", "to_device",
          "cudnn_autotune", "allocator"]
#: the rule that tells each cause (GPU001 for causes without a rule of their own)
RULE_OF = {"item": "GPU012", "print": "GPU013", "to_host": "GPU013", "explicit": "GPU014",
           "data_dependent": "GPU015", "empty_cache": "GPU016", "created_on_cpu": "GPU017", "to_device": "GPU001",
           "cudnn_autotune": "GPU001", "allocator": "GPU001"}


@pytest.mark.parametrize("cause", CAUSES)
def test_each_cause_is_recognised_and_told_by_one_rule(tmp_path: Path, cause: str) -> None:
    view = _view(tmp_path, cause)
    syncs = view.gpu.host_syncs
    assert set(classify(syncs, view)) == {cause}
    findings = run_analyzers(view)
    f = findings.values()
    assert f["sync.cause"] == cause and f["sync.cause_share"] == pytest.approx(1.0)
    # the causes share out the GPU's idle time after syncs, no more and no less
    assert sum(r["idle_ms"] for r in f["sync.causes"]) == pytest.approx(f["gpu.idle.sync.ms"], rel=1e-6)
    assert f["sync.cause_ms"] > 2
    if cause not in ("explicit", "empty_cache"):  # those are called outside any operator
        assert f["sync.cause_site"] == "train.py:40 (main)"
    fired = {d.rule_id for d in diagnose_findings(findings, BOOK).diagnoses}
    assert fired & SYNC_RULES == {RULE_OF[cause]}, fired


def test_mixed_causes_go_to_the_general_rule(tmp_path: Path) -> None:
    """Three causes of about the same size: none holds half of the idle time, so GPU001 tells it."""
    events: list[dict] = []
    for k, cause in enumerate(("item", "explicit", "to_host")):
        for e in cause_trace(cause)["traceEvents"]:  # three steps of 10 ms each, one cause after the other
            e["ts"] += k * 30_000
            if e["name"].startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(e['name'][13:]) + 3 * k}"
            if "correlation" in e["args"]:
                e["args"]["correlation"] += 1000 * k
            events.append(e)
    path = tmp_path / "mixed.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": cause_trace("item")["deviceProperties"]}))
    findings = run_analyzers(TraceView(load_kineto(path)))
    f = findings.values()
    assert {r["cause"] for r in f["sync.causes"]} == {"item", "explicit", "to_host"}
    assert f["sync.cause_share"] < 0.5
    fired = {d.rule_id for d in diagnose_findings(findings, BOOK).diagnoses}
    assert fired & SYNC_RULES == {"GPU001"}


_FINDINGS: dict[tuple[str, ...], object] = {}


def _fixture_findings(*parts: str):
    from advisor.pipeline import analyze_traces, find_kineto_traces, load_traces

    if parts not in _FINDINGS:
        _FINDINGS[parts] = analyze_traces(load_traces(find_kineto_traces(fixture_path(*parts))))
    return _FINDINGS[parts]


def _fixture_facts(*parts: str) -> dict:
    return _fixture_findings(*parts).values()


def test_alexnet_cudnn_autotuner_frees_stay_with_the_general_rule() -> None:
    f = _fixture_facts("kineto", "a100_alexnet_cuda_sync.pt.trace.json.gz")
    causes = {r["cause"]: r for r in f["sync.causes"]}
    # cudaFree inside aten::cudnn_convolution: cuDNN's autotuner empties the cache before timing algorithms
    assert f["sync.cause"] == "cudnn_autotune" and f["sync.cause_share"] > 0.99
    assert causes["to_device"]["op"] == "aten::to"  # the weights copied from pageable memory
    assert causes["explicit"]["calls_per_step"] == 4  # cudaDeviceSynchronize outside any operator
    assert sum(r["idle_ms"] for r in f["sync.causes"]) == pytest.approx(f["gpu.idle.sync.ms"], rel=1e-6)
    fired = {d.rule_id for d in diagnose_findings(_fixture_findings(
        "kineto", "a100_alexnet_cuda_sync.pt.trace.json.gz"), BOOK).diagnoses}
    assert fired & SYNC_RULES == {"GPU001"}


def test_mi300x_explicit_synchronize_and_bool_read() -> None:
    f = _fixture_facts("tracelens", "mi300x", "gaunernst_bert-small-uncased__1016001", "trace.json.gz")
    causes = {r["cause"]: r for r in f["sync.causes"]}
    assert causes["explicit"]["site"] == "moca/library/profiling/profile.py:34 (run_torch_profiler)"
    assert causes["item"]["op"] == "aten::is_nonzero"  # bool(t) / if t: in the model adapter
    fired = {d.rule_id for d in diagnose_findings(_fixture_findings(
        "tracelens", "mi300x", "gaunernst_bert-small-uncased__1016001", "trace.json.gz"), BOOK).diagnoses}
    assert not fired & SYNC_RULES  # 1% of the window: too little to tell


def test_recsys_copies_to_and_from_the_host() -> None:
    f = _fixture_facts("kineto", "a100_recsys_2of128_ranks", "rank0.pt.trace.json.gz")
    causes = {r["cause"] for r in f["sync.causes"]}
    assert {"to_host", "to_device", "item"} <= causes
    assert f["gpu.idle.sync.share"] < 0.01  # under a millisecond of 600 ms steps: no sync rule fires
