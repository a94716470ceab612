"""`advisor analyze` with Nsight Systems exports: alone, beside a Kineto trace, and merged into a run."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from conftest import fixture_path, run_cli

SAXPY = ("nsys", "saxpy_mpi_cuda_nvtx_nsys2022.2.sqlite")
ALEXNET = ("kineto", "a100_alexnet_cuda_sync.pt.trace.json.gz")

def _meta(run) -> dict:
    return json.loads((run / "run.json").read_text())


def _trail(run) -> dict:
    return {e["stage"]: e for e in _meta(run)["trail"]}


def test_an_export_on_its_own(tmp_path) -> None:
    run = tmp_path / "run"
    result = run_cli("analyze", str(fixture_path("nsys", "vecadd_nsys2025.5.sqlite")), "--out", str(run), cwd=tmp_path)
    assert result.code == 0, result.output
    trail = _trail(run)
    assert trail["system"]["status"] == "ran" and trail["system"]["artifacts"] == ["system/vecadd_nsys2025.5.sqlite"]
    assert trail["framework"]["status"] == "skipped"  # no Kineto trace was given
    facts = {f["name"]: f["value"] for f in json.loads((run / "findings.json").read_text())["facts"]}
    assert facts["system.tool"] == "Nsight Systems 2025.5.2.266 (export schema 3.24.0)"
    assert facts["system.sync.top_api"] == "cudaDeviceSynchronize"
    report = (run / "report.md").read_text()
    assert "## What the system stage added (Nsight Systems)" in report and "Blocking CUDA calls" in report


def test_skip_then_merge_into_the_same_run(tmp_path) -> None:
    run = tmp_path / "run"
    first = run_cli("analyze", str(fixture_path(*ALEXNET)), "--out", str(run), cwd=tmp_path)
    assert first.code == 0, first.output
    system = _trail(run)["system"]
    assert system["status"] == "skipped" and "nsys (by GPU001" in system["reason"]
    assert "nsys profile" in system["command"] and f"advisor analyze {run}" in system["command"]
    report = (run / "report.md").read_text()
    assert "## Escalation trail" in report and re.search(r"\| system +\| skipped +\|", report)
    assert system["command"] in report  # the exact command, in the trail
    assert "What the system stage added" not in report

    merged = run_cli("analyze", str(run), str(fixture_path(*SAXPY)), cwd=tmp_path)
    assert merged.code == 0, merged.output
    assert not (tmp_path / "advisor-runs").exists()  # merged into the run, not a new one
    meta = _meta(run)
    trail = {e["stage"]: e for e in meta["trail"]}
    assert trail["framework"]["status"] == "ran" and trail["framework"]["reason"].startswith("loaded from")
    assert trail["system"]["status"] == "ran"
    assert trail["system"]["artifacts"] == ["system/saxpy_mpi_cuda_nvtx_nsys2022.2.sqlite"]
    assert (run / "system" / "saxpy_mpi_cuda_nvtx_nsys2022.2.sqlite").is_file()
    assert meta["merges"][0]["stages"] == ["system"]
    assert next(e for e in meta["workflow"]["edges"] if e["to"] == "system")["taken"] is True
    diagnoses = json.loads((run / "diagnoses.json").read_text())["diagnoses"]
    ids = [d["rule_id"] for d in diagnoses]
    assert "GPU001" in ids and "SYS004" in ids  # the framework's diagnosis stays, the system's is added
    facts = {f["name"] for f in json.loads((run / "findings.json").read_text())["facts"]}
    assert "steps.count" in facts and "system.memcpy.sync_per_step" in facts
    report = (run / "report.md").read_text()
    assert "## What the system stage added (Nsight Systems)" in report and "saxpy" in report
    assert re.search(r"\| system +\| ran +\|", report) and system["command"] not in report

    shown = run_cli("workflow", "show", "--run", str(run), cwd=tmp_path)
    assert shown.code == 0, shown.output
    assert "system     ran: loaded from saxpy_mpi_cuda_nvtx_nsys2022.2.sqlite" in shown.stdout
    assert "framework -> system: taken" in shown.stdout


def test_not_an_export(tmp_path) -> None:
    bad = tmp_path / "notes.sqlite"
    con = sqlite3.connect(bad)
    con.execute("create table notes (x text)")
    con.commit()
    con.close()
    result = run_cli("analyze", str(bad), cwd=tmp_path)
    assert result.code == 2 and "Traceback" not in result.output
    assert "notes.sqlite: is not an Nsight Systems SQLite export" in result.stderr
    assert not (tmp_path / "advisor-runs").exists()


def test_unknown_file_type(tmp_path) -> None:
    other = tmp_path / "trace.txt"
    other.write_text("hello")
    result = run_cli("analyze", str(other), cwd=tmp_path)
    assert result.code == 2 and "trace.txt: is not a file advisor reads" in result.stderr


def test_a_run_directory_needs_files_to_merge(tmp_path) -> None:
    run = tmp_path / "run"
    made = run_cli("analyze", str(fixture_path("nsys", "vecadd_nsys2025.5.sqlite")), "--out", str(run), cwd=tmp_path)
    assert made.code == 0, made.output
    result = run_cli("analyze", str(run), cwd=tmp_path)
    assert result.code == 2 and "is a run directory; give the files to add to it" in result.stderr


@pytest.mark.parametrize("suffix", [".nsys-rep", ".qdstrm"])
def test_reports_need_nsys_to_export(tmp_path, suffix) -> None:
    report = tmp_path / f"report{suffix}"
    report.write_bytes(b"\0" * 16)
    result = run_cli("analyze", str(report), cwd=tmp_path, env={"PATH": str(tmp_path / "none"), "ADVISOR_NSYS": ""})
    assert result.code == 2 and "Traceback" not in result.output
    assert f"report{suffix}: reading a {suffix} report needs nsys" in result.stderr


def _damaged_copy(tmp_path, *statements: str):  # noqa: ANN202
    path = tmp_path / "vecadd.sqlite"
    path.write_bytes(fixture_path("nsys", "vecadd_nsys2025.5.sqlite").read_bytes())
    con = sqlite3.connect(path)
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.close()
    return path


def test_rows_without_usable_times_get_a_data_quality_note(tmp_path) -> None:
    """Issue 19: rows the loader cannot place or time are counted in the report, never dropped silently."""
    path = _damaged_copy(tmp_path, "UPDATE OSRT_API SET [end] = 'later' WHERE rowid % 2 = 0")
    run = tmp_path / "run"
    result = run_cli("analyze", str(path), "--out", str(run), cwd=tmp_path)
    assert result.code == 0, result.output
    note = "data quality: OSRT_API: 223 of 446 rows: `end` missing or not a number (counted as 0 long)"
    assert note in json.loads((run / "findings.json").read_text())["notes"]
    assert f"Note: {note}" in (run / "report.md").read_text().replace("\\`", "`")


def test_a_broken_export_is_named_as_given_not_as_its_copy(tmp_path) -> None:
    """The export is copied into the run directory before it is read; an error names the file the user gave."""
    path = _damaged_copy(tmp_path, "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL", "CREATE TABLE gone (x)",
                         "CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS SELECT x AS start FROM gone", "DROP TABLE gone")
    result = run_cli("analyze", "vecadd.sqlite", "--out", "run", cwd=tmp_path)
    assert result.code == 2 and "Traceback" not in result.output
    assert result.stderr.strip() == ("advisor: error: vecadd.sqlite: could not be read as an Nsight Systems export "
                                     "(no such table: main.gone)")
