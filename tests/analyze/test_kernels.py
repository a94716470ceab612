"""Kernel findings on NVIDIA's real reports, and the bound-class thresholds."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from advisor.analyze.kernel.metrics import BUSY_PCT, bound_class
from advisor.engine.rulebook import RuleBook
from advisor.load.ncu_csv import load_ncu_csv
from advisor.load.ncu_report import import_module, load_ncu_report
from advisor.pipeline import analyze_kernel_reports, compare_kernel_reports, diagnose_findings
from conftest import fixture_path

EXAMPLES = Path("/usr/share/doc/nsight-compute/examples/uncoalescedGlobalAccesses")


def report(name: str):  # noqa: ANN201
    path = EXAMPLES / name
    if not path.exists() or (import_module() is None and shutil.which("ncu") is None):
        pytest.skip("needs NVIDIA's example reports and ncu or the ncu-report module")
    return load_ncu_report(path)


def kernel(findings, function: str) -> dict:  # noqa: ANN001
    return next(k for k in findings.get("ncu.kernels") if k["function"] == function)


@pytest.mark.parametrize(("sm", "mem", "waves", "expected"), [
    (46.5, BUSY_PCT, 78.8, "memory"), (46.5, BUSY_PCT - 0.01, 78.8, "latency"),
    (BUSY_PCT, 30.0, 5.0, "compute"), (BUSY_PCT - 0.01, 30.0, 5.0, "latency"),
    (70.0, 70.0, 5.0, "memory"), (9.2, 19.7, 0.99, "small-grid"), (9.2, 19.7, 1.0, "latency"),
    (None, 50.0, 1.0, "unknown"),
])
def test_bound_class_either_side_of_the_thresholds(sm, mem, waves, expected) -> None:  # noqa: ANN001
    assert bound_class(sm, mem, waves) == expected


def test_uncoalesced_fp64_kernel() -> None:
    """addConstDouble3 reads an array of double3 one field per thread: NVIDIA's uncoalesced example."""
    findings = analyze_kernel_reports([report("addConstDouble3.ncu-rep")])
    k = kernel(findings, "addConstDouble3")
    assert k["bound"] == "memory" and k["mem_pct"] == pytest.approx(72.61, abs=0.01)
    assert k["excess_sector_fraction"] == pytest.approx(2 / 3)
    assert k["sectors_per_request"] == pytest.approx(24.0)
    assert k["roofline_side"] == "memory" and k["arithmetic_intensity"] < k["ridge_point"]
    assert k["precision"] == "fp64" and k["fp64_share"] == 1.0 and k["fp32_to_fp64"] == 64
    assert k["occ_limiter"] == "none" and k["theoretical_occ_pct"] == 100
    assert k["top_stall"] == "lg_throttle"
    diagnosed = diagnose_findings(findings, RuleBook.load(env=False))
    fired = {d.rule_id: d for d in diagnosed.diagnoses}
    assert {"KRN001", "KRN005", "KRN008", "NCU001"} <= set(fired)
    assert fired["KRN005"].severity == "high" and "67%" in fired["KRN005"].what
    assert diagnosed.verdict.status == "slow" and "uncoalesced" in diagnosed.verdict.headline
    assert not {"KRN003", "KRN004", "KRN006", "KRN007", "KRN009"} & set(fired)


def test_coalesced_version_and_the_comparison() -> None:
    before, after = report("addConstDouble3.ncu-rep"), report("addConstDouble.ncu-rep")
    k = kernel(analyze_kernel_reports([after]), "addConstDouble")
    assert k["bound"] == "memory" and k["dram_pct"] == pytest.approx(91.75, abs=0.01)
    assert k["excess_sector_fraction"] == 0 and k["sectors_per_request"] == pytest.approx(8.0)
    assert k["top_stall"] == "long_scoreboard" and k["top_stall_share"] == pytest.approx(0.788, abs=0.001)
    comparison = compare_kernel_reports(before, after, RuleBook.load(env=False))
    assert comparison["fixed"] == {"KRN005": "uncoalesced-global-access"}
    assert set(comparison["remaining"]) == {"KRN001", "KRN008", "NCU001"} and comparison["new"] == {}
    assert comparison["speedup"] == pytest.approx(294.336 / 239.008)
    figures = {r["figure"]: r for r in comparison["figures"]}
    assert (figures["sectors_per_request"]["before"], figures["sectors_per_request"]["after"]) == (24.0, 8.0)


def test_csv_fixtures_classify() -> None:
    ocr = analyze_kernel_reports([load_ncu_csv(fixture_path("ncu", "pytorch_ocr_kernel_details_ncu2025.csv"))])
    k = ocr.get("ncu.kernels")[0]
    assert (k["bound"], k["occ_limiter"]) == ("latency", "registers")
    gemm = analyze_kernel_reports([load_ncu_csv(fixture_path("ncu", "cublaslt_gemm_ncu_stdout.log"))])
    k = gemm.get("ncu.kernels")[0]
    assert k["bound"] == "latency" and k["occ_limiter"] == "registers, shared memory"
    assert k["last_wave_idle"] == pytest.approx(0.055)
    fired = {d.rule_id for d in diagnose_findings(gemm, RuleBook.load(env=False)).diagnoses}
    assert {"KRN003", "KRN006", "NCU001"} <= fired and "KRN007" not in fired


def test_kernels_tie_back_to_the_framework() -> None:
    framework = [{"name": "addConstDouble3(int, double3*, double, double3*)", "ms": 0.29, "share": 0.6,
                  "calls_per_step": 1, "op": "aten::add", "site": "train.py:41 (step)", "file": "train.py",
                  "line": 41, "module": "model.head"}]
    findings = analyze_kernel_reports([report("addConstDouble3.ncu-rep")], framework)
    k = kernel(findings, "addConstDouble3")
    assert (k["op"], k["site"], k["module"], k["share"]) == ("aten::add", "train.py:41 (step)", "model.head", 0.6)
    assert k["where"] == "addConstDouble3 (addConstDouble3.ncu-rep), launched by aten::add at train.py:41 (step) " \
                         "in model.head"
    fired = {d.rule_id: d for d in diagnose_findings(findings, RuleBook.load(env=False)).diagnoses}
    assert fired["KRN005"].impact_ms == pytest.approx(0.29 * 2 / 3 * 0.8)
    assert "train.py:41" in fired["KRN005"].where


# the model's FLOPs and bytes beside the measured ones (issue 18) ----------------------------------------------
def _modelled_row(kernel_name: str) -> dict:
    """The ops.efficiency row the framework stage would publish for ``out = in + 10.0`` on the example's array:
    NVIDIA's uncoalescedGlobalAccesses.cu adds a constant to 3 x 1024 x 1024 doubles (addConstDouble runs on them
    as one flat array). The cost comes from the advisor's own operator model, not from the numbers below."""
    from advisor.analyze.framework.op_model import OpCall, model

    call = OpCall.parse("aten::add", "[[3145728],[],[]]", '["double","Scalar","Scalar"]', '["","10","1"]')
    cost = model(call)
    return {"op": "aten::add", "category": cost.category, "shape": "[[3145728],[],[]]", "dtype": cost.dtype,
            "gflops": cost.flops / 1e9, "mbytes": cost.bytes / 2**20, "kernel": kernel_name, "kernel_ms": 0.24}


def test_measured_flops_and_bytes_beside_the_model() -> None:
    """addConstDouble: one fp64 add per element, each element read once and written once. ncu counts exactly the
    3,145,728 DADDs; DRAM saw 25.17 MB read and 23.67 MB written, 3% under the model's 48 MiB (writes still in L2
    when the kernel ended)."""
    findings = analyze_kernel_reports([report("addConstDouble.ncu-rep")], framework_ops=[_modelled_row(
        "addConstDouble(int, double*, double, double*)")])
    k = kernel(findings, "addConstDouble")
    assert (k["model_op"], k["model_dtype"], k["model_rows"]) == ("aten::add", "fp64", 1)
    assert k["model_gflop"] == pytest.approx(3 * 2**20 / 1e9) and k["ncu_gflop"] == pytest.approx(3 * 2**20 / 1e9)
    assert k["flop_ratio"] == pytest.approx(1.0)
    assert k["model_mb"] == pytest.approx(48.0, abs=1e-5)
    assert k["ncu_mb"] == pytest.approx((25_170_048 + 23_673_216) / 2**20)
    assert k["bytes_ratio"] == pytest.approx(k["ncu_mb"] / k["model_mb"]) and 0.96 < k["bytes_ratio"] < 0.98


def test_no_model_for_another_kernel_and_no_flops_without_counters() -> None:
    """A modelled row of another kernel joins nothing; the ncu 2025 CSV has DRAM bytes but its FLOP counters
    read n/a and its only tensor-path count is 0: its FLOPs are unknown, not zero."""
    findings = analyze_kernel_reports([report("addConstDouble3.ncu-rep")],
                                      framework_ops=[_modelled_row("addConstDouble(int, double*, double, double*)")])
    k = kernel(findings, "addConstDouble3")
    assert (k["model_op"], k["model_rows"], k["model_gflop"], k["flop_ratio"]) == ("", 0, None, None)
    assert k["ncu_gflop"] == pytest.approx(3 * 2**20 / 1e9)  # three DADDs per double3, counted all the same
    ocr = analyze_kernel_reports([load_ncu_csv(fixture_path("ncu", "pytorch_ocr_kernel_details_ncu2025.csv"))])
    k = ocr.get("ncu.kernels")[0]
    assert k["ncu_gflop"] is None and k["ncu_mb"] == pytest.approx(2_330_000 / 2**20)
