"""A trace's analyzers shared with a forked child (advisor/analyze/parallel.py) give the serial run's findings, in
the same order; an analyzer that fails in the child, or a child that dies, is computed again in this process."""

from __future__ import annotations

import os

import pytest

from advisor.analyze import parallel, registry
from advisor.analyze.findings import FactSpec
from advisor.analyze.framework.view import TraceView
from advisor.load.kineto import load_kineto
from conftest import KINETO_TRACES, fixture_path

STAGE = "test-parallel"


@pytest.fixture
def forks(monkeypatch):
    """Count this process's forks; the analyzers' conditions made to hold on any fixture."""
    monkeypatch.delenv("ADVISOR_WORKERS", raising=False)
    monkeypatch.setattr(parallel, "MIN_EVENTS", 0)
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    made = []
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            made.append(pid)
        return pid

    monkeypatch.setattr(parallel.os, "fork", fork)
    return made


@pytest.fixture
def own_stage():
    """Analyzers of a stage of this test's own, removed from the registry afterwards."""
    added = []

    def add(name, func):
        registry.analyzer(name, stage=STAGE, provides=[FactSpec(f"{name}.value", "count", "a test fact")])(func)
        added.append(name)

    yield add
    for name in added:
        registry._REGISTRY.pop(name)


def _view(name: str = "a100_ddp_nccl_rank0.pt.trace.json.gz") -> TraceView:
    return TraceView(load_kineto(fixture_path("kineto", name)), None)


def _as_list(findings):
    return [(f.name, repr(f.value), f.unit, f.source) for f in findings], dict(findings.skipped)


@pytest.mark.parametrize("name", KINETO_TRACES)
def test_the_findings_equal_the_serial_run(name: str, forks) -> None:
    serial = registry.run_analyzers(_view(name), "framework")
    shared = registry.run_analyzers(_view(name), "framework", two_cores=True)
    assert len(forks) == 1
    assert _as_list(shared) == _as_list(serial)


def test_progress_is_told_as_this_process_goes(forks) -> None:
    told = []
    registry.run_analyzers(_view(), "framework", two_cores=True, on_progress=lambda done, total: told.append(total))
    assert told and len(set(told)) == 1 and told[0] > 10


def test_an_analyzer_that_fails_in_the_child_is_run_here(forks, own_stage) -> None:
    parent = os.getpid()

    def only_here(view):
        if os.getpid() != parent:
            raise RuntimeError("fails in the child")
        return {"only_here.value": 3}

    own_stage("only_here", only_here)
    for i in range(6):  # enough that the child takes some of them
        own_stage(f"plain{i}", lambda view, i=i: {f"plain{i}.value": i})
    findings = registry.run_analyzers(_view(), STAGE, two_cores=True)
    assert findings.get("only_here.value") == 3
    assert [findings.get(f"plain{i}.value") for i in range(6)] == list(range(6))


def test_an_error_is_raised_here_as_in_a_serial_run(forks, own_stage) -> None:
    def broken(view):
        raise ValueError("a bug in an analyzer")

    own_stage("first", lambda view: {"first.value": 1})
    own_stage("broken", broken)
    with pytest.raises(ValueError, match="a bug in an analyzer"):
        registry.run_analyzers(_view(), STAGE, two_cores=True)


def test_a_child_that_dies_leaves_its_analyzers_to_this_process(forks, own_stage) -> None:
    parent = os.getpid()
    ran_here = []

    def dies_in_the_child(view, i):
        if os.getpid() != parent:
            os._exit(9)
        ran_here.append(i)
        return {f"a{i}.value": i}

    for i in range(8):
        own_stage(f"a{i}", lambda view, i=i: dies_in_the_child(view, i))
    findings = registry.run_analyzers(_view(), STAGE, two_cores=True)
    assert [findings.get(f"a{i}.value") for i in range(8)] == list(range(8))
    assert sorted(ran_here) == list(range(8)) and len(forks) == 1


def test_when_one_process_is_used(forks, monkeypatch) -> None:
    view = _view()
    assert parallel.two_cores_pay(view)
    monkeypatch.setenv("ADVISOR_WORKERS", "1")
    assert not parallel.two_cores_pay(view)
    monkeypatch.delenv("ADVISOR_WORKERS")
    monkeypatch.setattr(parallel, "MIN_EVENTS", len(view.events) + 1)
    assert not parallel.two_cores_pay(view)
    monkeypatch.setattr(parallel, "MIN_EVENTS", 0)
    monkeypatch.setenv("ADVISOR_MEMORY_MB", "129")  # no room for a second copy of this process
    assert not parallel.two_cores_pay(view)
    monkeypatch.delenv("ADVISOR_MEMORY_MB")
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert not parallel.two_cores_pay(view)
    registry.run_analyzers(view, "framework", two_cores=True)
    assert not forks


def test_a_fork_the_system_refuses_leaves_the_work_here(forks, monkeypatch) -> None:
    """Too many processes or no memory for one (EAGAIN, ENOMEM): the analyzers run here, no pipe is left open."""
    def refuse():
        raise OSError(11, "Resource temporarily unavailable")

    serial = registry.run_analyzers(_view(), "framework")
    monkeypatch.setattr(parallel.os, "fork", refuse)
    open_before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    told = []
    shared = registry.run_analyzers(_view(), "framework", two_cores=True, on_progress=lambda d, t: told.append(d))
    assert _as_list(shared) == _as_list(serial)
    assert told and told == list(range(1, len(told) + 1))  # each analyzer told as it finished here
    if open_before is not None:
        assert len(os.listdir("/proc/self/fd")) == open_before
