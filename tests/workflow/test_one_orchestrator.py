"""The walk is the one place that runs stages, the framework stage included, and the framework stage has one
analysis wherever it runs: the traces' findings with the ranks compared (issue 17, "One orchestrator")."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from advisor.analyze.findings import Findings
from advisor.collect.config import CollectorConfig
from advisor.engine.rulebook import RuleBook
from advisor.pipeline import analyze_traces, load_traces
from advisor.rundir import RunDir
from advisor.runs import analyze_files
from advisor.workflow import stages
from advisor.workflow.graph import load_workflow
from advisor.workflow.runner import StageHooks, replace_stage_facts
from advisor.workflow.session import walk_script
from advisor.workflow.stages import Collected, get_stage
from conftest import fixture_path

BOOK = RuleBook.load(env=False)
RECSYS = ("kineto", "a100_recsys_2of128_ranks")


def _facts(run: Path) -> dict[str, object]:
    findings = Findings.from_dict(RunDir.open(run).read_json("findings.json"))
    return {name: fact.value for name, fact in findings.facts.items()}


@cache
def _both_ranks() -> Findings:
    return analyze_traces(load_traces(sorted(fixture_path(*RECSYS).glob("rank*.pt.trace.json.gz"))))


def test_the_framework_stage_has_one_analysis_and_no_loader_of_its_own() -> None:
    spec = get_stage("framework")
    assert spec.load is None and spec.analyze is not None and not spec.problems()


def test_a_rank_trace_merged_into_a_run_is_compared_with_the_runs_own(tmp_path) -> None:
    """`advisor analyze RUN_DIR rank1.json`: the run's rank 0 and the rank given, analysed as the folder of both is."""
    folder = fixture_path(*RECSYS)
    analyze_files([folder / "rank0.pt.trace.json.gz"], out=tmp_path / "run")
    assert not any(name.startswith("ranks.") for name in _facts(tmp_path / "run"))
    analyze_files([tmp_path / "run", folder / "rank1.pt.trace.json.gz"])
    analyze_files([folder], out=tmp_path / "folder")
    merged, whole = _facts(tmp_path / "run"), _facts(tmp_path / "folder")
    assert any(name.startswith("ranks.") for name in merged)
    assert merged == whole
    trail = RunDir.open(tmp_path / "run").read_metadata()["trail"]
    framework = next(e for e in trail if e["stage"] == "framework")
    assert framework["reason"] == "loaded from rank0.pt.trace.json.gz, rank1.pt.trace.json.gz"
    assert [Path(a).name for a in framework["artifacts"]] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]


def test_the_framework_stage_replaces_the_ranks_facts_too() -> None:
    findings = Findings.from_dict(_both_ranks().to_dict())
    assert any(f.source in ("ranks", "gpu_ranks") for f in findings.facts.values())
    one_rank = analyze_traces(load_traces([fixture_path(*RECSYS, "rank1.pt.trace.json.gz")]))
    replace_stage_facts(findings, "framework", one_rank)
    assert set(findings.facts) == set(one_rank.facts)


class _Recorder(StageHooks):
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def collected(self, runner, spec, collected) -> None:
        self.events.append(("collected", spec.name))
        runner.stopped_early = "the script stopped early"

    def analysing(self, runner, spec) -> None:
        self.events.append(("analysing", spec.name))

    def absorbed(self, runner, spec) -> None:
        self.events.append(("absorbed", spec.name))


def test_diagnose_walks_the_framework_stage_like_any_other(tmp_path, monkeypatch) -> None:
    """The walk collects the framework stage (here a stand-in for the script's run) and absorbs it; the hold
    (--no-escalate) applies to the deeper stages only, and the hooks see each step in order."""
    trace = fixture_path("kineto", "v100_resnet_single_rank.pt.trace.json.gz")

    def collect(ctx):
        return Collected([trace], [], "advisor diagnose train.py", ["the script captured"])

    monkeypatch.setitem(stages._STAGES, "framework", replace(get_stage("framework"), collect=collect))
    run = RunDir.create("t", tmp_path / "run")
    run.update_metadata(kind="test")
    hooks = _Recorder()
    diagnosed = walk_script(run, BOOK, load_workflow(env=False), config=CollectorConfig(script="train.py"),
                            run_meta={}, hooks=hooks, hold="--no-escalate was given")
    trail = {e["stage"]: e for e in run.read_metadata()["trail"]}
    assert trail["framework"]["status"] == "ran"
    assert trail["framework"]["reason"] == "every run starts here; the script captured"
    assert trail["kernel"]["status"] == "skipped" and "--no-escalate was given" in trail["kernel"]["reason"]
    assert hooks.events == [("collected", "framework"), ("analysing", "framework"), ("absorbed", "framework")]
    assert diagnosed.findings.get("steps.time_ms")
    assert diagnosed.verdict.to_dict()["missing"][0] == "the script stopped early"  # the hook's note is used


def test_diagnose_needs_a_workflow_that_starts_at_the_framework(tmp_path) -> None:
    from advisor.errors import UsageError

    workflow = tmp_path / "wf.yaml"
    workflow.write_text("version: 1\nstart: system\nstages: [{name: system}, {name: report}]\n"
                        "edges: [{from: system, to: report}]\n")
    run = RunDir.create("t", tmp_path / "run")
    with pytest.raises(UsageError, match="must start there, not at 'system'"):
        walk_script(run, BOOK, load_workflow(workflow), config=None, run_meta={}, hooks=StageHooks())
