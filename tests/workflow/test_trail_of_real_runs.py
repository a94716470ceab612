"""The trail `advisor diagnose` records, on the bundled examples (run with --no-escalate by conftest)."""

from __future__ import annotations

import pytest

from conftest import run_cli

pytestmark = pytest.mark.slow


def _trail(run) -> dict:
    return {e["stage"]: e for e in run.json("run.json")["trail"]}


@pytest.mark.parametrize("example", ["healthy", "slow_optimizer", "python_loop"])
def test_when_no_rule_escalates_the_walk_stops_after_the_framework(diagnosed_examples, example: str) -> None:
    run = diagnosed_examples[example]
    assert run.cli.code == 0, run.cli.output
    trail = _trail(run)
    assert [trail[s]["status"] for s in ("framework", "system", "kernel", "report")] == [
        "ran", "not_needed", "not_needed", "ran"]
    assert "escalations asked for: none" in trail["system"]["reason"]
    assert trail["framework"]["artifacts"] == ["framework/collector.json", "framework/rank0.pt.trace.json.gz",
                                               "framework/shapes",  # a folder: never taken for a rank
                                               "framework/status.rank0.json"]
    assert not (run.path / "system").exists()
    edges = {(e["from"], e["to"]): e for e in run.json("run.json")["workflow"]["edges"]}
    assert edges[("framework", "report")]["taken"] is True
    assert edges[("system", "kernel")]["taken"] is None
    if example == "slow_optimizer":  # OPT001's fix is a setting, which these runs (--no-trial) do not try
        assert trail["trial"]["status"] == "skipped" and "--no-trial was given" in trail["trial"]["reason"]
        assert "--no-trial" not in trail["trial"]["command"]  # the command that would run it
        assert "skipped trial: --no-trial was given" in run.cli.stdout
    else:
        assert trail["trial"]["status"] == "not_needed"
        assert "Stages:" not in run.cli.stdout  # nothing beyond the framework to mention


def test_no_escalate_records_the_skipped_stage_and_its_command(diagnosed_examples) -> None:
    run = diagnosed_examples["slow_dataloader"]
    trail = _trail(run)
    system = trail["system"]
    assert system["status"] == "skipped"
    assert "nsys (by DL001)" in system["reason"] and "--no-escalate was given" in system["reason"]
    assert "nsys profile" in system["command"] and f"advisor analyze {run.path}" in system["command"]
    assert (run.path / "system" / "collector.json").is_file()  # so the command runs as printed
    report = (run.path / "report.md").read_text()
    assert "## Escalation trail" in report and system["command"] in report
    assert "skipped system: --no-escalate was given" in " ".join(run.cli.stdout.split())


def test_workflow_show_explains_a_run(diagnosed_examples, tmp_path) -> None:
    run = diagnosed_examples["slow_dataloader"]
    shown = run_cli("workflow", "show", "--run", str(run.path), cwd=tmp_path)
    assert shown.code == 0, shown.output
    assert "system     SKIPPED" in shown.stdout and "to run it: NSYS_NVTX_PROFILER_REGISTER_ONLY=0" in shown.stdout
    assert "framework -> system: taken" in shown.stdout
