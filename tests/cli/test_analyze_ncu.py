"""`advisor analyze` on Nsight Compute files, as a user runs it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import fixture_path, run_cli

EXAMPLES = Path("/usr/share/doc/nsight-compute/examples/uncoalescedGlobalAccesses")


def test_analyze_two_reports_diagnoses_and_compares(tmp_path: Path) -> None:
    before, after = EXAMPLES / "addConstDouble3.ncu-rep", EXAMPLES / "addConstDouble.ncu-rep"
    if not before.exists() or shutil.which("ncu") is None:
        pytest.skip("needs Debian's nsight-compute package")
    out = tmp_path / "run"
    cli = run_cli("analyze", str(before), str(after), "--out", str(out), cwd=tmp_path)
    assert cli.code == 0, cli.output
    assert "fixes KRN005 uncoalesced-global-access" in cli.stdout and "1.23x" in cli.stdout
    diagnoses = json.loads((out / "diagnoses.json").read_text())
    assert diagnoses["verdict"]["status"] == "slow" and diagnoses["verdict"]["missing"] == []
    assert diagnoses["diagnoses"][0]["rule_id"] == "KRN005"
    assert json.loads((out / "comparison.json").read_text())["fixed"] == {"KRN005": "uncoalesced-global-access"}
    assert "uncoalesced" in (out / "report.md").read_text()


def test_analyze_ncu_stdout_log(tmp_path: Path) -> None:
    log = fixture_path("ncu", "cublaslt_gemm_ncu_stdout.log")
    cli = run_cli("analyze", str(log), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert cli.code == 0, cli.output
    facts = {f["name"]: f["value"] for f in json.loads((tmp_path / "run" / "findings.json").read_text())["facts"]}
    assert facts["ncu.kernel_count"] == 1 and facts["ncu.kernels"][0]["bound"] == "latency"
