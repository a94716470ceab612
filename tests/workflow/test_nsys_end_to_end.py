"""The system stage for real: `advisor diagnose` escalates to Nsight Systems on a starved DataLoader.

examples/slow_dataloader.py reads every sample from its own file with a simulated
storage latency, in the training process. DL001 fires in the framework stage and
asks for nsys; the workflow then runs the script again under the machine's nsys
(Debian's 2022.4 here, whose importer has to be run by hand), and the report shows
the phase timeline from the NVTX ranges and the OS calls the main thread waits in.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.errors import ToolMissingError
from conftest import EXAMPLES, IN_CI, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.nsys]

SCHEDULE = ["--wait", "1", "--warmup", "1", "--active", "3"]
# One intra-op thread: on a small shared test machine two spinning torch threads can slow the
# model's steps fifty-fold, which hides the data-loading share the test is about.
QUIET_CPU = {"OMP_NUM_THREADS": "1"}


def _need_nsys() -> None:
    from advisor.tools.nsys import find_nsys

    try:
        find_nsys()
    except ToolMissingError as exc:
        if IN_CI:
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def _load(run: Path, name: str) -> dict:
    return json.loads((run / name).read_text())


@pytest.fixture(scope="module")
def escalated(tmp_path_factory) -> tuple[Path, object]:
    _need_nsys()
    base = tmp_path_factory.mktemp("nsys")
    run = base / "run"
    result = run_cli("diagnose", str(EXAMPLES / "slow_dataloader.py"), *SCHEDULE, "--out", str(run), cwd=base,
                     env=QUIET_CPU, timeout=900)
    return run, result


def test_the_system_stage_ran(escalated) -> None:
    run, result = escalated
    assert result.code == 0, result.output
    assert "system stage: running the script again under Nsight Systems" in result.stderr
    trail = {e["stage"]: e for e in _load(run, "run.json")["trail"]}
    assert [trail[s]["status"] for s in ("framework", "system", "kernel", "report")] == [
        "ran", "ran", "not_needed", "ran"]
    system = trail["system"]
    assert "nsys (by DL001)" in system["reason"]
    assert "--trace=nvtx,osrt" in system["command"] and "--capture-range=nvtx" in system["command"]
    assert set(system["artifacts"]) >= {"system/report.nsys-rep", "system/report.sqlite", "system/nsys.log"}
    # the importer nsys could not find was run by the collector, and the large raw stream removed
    assert (run / "system" / "report.nsys-rep").is_file() and not (run / "system" / "report.qdstrm").exists()
    status = _load(run, "system/status.rank0.json")
    assert status["outcome"] == "captured" and status["step_method"] == "optimizer"


def test_the_capture_holds_only_the_profiled_steps(escalated) -> None:
    run, _ = escalated
    facts = {f["name"]: f["value"] for f in _load(run, "findings.json")["facts"]}
    assert facts["system.tool"].startswith("Nsight Systems 2022.4")
    # wait 1 + warmup 1: steps 2, 3 and 4 are active; the capture range holds exactly those
    assert facts["system.steps.count"] == 3
    timeline = facts["system.phases.timeline"]
    assert [r["step"] for r in timeline] == [2, 3, 4]
    for row in timeline:
        parts = sum(row[f"{p}_ms"] for p in ("dataloader", "forward", "backward", "optimizer", "other"))
        assert parts == pytest.approx(row["time_ms"], rel=1e-6)
        assert row["dataloader_ms"] > 0 and row["forward_ms"] > 0 and row["backward_ms"] > 0


def test_the_waits_behind_the_starvation(escalated) -> None:
    run, _ = escalated
    facts = {f["name"]: f["value"] for f in _load(run, "findings.json")["facts"]}
    # each sample sleeps 1.5 ms (the simulated storage) and is read from its own file, 32 per batch
    assert facts["system.osrt.main_top_phase"] == "dataloader"
    assert facts["system.osrt.main_top_call"] == "clock_nanosleep"
    assert facts["system.osrt.dataloader_wait_share"] > 0.5
    waits = {(r["call"], r["phase"]): r for r in facts["system.osrt.waits"] if r["thread"] == "main"}
    assert waits[("clock_nanosleep", "dataloader")]["calls_per_step"] == pytest.approx(32)
    assert waits[("open64", "dataloader")]["calls_per_step"] == pytest.approx(32)
    assert ("read", "dataloader") in waits


def test_one_bottleneck_one_diagnosis_with_its_system_evidence_inside(escalated) -> None:
    """DL001 and SYS001 are the same cause seen by two tools: SYS001 is DL001's how, not a second fix."""
    run, result = escalated
    diagnosed = _load(run, "diagnoses.json")
    diagnoses = diagnosed["diagnoses"]
    ids = [d["rule_id"] for d in diagnoses]
    assert ids[0] == "DL001" and "SYS001" not in ids
    dl001 = diagnoses[0]
    assert dl001["stages"] == ["framework", "system"] and dl001["phase"] == "dataloader"
    (how,) = [r for r in dl001["refinements"] if r["stage"] == "system"]
    assert how["rule_id"] == "SYS001" and how["tool"] == "Nsight Systems"
    assert "clock_nanosleep" in how["what"] and "dataloader" in how["where"]
    assert how["facts"]["system.osrt.main_top_phase"] == "dataloader" and how["files"] == ["system/report.sqlite"]
    assert any(r["call"] == "clock_nanosleep" for r in how["evidence"])
    outcome = next(o for o in diagnosed["outcomes"] if o["rule_id"] == "SYS001")
    assert outcome["result"] == "fired" and outcome["reason"].startswith("explains DL001")
    # the gains add up to no more than the step, and DL001's is counted once
    step = {f["name"]: f["value"] for f in _load(run, "findings.json")["facts"]}["steps.time_ms"]
    combined = diagnosed["verdict"]["combined_impact_ms"]
    assert dl001["impact_ms"] <= combined <= step
    # the card tells the chain: the how from Nsight Systems, the why not examined
    flat = " ".join(result.stdout.replace("│", " ").split())
    assert "How (Nsight Systems, SYS001): the dataloader phase of the main thread, in clock_nanosleep" in flat
    assert "Why (Nsight Compute): not examined" in flat


def test_the_report_shows_what_the_system_stage_added(escalated) -> None:
    run, _ = escalated
    report = (run / "report.md").read_text()
    assert "## What the system stage added (Nsight Systems)" in report
    assert "### Phase timeline, from the NVTX ranges" in report
    assert "### What the CPU threads wait on (OS runtime calls)" in report
    assert re.search(r"\| main +\| `clock_nanosleep` +\| sleep +\| dataloader +\|", report)
    assert "SYS001 training-thread-blocked-in-os-calls" in report
    story = report.split("### 1. DL001 dataloader-starvation", 1)[1].split("\n### 2.", 1)[0]
    assert "- **How**, system (Nsight Systems), SYS001: Under Nsight Systems the training thread" in story
    assert "`system/report.sqlite`" in story and "`clock_nanosleep`" in story
    assert "- **Why**, kernel (Nsight Compute): not examined;" in story
    facts = {f["name"]: f["value"] for f in _load(run, "findings.json")["facts"]}
    if facts.get("trace.has_gpu") is False:  # no kernel to profile, so no ncu command to offer
        assert "the run launched no GPU kernels" in story and "ncu --set full" not in story
    assert re.search(r"\| system +\| ran +\|", report)
    html = (run / "report.html").read_text()
    assert 'id="system"' in html and "clock_nanosleep" in html
    assert 'id="SYS001-system"' in html and 'href="#SYS001"' not in html


def test_without_nsys_the_stage_is_skipped_and_its_command_merges_back(tmp_path) -> None:
    """No nsys on PATH: the report names the skipped stage, why, and the command; running that command
    by hand (here, with nsys back on PATH) adds the system stage to the same run."""
    _need_nsys()
    run = tmp_path / "run"
    bare = {"PATH": str(tmp_path / "no-tools"), "ADVISOR_NSYS": "", **QUIET_CPU}
    result = run_cli("diagnose", str(EXAMPLES / "slow_dataloader.py"), *SCHEDULE, "--out", str(run), cwd=tmp_path,
                     env=bare, timeout=900)
    assert result.code == 0, result.output
    system = {e["stage"]: e for e in _load(run, "run.json")["trail"]}["system"]
    assert system["status"] == "skipped" and "nsys) was not found on PATH" in system["reason"]
    command = system["command"]
    assert command.startswith("NSYS_NVTX_PROFILER_REGISTER_ONLY=0 nsys profile --trace=nvtx,osrt ")
    report = (run / "report.md").read_text()
    assert re.search(r"\| system +\| skipped +\|", report) and command in report

    env = {**os.environ, **QUIET_CPU, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trail = {e["stage"]: e for e in _load(run, "run.json")["trail"]}
    # this nsys cannot find its importer, so the by-hand run left report.qdstrm; analyze imported it
    assert trail["system"]["status"] == "ran" and trail["system"]["reason"].startswith("loaded from report.qdstrm")
    assert (run / "system" / "report.nsys-rep").is_file() and not (run / "system" / "report.qdstrm").exists()
    assert trail["framework"]["status"] == "ran"
    facts = {f["name"]: f["value"] for f in _load(run, "findings.json")["facts"]}
    assert facts["system.steps.count"] == 3 and facts["system.osrt.main_top_phase"] == "dataloader"
    assert "## What the system stage added" in (run / "report.md").read_text()


def test_analyze_takes_the_nsys_rep(escalated, tmp_path) -> None:
    """`advisor analyze` of a .nsys-rep exports it with nsys and reads it like the collector's own."""
    run, _ = escalated
    out = tmp_path / "again"
    result = run_cli("analyze", str(run / "system" / "report.nsys-rep"), "--out", str(out), cwd=tmp_path)
    assert result.code == 0, result.output
    trail = {e["stage"]: e for e in _load(out, "run.json")["trail"]}
    assert trail["system"]["status"] == "ran" and trail["system"]["artifacts"] == ["system/report.sqlite"]
    again = {f["name"]: f["value"] for f in _load(out, "findings.json")["facts"]}
    first = {f["name"]: f["value"] for f in _load(run, "findings.json")["facts"]}
    assert again["system.phases.timeline"] == first["system.phases.timeline"]
    assert again["system.osrt.waits"] == first["system.osrt.waits"]
