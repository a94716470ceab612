"""`advisor analyze` on Nsight Compute files, as a user runs it."""

from __future__ import annotations

import csv
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


# the kernel stage's why inside the diagnosis that named the kernel (issue 17) ------------------------------------
V100 = "v100_resnet_single_rank.pt.trace.json.gz"


def _framework_run(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    cli = run_cli("analyze", str(fixture_path("kineto", V100)), "--out", str(out), cwd=tmp_path)
    assert cli.code == 0, cli.output
    return out


def _diagnoses(run: Path) -> dict[str, dict]:
    return {d["rule_id"]: d for d in json.loads((run / "diagnoses.json").read_text())["diagnoses"]}


def test_a_report_of_another_program_stays_apart_and_is_said(tmp_path: Path) -> None:
    """NVIDIA's example report holds addConstDouble, a kernel the ResNet trace never ran: its diagnoses explain
    nothing of the framework stage's, and the report says the kernels did not join."""
    report = EXAMPLES / "addConstDouble.ncu-rep"
    if not report.exists() or shutil.which("ncu") is None:
        pytest.skip("needs Debian's nsight-compute package")
    run = _framework_run(tmp_path)
    cli = run_cli("analyze", str(run), str(report), cwd=tmp_path)
    assert cli.code == 0, cli.output
    diagnoses = _diagnoses(run)
    assert {"GPU006", "GPU009", "KRN001", "KRN008", "NCU001"} <= set(diagnoses)
    assert all(r["stage"] != "kernel" for d in diagnoses.values() for r in d["refinements"])
    notes = json.loads((run / "findings.json").read_text())["notes"]
    said = [n for n in notes if n.startswith("none of the 1 kernel(s) in addConstDouble.ncu-rep")]
    assert said and "explain no framework diagnosis" in said[0]
    assert "none of the 1 kernel(s) in addConstDouble.ncu-rep" in (run / "report.md").read_text().replace("\n", " ")


def test_the_kernels_why_is_told_inside_the_diagnosis_that_named_it(tmp_path: Path) -> None:
    """No GPU here, and no fixture has an ncu report of a kernel in a Kineto trace. So: NVIDIA's real counters
    of one kernel (the ncu 2025 CSV fixture) under the name of the V100 trace's top kernel, which GPU009 names;
    the counters are real, the trace is real, only the name that joins them is put in."""
    run = _framework_run(tmp_path)
    facts = {f["name"]: f["value"] for f in json.loads((run / "findings.json").read_text())["facts"]}
    top = facts["kernels.top"][0]["name"]
    assert top in _diagnoses(run)["GPU009"]["kernels"]
    with fixture_path("ncu", "pytorch_ocr_kernel_details_ncu2025.csv").open(newline="") as fh:
        rows = list(csv.reader(fh))
    column = rows[0].index("Kernel Name")
    for row in rows[1:]:
        row[column] = top
    joined = tmp_path / "joined.csv"
    with joined.open("w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows(rows)

    cli = run_cli("analyze", str(run), str(joined), cwd=tmp_path)
    assert cli.code == 0, cli.output
    diagnoses = _diagnoses(run)
    assert not [i for i in diagnoses if i.startswith(("KRN", "NCU"))], "every kernel diagnosis is GPU009's why"
    gpu009 = diagnoses["GPU009"]
    assert gpu009["stages"] == ["framework", "kernel"]
    whys = {s["rule_id"]: s for s in gpu009["refinements"]}
    assert {"KRN003", "NCU001"} <= set(whys) and all(s["stage"] == "kernel" for s in whys.values())
    latency = whys["KRN003"]
    assert latency["files"] == ["kernel/joined.csv"]
    row = latency["evidence"][0]
    assert row["framework_name"] == top and row["op"] == "aten::add_" and row["bound"] == "latency"
    assert row["sm_pct"] > 0  # the real counters of the fixture
    outcomes = {o["rule_id"]: o for o in json.loads((run / "diagnoses.json").read_text())["outcomes"]}
    assert outcomes["KRN003"]["reason"] == "explains GPU009: shown inside it as its why (kernel)"
    report = (run / "report.md").read_text()
    gpu009_part = report[report.index("GPU009 gpu-compute-bound"):]
    assert "**Why**, kernel (Nsight Compute), KRN003:" in gpu009_part and "`kernel/joined.csv`" in gpu009_part
    # the kernel part shows the Nsight Compute figures first; the DRAM bytes measured (no model: the V100 trace
    # has no shapes) come before the throughputs
    assert "| bound   | duration_us | ncu_mb | sm_pct | mem_pct |" in gpu009_part
    notes = json.loads((run / "findings.json").read_text())["notes"]
    assert not [n for n in notes if n.startswith("none of the")]


def _renamed_ocr_csv(tmp_path: Path, name: str) -> Path:
    """The ncu 2025 CSV fixture's real counters under another kernel's name (no fixture has an ncu report of a
    kernel in a Kineto trace): only the name that joins them is put in."""
    with fixture_path("ncu", "pytorch_ocr_kernel_details_ncu2025.csv").open(newline="") as fh:
        rows = list(csv.reader(fh))
    column = rows[0].index("Kernel Name")
    for row in rows[1:]:
        row[column] = name
    joined = tmp_path / "joined.csv"
    with joined.open("w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows(rows)
    return joined


def test_the_models_bytes_are_shown_beside_the_measured_ones(tmp_path: Path) -> None:
    """BERT-small on an MI300X (TraceLens fixture): the roofline asks the kernel stage first about attn_fwd,
    the flash-attention kernel of a modelled SDPA call; ncu's measured DRAM bytes of it sit beside the model's
    GFLOP and MB per call, with their ratio, in ncu.kernels and in the report's evidence."""
    trace = fixture_path("tracelens", "mi300x", "gaunernst_bert-small-uncased__1016001", "trace.json.gz")
    run = tmp_path / "run"
    cli = run_cli("analyze", str(trace), "--out", str(run), cwd=tmp_path)
    assert cli.code == 0, cli.output
    facts = {f["name"]: f["value"] for f in json.loads((run / "findings.json").read_text())["facts"]}
    asked = facts["roofline.ncu_candidates"][0]
    model = next(r for r in facts["ops.efficiency"] if r["kernel"] == asked["name"])
    assert asked["name"] == "attn_fwd" and model["category"] == "SDPA_fwd"

    cli = run_cli("analyze", str(run), str(_renamed_ocr_csv(tmp_path, asked["name"])), cwd=tmp_path)
    assert cli.code == 0, cli.output
    facts = {f["name"]: f["value"] for f in json.loads((run / "findings.json").read_text())["facts"]}
    k = facts["ncu.kernels"][0]
    assert (k["model_op"], k["model_shape"], k["model_dtype"]) == (model["op"], model["shape"], "bf16")
    assert k["model_gflop"] == pytest.approx(model["gflops"]) and k["model_mb"] == pytest.approx(model["mbytes"])
    assert k["ncu_mb"] == pytest.approx(2_330_000 / 2**20)  # dram__bytes_read.sum 2.33 Mbyte + write 0
    assert k["bytes_ratio"] == pytest.approx(k["ncu_mb"] / model["mbytes"])
    assert k["ncu_gflop"] is None and k["flop_ratio"] is None  # the CSV's FLOP counters read n/a
    report = (run / "report.md").read_text()
    gpu = report[report.index("Measured by Nsight Compute"):]
    header, _, row = gpu.split("\n\n", 2)[1].splitlines()[:3]
    # no FLOPs measured: those two columns, empty, are left out
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "Kernel", "Operator", "Model GFLOP", "Model MB", "ncu MB", "Ratio"]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0] == "`attn_fwd`" and cells[1].startswith("`aten::_scaled_dot_product_flash_att")  # cut to fit
    assert cells[2:] == ["0.0407", "0.551", "2.22", "4.03"]
    html = (run / "report.html").read_text()
    assert "Measured by Nsight Compute" in html and "<td class=\"num\">4.03</td>" in html


def test_the_kernel_stage_is_the_why_of_an_operator_far_below_its_roofline(tmp_path: Path) -> None:
    """TimeSformer on an MI300X (TraceLens fixture): GPU020 finds its time attention's bmm at 1% of the roof and
    names its kernel; the ncu 2025 CSV's real counters under that kernel's name become GPU020's why (kernel),
    whose evidence puts the model's GFLOP and MB per call beside the DRAM bytes measured."""
    trace = fixture_path("tracelens", "mi300x", "facebook_timesformer-base-finetuned-k400__1016002", "trace.json.gz")
    run = tmp_path / "run"
    cli = run_cli("analyze", str(trace), "--out", str(run), cwd=tmp_path)
    assert cli.code == 0, cli.output
    gpu020 = _diagnoses(run)["GPU020"]
    assert gpu020["escalate"] == "ncu" and len(gpu020["kernels"]) == 1
    [kernel] = gpu020["kernels"]

    cli = run_cli("analyze", str(run), str(_renamed_ocr_csv(tmp_path, kernel)), cwd=tmp_path)
    assert cli.code == 0, cli.output
    diagnoses = _diagnoses(run)
    assert not [i for i in diagnoses if i.startswith(("KRN", "NCU"))], "every kernel diagnosis is GPU020's why"
    whys = {s["rule_id"]: s for s in diagnoses["GPU020"]["refinements"]}
    assert {"KRN003", "NCU001"} <= set(whys)
    row = whys["KRN003"]["evidence"][0]
    assert (row["model_op"], row["model_shape"]) == ("aten::bmm", "[[37632,8,64],[37632,64,8]]")
    assert row["model_gflop"] == pytest.approx(2 * 37632 * 8 * 8 * 64 / 1e9)
    assert row["ncu_mb"] == pytest.approx(2_330_000 / 2**20) and row["bytes_ratio"] > 0
    report = (run / "report.md").read_text()
    part = report[report.index("### 3. GPU020 operators-far-below-roofline"):]
    assert "**Why**, kernel (Nsight Compute), KRN003:" in part
    # its why's evidence: the bytes per call (model) beside the DRAM bytes measured, and their ratio, first
    assert "| bound   | duration_us | model_mb | ncu_mb | bytes_ratio |" in part
