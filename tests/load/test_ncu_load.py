"""The Nsight Compute readers on real files: NVIDIA's example reports and ncu CSV from real runs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from advisor.errors import TraceError
from advisor.load.ncu_csv import is_ncu_csv, load_ncu_csv, parse_ncu_csv
from advisor.load.ncu_metrics import normalise
from advisor.load.ncu_report import import_module, load_ncu_report
from conftest import fixture_path

EXAMPLES = Path("/usr/share/doc/nsight-compute/examples/uncoalescedGlobalAccesses")
NCU = shutil.which("ncu")
needs_ncu = pytest.mark.skipif(NCU is None, reason="the Nsight Compute CLI (ncu) is not installed")


def example(name: str) -> Path:
    path = EXAMPLES / name
    if not path.exists():
        pytest.skip(f"{path} is missing: install Debian's nsight-compute package")
    return path


def exported(tmp_path: Path, name: str, page: str) -> Path:
    """ncu --import R.ncu-rep --csv --page PAGE, as a user would write it to a file."""
    out = tmp_path / f"{name}.{page}.csv"
    text = subprocess.run([NCU, "--import", str(example(name)), "--csv", "--page", page], capture_output=True,
                          text=True, check=True).stdout
    out.write_text(text)
    return out


@pytest.mark.parametrize(("value", "unit", "expected", "norm"), [
    ("239.01", "usecond", 239010.0, "ns"), ("6.75", "us", 6750.0, "ns"), ("406240", "ns", 406240.0, "ns"),
    ("25.17", "Mbyte", 25.17e6, "bytes"), ("1.02", "Kbyte/block", 1020.0, "bytes"),
    ("204.36", "Gbyte/second", 204.36e9, "bytes/s"), ("345.14", "Gbyte/s", 345.14e9, "bytes/s"),
    ("5.79", "cycle/nsecond", 5.79e9, "hz"), ("1.99", "Ghz", 1.99e9, "hz"), ("1239496049.13", "hz", 1239496049.13, "hz"),
    ("13,485", "cycle", 13485.0, "count"), ("91.75", "%", 91.75, "pct"),
])
def test_units_are_normalised(value: str, unit: str, expected: float, norm: str) -> None:
    got, got_unit = normalise(value, unit)
    assert got_unit == norm and got == pytest.approx(expected)


def test_na_and_text_values() -> None:
    assert normalise("n/a", "") == (None, "count")
    assert normalise("cudaFuncCachePreferNone", "") == ("cudaFuncCachePreferNone", "text")


def test_details_page_with_rules_and_speedups() -> None:
    report = load_ncu_csv(fixture_path("ncu", "pytorch_ocr_kernel_details_ncu2025.csv"))
    assert len(report.launches) == 1
    row = report.launches.iloc[0]
    assert row["kernel"].startswith("enable_if<!T7, void>::type kernel<int, int, __nv_bfloat16")
    assert row["cc"] == "12.0" and row["grid_dim"] == "(224, 1, 1)" and row["block_dim"] == "(32, 4, 1)"
    assert row["duration_ns"] == pytest.approx(6750.0)  # "6.75 us" from --metrics gpu__time_duration.sum
    assert row["sm_hz"] == pytest.approx(1.99e9) and row["dram_bytes_per_s"] == pytest.approx(345.14e9)
    assert row["mem_pct"] == pytest.approx(19.66) and row["theoretical_occ_pct"] == pytest.approx(16.67)
    assert row["elapsed_cycles"] == 13485  # "13,485"
    rules = report.rules.set_index("rule")
    assert set(rules.index) == {"SOLBottleneck", "SOLFPRoofline", "IssueSlotUtilization", "TheoreticalOccupancy"}
    assert rules.loc["TheoreticalOccupancy", "speedup"] == pytest.approx(80.34)
    assert rules.loc["TheoreticalOccupancy", "type"] == "OPT"


def test_stdout_with_prof_lines_program_output_and_trailing_commas() -> None:
    path = fixture_path("ncu", "cublaslt_gemm_ncu_stdout.log")
    assert is_ncu_csv(path)
    report = load_ncu_csv(path)
    row = report.launches.iloc[0]
    assert row["function"].startswith("cutlass3x_sm100_tensorop")
    assert row["duration_ns"] == 406240  # --print-units base: ns
    assert row["sm_hz"] == pytest.approx(1239496049.13)
    assert (row["waves_per_sm"], row["sm_count"], row["registers_per_thread"]) == (1.89, 152, 168)
    assert row["smem_dynamic_bytes"] == 205696
    assert "Tail" in " ".join(report.rules["message"]) or "wave" in " ".join(report.rules["message"])
    assert len(report.rules) == 8


def test_program_output_alone_is_not_ncu_csv(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("==PROF== Connected to process 1\nhello\n==WARNING== No kernels were profiled.\n")
    assert not is_ncu_csv(log)
    with pytest.raises(TraceError, match="no Nsight Compute CSV header"):
        load_ncu_csv(log)


@needs_ncu
def test_legacy_details_layout_with_kernel_time(tmp_path: Path) -> None:
    """ncu 2022's details page: a "Kernel Time" column, no Block/Grid/Device/CC, scaled units."""
    path = exported(tmp_path, "addConstDouble3.ncu-rep", "details")
    assert '"Kernel Time"' in path.read_text().splitlines()[0]
    row = load_ncu_csv(path).launches.iloc[0]
    assert row["kernel"] == "addConstDouble3(int, double3 *, double, double3 *)" and row["function"] == "addConstDouble3"
    assert row["duration_ns"] == pytest.approx(294340.0)  # "294.34 usecond"
    assert row["l1_pct"] == pytest.approx(95.53) and row["mem_pct"] == pytest.approx(72.61)


@needs_ncu
def test_raw_page_and_details_page_agree(tmp_path: Path) -> None:
    raw = load_ncu_csv(exported(tmp_path, "addConstDouble.ncu-rep", "raw")).launches.iloc[0]
    details = load_ncu_csv(exported(tmp_path, "addConstDouble.ncu-rep", "details")).launches.iloc[0]
    for column in ("duration_ns", "mem_pct", "sm_pct", "achieved_occ_pct", "waves_per_sm", "registers_per_thread"):
        assert raw[column] == pytest.approx(details[column], rel=1e-3), column
    assert raw["l2_global_sectors"] == 1572864 and raw["l2_global_sectors_ideal"] == 1572864
    assert raw["stall_long_scoreboard"] > 0


def test_several_processes_repeat_the_header() -> None:
    text = fixture_path("ncu", "cublaslt_gemm_ncu_stdout.log").read_text()
    header = next(line for line in text.splitlines() if line.startswith('"ID"'))
    rows = [line for line in text.splitlines() if line.startswith('"0"')]
    second = "\n".join([header, *(r.replace('"0",', '"1",', 1) for r in rows)])
    report = parse_ncu_csv(text + "\n==PROF== Disconnected\n" + second)
    assert sorted(report.launches["launch"]) == [0, 1]


@pytest.mark.parametrize("backend", ["module", "cli"])
def test_ncu_rep_backends_give_the_same_tables(backend: str) -> None:
    if backend == "module" and import_module() is None:
        pytest.skip("the ncu-report module is not installed")
    if backend == "cli" and NCU is None:
        pytest.skip("ncu is not installed")
    report = load_ncu_report(example("addConstDouble3.ncu-rep"), backend)
    row = report.launches.iloc[0]
    assert row["function"] == "addConstDouble3" and row["device_name"] == "NVIDIA RTX A2000"
    assert row["duration_ns"] == pytest.approx(294336.0)
    assert (row["gld_sectors"], row["gld_requests"]) == (2359296, 98304)
    assert (row["l2_global_sectors"], row["l2_global_sectors_ideal"]) == (4718592, 1572864)
    assert row["dfma_peak_per_cycle"] == 52 and row["ffma_peak_per_cycle"] == 3328
    assert "UncoalescedGlobalAccess" in set(report.rules["rule"])
    if backend == "module":
        assert row["mangled"] == "_Z15addConstDouble3iP7double3dS0_"


def test_ncu_rep_module_and_cli_agree() -> None:
    if import_module() is None or NCU is None:
        pytest.skip("needs both the ncu-report module and ncu")
    a = load_ncu_report(example("addConstDouble.ncu-rep"), "module").launches.iloc[0]
    b = load_ncu_report(example("addConstDouble.ncu-rep"), "cli").launches.iloc[0]
    numeric = [c for c in a.index if isinstance(a[c], float) and not np.isnan(a[c])]
    assert len(numeric) > 60
    for column in numeric:
        assert a[column] == pytest.approx(b[column], rel=1e-2, abs=1e-3), column


def test_missing_report() -> None:
    with pytest.raises(TraceError, match="no such file"):
        load_ncu_report(Path("nowhere.ncu-rep"))
