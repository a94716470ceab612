"""The workflow's decisions on real traces: when it stops, when it asks for nsys or ncu, and how it records a skip.

The framework findings come from real fixture traces through the real analyzers
and rules (GPU001/GPU002 ask for nsys, GPU009 for ncu); the guards in
rules/workflow.yaml decide.
"""

from __future__ import annotations

import textwrap
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from advisor.analyze.findings import Findings
from advisor.collect.config import CollectorConfig
from advisor.engine.rulebook import RuleBook
from advisor.load.kineto import load_kineto
from advisor.pipeline import analyze_traces, diagnose_findings
from advisor.rundir import RunDir
from advisor.workflow.graph import load_workflow
from advisor.workflow.runner import StageRunner
from advisor.workflow.walk import TrailEntry, WalkResult, walk
from conftest import fixture_path

BOOK = RuleBook.load(env=False)
GPU_META = {"environment": {"gpus": [{"name": "NVIDIA A100"}]}, "step_method": "optimizer"}


@cache
def _analysed(name: tuple[str, ...]) -> dict:
    return analyze_traces([load_kineto(fixture_path("kineto", *name))]).to_dict()


def framework_findings(*name: str) -> Findings:
    """The framework findings of a fixture trace (a fresh copy: the walk adds to them)."""
    return Findings.from_dict(_analysed(name))


def diagnose(findings: Findings, stopped_early: str | None) -> object:
    return diagnose_findings(findings, BOOK, stopped_early)


def walk_run(tmp_path: Path, findings: Findings, **runner: object) -> tuple[WalkResult, StageRunner]:
    run = RunDir.create("t", tmp_path / "run")
    run.update_metadata(kind="test")
    stage_runner = StageRunner(run, findings, diagnose, **runner,
                               done={"framework": TrailEntry("framework", "ran", "from a fixture trace")})
    return walk(load_workflow(env=False), stage_runner.execute, stage_runner.state), stage_runner


def _status(result: WalkResult) -> dict[str, str]:
    return {e.stage: e.status for e in result.trail}


def _edge(result: WalkResult, source: str, target: str):
    return next(d for d in result.decisions if (d.edge.source, d.edge.target) == (source, target))


def test_nothing_escalates_so_the_walk_stops_after_the_framework(tmp_path) -> None:
    # rank 34 of a CPU-only gloo job: no rule asks for a deeper look, and there are no GPU facts
    result, runner = walk_run(tmp_path, framework_findings("cpu_only_gloo_rank34.pt.trace.json.gz"))
    assert _status(result) == {"framework": "ran", "system": "not_needed", "kernel": "not_needed", "trial": "not_needed",
                               "report": "ran"}
    assert result.path() == ["framework", "report"]
    nsys = _edge(result, "framework", "system")
    assert nsys.taken is False and "escalations asked for: none" in nsys.reason
    assert _edge(result, "framework", "kernel").reason == "needs `gpu.busy_fraction`, which this run does not have"
    assert _edge(result, "system", "kernel").taken is None  # system was not reached: not evaluated
    assert "framework → system" in result.entry("system").reason
    assert not any(d.escalate for d in runner.diagnosed.diagnoses)


def test_a_sync_heavy_trace_escalates_to_nsys(tmp_path) -> None:
    # AlexNet with cuda_sync events: the GPU idles 99.5% of the time (HTA: 99.49%), the host waits on it
    result, runner = walk_run(tmp_path, framework_findings("a100_alexnet_cuda_sync.pt.trace.json.gz"))
    nsys = _edge(result, "framework", "system")
    assert nsys.taken is True and "nsys (by GPU001, GPU002)" in nsys.reason
    # the GPU is almost never busy, so kernel tuning is not the next step, even though 3 kernels hold 61%
    ncu = _edge(result, "framework", "kernel")
    assert ncu.taken is False and "gpu.busy_fraction = 0.00512" in ncu.reason and "kernels.top3_share = 0.608" in ncu.reason
    system = result.entry("system")
    # advisor analyze does not run tools: the stage is skipped, with the command that would make its data
    assert system.status == "skipped" and "advisor analyze only reads files" in system.reason
    assert system.command and "nsys profile" in system.command and "advisor analyze" in system.command
    assert _status(result)["kernel"] == "not_needed"


@pytest.mark.parametrize("trace, why", [
    # ResNet on a V100: the GPU is busy 97% of the step, in compute kernels: GPU009 asks for ncu
    (("v100_resnet_single_rank.pt.trace.json.gz",), "ncu (by GPU009)"),
    # recsys rank 0 on A100: GPU busy 45% of the step, the top 3 kernels hold 72% of kernel time
    (("a100_recsys_2of128_ranks", "rank0.pt.trace.json.gz"), "gpu.busy_fraction = 0.445, kernels.top3_share = 0.717"),
])
def test_a_kernel_dominated_trace_escalates_to_ncu(tmp_path, trace, why) -> None:
    result, _ = walk_run(tmp_path, framework_findings(*trace))
    ncu = _edge(result, "framework", "kernel")
    assert ncu.taken is True and why in ncu.reason
    kernel = result.entry("kernel")
    assert kernel.status == "skipped" and "advisor analyze only reads files" in kernel.reason


def test_the_kernel_stage_without_a_gpu_is_skipped_with_the_ncu_commands(tmp_path) -> None:
    findings = framework_findings("v100_resnet_single_rank.pt.trace.json.gz")
    cfg = CollectorConfig(script=str(tmp_path / "train.py"), args=["--lr", "0.1"])
    result, _ = walk_run(tmp_path, findings, config=cfg, online=True, run_meta=GPU_META)
    kernel = result.entry("kernel")
    assert kernel.status == "skipped"
    assert "ncu" in kernel.reason and ("no GPU" in kernel.reason or "not installed" in kernel.reason), kernel.reason
    lines = kernel.command.splitlines()
    assert lines and all(line.startswith("ncu ") or "/ncu " in line for line in lines)
    assert "--kernel-name" in lines[0] and "train.py --lr 0.1" in lines[0]


def test_a_missing_nsys_is_recorded_as_skipped_with_its_command(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools-here"))
    monkeypatch.delenv("ADVISOR_NSYS", raising=False)
    findings = framework_findings("a100_alexnet_cuda_sync.pt.trace.json.gz")
    cfg = CollectorConfig(script=str(tmp_path / "train.py"), args=["--epochs", "3"], wait=2, warmup=1, active=3)
    result, _ = walk_run(tmp_path, findings, config=cfg, online=True, run_meta=GPU_META)
    system = result.entry("system")
    assert system.status == "skipped"
    assert "Nsight Systems (nsys) was not found on PATH" in system.reason
    cmd = system.command
    assert cmd.startswith("NSYS_NVTX_PROFILER_REGISTER_ONLY=0 nsys profile --trace=cuda,nvtx,osrt ")
    assert "--capture-range=nvtx --nvtx-capture=advisor::capture --capture-range-end=stop" in cmd
    config = tmp_path / "run" / "system" / "collector.json"
    assert str(config) in cmd and f"&& advisor analyze {tmp_path / 'run'} " in cmd
    written = CollectorConfig.read(config)  # the same script, arguments and steps, marked for nsys
    assert (written.mode, written.args, written.step_method, written.active) == ("nvtx", ["--epochs", "3"],
                                                                                "optimizer", 3)


def test_guards_see_the_diagnoses_of_the_stage_before(tmp_path) -> None:
    """An edge out of the system stage is decided after the system findings and rules are in."""
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(textwrap.dedent("""\
        version: 1
        start: framework
        stages: [{name: framework}, {name: system}, {name: kernel}, {name: report}]
        edges:
          - {from: framework, to: system, guard: '"nsys" in diagnoses.escalate'}
          - {from: system, to: kernel, guard: '"SYS004" in diagnoses.ids'}
          - {from: system, to: report}
          - {from: kernel, to: report}
        """))
    run = RunDir.create("t", tmp_path / "run")
    run.update_metadata(kind="test")
    saxpy = fixture_path("nsys", "saxpy_mpi_cuda_nvtx_nsys2022.2.sqlite")
    findings = framework_findings("a100_alexnet_cuda_sync.pt.trace.json.gz")
    runner = StageRunner(run, findings, diagnose, given={"system": [saxpy]},
                         done={"framework": TrailEntry("framework", "ran", "from a fixture trace")})
    result = walk(load_workflow(workflow), runner.execute, runner.state)
    assert result.entry("system").status == "ran"
    edge = _edge(result, "system", "kernel")
    assert edge.taken is True  # SYS004 fired on the saxpy capture's 15 synchronous cudaMemcpy per run
    assert {d.rule_id for d in runner.diagnosed.diagnoses} >= {"GPU001", "SYS004"}
    assert np.isclose(runner.findings.get("system.memcpy.sync_per_step"), 15.0)


def test_ctrl_c_in_a_stage_keeps_the_report_and_stops_the_walk(tmp_path, monkeypatch) -> None:
    from dataclasses import replace

    from advisor.workflow import stages

    def interrupted(ctx):
        raise KeyboardInterrupt

    registry = stages.registered_stages()
    monkeypatch.setitem(stages._STAGES, "system", replace(registry["system"], collect=interrupted))
    findings = framework_findings("a100_alexnet_cuda_sync.pt.trace.json.gz")
    cfg = CollectorConfig(script=str(tmp_path / "train.py"))
    result, runner = walk_run(tmp_path, findings, config=cfg, online=True, run_meta=GPU_META)
    system = result.entry("system")
    assert system.status == "skipped" and system.reason.startswith("interrupted (Ctrl-C) while Nsight Systems ran")
    assert runner.hold == "the run was interrupted (Ctrl-C)"  # no later stage starts a tool
    assert {d.rule_id for d in runner.diagnosed.diagnoses} >= {"GPU001"}  # the framework's diagnoses are kept
