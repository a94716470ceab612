"""The ncu command for a fixture trace's hot kernel, checked against the installed ncu; skips and failures."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from advisor.collect.ncu import KernelTarget, build_command, run_kernel_stage, select_kernels
from advisor.tools.ncu_names import kernel_filter
from advisor.collect.ncu import unknown_options
from advisor.tools.ncu import classify_failure, gpu_status, parse_help
from advisor.load.kineto import load_kineto
from conftest import fixture_path

NCU = shutil.which("ncu")


def kernel_table(trace: str) -> list[dict]:
    """kernels.top as the framework stage gives it: name, ms and share per step, calls per step."""
    loaded = load_kineto(fixture_path("kineto", trace))
    kernels = loaded.events[loaded.events["cat"] == "kernel"]
    steps = 5
    grouped = kernels.groupby("name", observed=True)["dur"].agg(["sum", "size"]).sort_values("sum", ascending=False)
    total = grouped["sum"].sum()
    return [{"name": str(n), "ms": r["sum"] / steps / 1e6, "share": r["sum"] / total, "calls_per_step": r["size"] / steps}
            for n, r in grouped.iterrows()]


def test_hot_kernel_command_selects_it_and_skips_warmup() -> None:
    rows = kernel_table("v100_resnet_single_rank.pt.trace.json.gz")
    targets = select_kernels(rows, limit=3, min_share=0.05)
    assert [t.name for t in targets] == [r["name"] for r in rows[:3]]
    hot = targets[0]
    assert hot.name.startswith("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>")
    cmd = build_command(hot, Path("out/01"), ["python", "train.py"])
    opts = dict(zip(cmd[1::2], cmd[2::2]))
    base, regex = opts["--kernel-name-base"], opts["--kernel-name"]
    assert base == "demangled" and regex.startswith("regex:")
    names = [r["name"] for r in rows]
    assert [n for n in names if re.search(regex[len("regex:"):], n)] == [hot.name]  # this kernel, no sibling
    assert int(opts["--launch-skip"]) == round(hot.calls_per_step * 5) == 160  # 32 calls per step, 5 steps
    assert opts["--launch-count"] == "1"
    assert cmd[-2:] == ["python", "train.py"]


def test_every_option_exists_in_the_installed_ncu() -> None:
    if NCU is None:
        pytest.skip("ncu is not installed")
    target = KernelTarget("volta_sgemm_64x64_nt", share=0.05, calls_per_step=21)
    for plan in ("diagnose", "memory", "overview", "full"):
        cmd = build_command(target, Path("o"), ["python", "t.py"], ncu=NCU, plan=plan, nvtx_phase="forward")
        assert unknown_options(cmd, NCU) == [], plan
    listed = subprocess.run([NCU, "--list-sections"], capture_output=True, text=True).stdout
    cmd = build_command(target, Path("o"), ["python", "t.py"], ncu=NCU)
    sections = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--section"]
    assert all(re.search(rf"^{s}\s", listed, re.M) for s in sections), sections
    assert kernel_filter(target.name) == ("function", "regex:^volta_sgemm_64x64_nt$")
    assert "--nvtx-include" in cmd or "--nvtx-include" in build_command(target, Path("o"), [], nvtx_phase="forward")


def test_regex_tolerates_the_other_demangler() -> None:
    """nsys 2025 writes (int)4, (unsigned long)3 and >>; CUPTI writes 4, 3ul and > >."""
    with fixture_path("nsys", "pytorch_ocr_cuda_gpu_kern_sum.csv").open() as fh:
        names = [row["Name"] for row in csv.DictReader(fh)]
    ncu_style = next(n for n in names if "BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor" in n)
    cupti_style = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
                   "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, "
                   "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, "
                   "std::array<char*, 3ul>)")
    regex = kernel_filter(cupti_style)[1][len("regex:"):]
    assert re.search(regex, ncu_style)
    assert [n for n in names if re.search(regex, n)] == [ncu_style]


def test_permission_error_is_recognised() -> None:
    stderr = ("==PROF== Connected to process 12345 (/usr/bin/python3.10)\n"
              "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
              "Counters on the target device 0. For instructions on enabling permissions and to get more "
              "information see https://developer.nvidia.com/ERR_NVGPUCTRPERM\n")
    failure = classify_failure(stderr, 1)
    assert failure.code == "permission" and "NVreg_RestrictProfilingToAdminUsers=0" in failure.message
    assert classify_failure("==WARNING== No kernels were profiled.\n", 0).code == "no-kernels"
    assert classify_failure("==ERROR== something new\n", 1).message.endswith("something new")


def test_help_parser_reads_short_and_long_options() -> None:
    text = "  -c [ --launch-count ] arg   Limit\n  --launch-skip-before-match arg\n  --nvtx    Enable\n"
    assert parse_help(text) == {"-c", "--launch-count", "--launch-skip-before-match", "--nvtx"}


def test_stage_is_skipped_without_gpu_with_the_commands(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('train')\n")
    targets = [KernelTarget("volta_sgemm_64x64_nt", share=0.3, calls_per_step=2, op="aten::mm")]
    result = run_kernel_stage(tmp_path / "run", script, ["--lr", "0.1"], targets, gpus=lambda: (0, "no driver"))
    assert result.status == "skipped"
    assert result.code in ("no-gpu", "no-ncu") and result.artifacts == []
    assert "--kernel-name 'regex:^volta_sgemm_64x64_nt$' --launch-skip 10 --launch-count 1" in result.commands[0]
    assert result.commands[0].endswith("train.py --lr 0.1")
    saved = json.loads((tmp_path / "run" / "kernel" / "stage.json").read_text())
    assert saved["status"] == "skipped" and saved["commands"] == result.commands
    config = json.loads((tmp_path / "run" / "kernel" / "01-volta_sgemm_64x64_nt" / "collector.json").read_text())
    assert (config["mode"], config["wait"], config["warmup"]) == ("nvtx", 5, 0)


def test_real_gpu_status_here_matches_the_stage() -> None:
    count, why = gpu_status()
    assert count > 0 or why


def test_permission_failure_stops_the_stage(tmp_path: Path) -> None:
    if NCU is None:
        pytest.skip("ncu is not installed")
    script = tmp_path / "train.py"
    script.write_text("")

    def denied(cmd, **kwargs):  # noqa: ANN001, ANN003, ANN202 - stands in for the GPU machine's ncu
        return subprocess.CompletedProcess(cmd, 1, "", "==ERROR== ERR_NVGPUCTRPERM - The user does not have "
                                                       "permission to access NVIDIA GPU Performance Counters\n")

    targets = [KernelTarget("a_kernel", calls_per_step=1), KernelTarget("b_kernel", calls_per_step=1)]
    result = run_kernel_stage(tmp_path / "run", script, [], targets, runner=denied, gpus=lambda: (1, ""))
    assert (result.status, result.code) == ("skipped", "permission")
    assert len(result.notes) == 1 and (tmp_path / "run" / "kernel" / "01-a_kernel.log").exists()
