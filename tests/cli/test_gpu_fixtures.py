"""`advisor analyze` on the real GPU traces: the diagnoses and the report's GPU section.

- a100_alexnet_cuda_sync: the top diagnosis is that the host is blocked on the GPU, with the sync's call site;
- a100_ddp_nccl_rank0: the GPU idles most of the time, the report says where that idle time comes from and
  how much of the time is communication;
- v100_resnet_single_rank: the GPU is busy (compute-bound) and no high-severity diagnosis fires;
- a100_recsys_2of128_ranks: the straggler rank and the collective wait across ranks;
- channels-last: the DDP CNN's cuDNN convolutions transpose NCHW<->NHWC around every convolution (GPU018),
  as does the MI300X bf16 ResNet's MIOpen; the V100 fp32 ResNet and AlexNet hardly do, and stay quiet.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from advisor.engine.rulebook import RuleBook
from conftest import RunOutput, fixture_path, run_cli


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory: pytest.TempPathFactory):
    cache: dict[str, RunOutput] = {}

    def run(name: str, folder: str = "kineto") -> RunOutput:
        if name not in cache:
            out = tmp_path_factory.mktemp("gpu") / "run"
            cli = run_cli("analyze", str(fixture_path(folder, *name.split("/"))), "--out", str(out), cwd=out.parent)
            assert cli.code == 0, cli.output
            cache[name] = RunOutput(out, cli, 0.0)
        return cache[name]

    return run


def gpu_section(run: RunOutput) -> str:
    text = (run.path / "report.md").read_text()
    start = text.index("## GPU")
    return text[start: text.index("\n## ", start + 1)]


def test_alexnet_host_blocked_on_the_gpu(analyzed) -> None:
    run = analyzed("a100_alexnet_cuda_sync.pt.trace.json.gz")
    top = run.diagnoses[0]
    assert top["rule_id"] == "GPU001" and top["name"] == "host-blocked-on-gpu"
    assert top["where"] == run.facts["sync.site"] == "cudaFree in aten::conv2d"
    assert top["escalate"] == "nsys"
    apis = {row["api"] for row in top["evidence"]}
    assert {"cudaFree", "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaDeviceSynchronize"} <= apis
    assert run.json("diagnoses.json")["verdict"]["headline"].startswith("host blocked on gpu")
    section = gpu_section(run)
    assert "Host-GPU sync points" in section and "`cudaStreamSynchronize`" in section
    assert "no ProfilerStep ranges" in section  # the window's definition is stated


def test_ddp_idle_gpu_its_causes_and_communication(analyzed) -> None:
    run = analyzed("a100_ddp_nccl_rank0.pt.trace.json.gz")
    f = run.facts
    assert f["gpu.idle_fraction"] > 0.5
    top = run.diagnoses[0]
    assert top["rule_id"] == "GPU002" and top["severity"] == "high"
    assert f"idle {round(f['gpu.idle_fraction'] * 100)}% of the window" in top["what"]
    assert top["evidence"][0]["op"] == f["gpu.idle.top_host_op"]
    section = gpu_section(run)
    assert re.search(r"The GPU is idle 76% of the time .* most of the idle time is `cpu`", section)
    assert "Host operators running while the GPU was idle" in section
    assert f"Communication kernels run {f['comm.ms']:.1f} ms per step (7% of the window" in section
    # every idle cause with time is listed, and the rows add up to the idle share
    shown = [float(m) for m in re.findall(r"\| idle: \S+ +\| +\S+ \S+ \| +(\d+(?:\.\d+)?)% \|", section)]
    assert sum(shown) == pytest.approx(76, abs=1.5)


def test_v100_busy_and_no_high_severity_false_alarm(analyzed) -> None:
    run = analyzed("v100_resnet_single_rank.pt.trace.json.gz")
    severities = {d["rule_id"]: d["severity"] for d in run.diagnoses}
    assert not any(s in ("high", "critical") for s in severities.values()), severities
    assert severities.get("GPU009") == "info"
    compute_bound = next(d for d in run.diagnoses if d["rule_id"] == "GPU009")
    assert "compute-bound" in compute_bound["what"] and compute_bound["escalate"] == "ncu"
    assert "compute-bound" in gpu_section(run)
    assert run.facts["gpu.state"] == "busy" and not run.facts["gpu.starved"]


def test_recsys_ranks_straggler(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cli = run_cli("analyze", str(fixture_path("kineto", "a100_recsys_2of128_ranks")), "--out", str(out), cwd=tmp_path)
    assert cli.code == 0, cli.output
    run = RunOutput(out, cli, 0.0)
    straggler = next(d for d in run.diagnoses if d["rule_id"] == "GPU008")
    assert straggler["where"] == "rank 1"
    assert "Ranks: compute imbalance 26%; straggler rank 1; rank 0 waits" in (out / "report.md").read_text()
    assert "Skew: over 5 collectives matched across the ranks, 16.0 ms per step" in (out / "report.html").read_text()
    assert "<h3>Ranks</h3>" in (out / "report.html").read_text()


def test_gpu_rules_are_in_the_rulebook_with_knowledge() -> None:
    book = RuleBook.load(env=False)
    knowledge = Path(__file__).resolve().parents[2] / "knowledge"
    for rid in [f"GPU{n:03d}" for n in range(1, 20)]:
        rule = book[rid].rule
        for entry in rule.knowledge:
            text = (knowledge / f"{entry}.md").read_text()
            for section in ("## What it looks like", "## Why it slows training", "## How to fix", "## Expected gain",
                            "## References"):
                assert section in text, f"{entry}: {section}"


def test_findings_json_round_trips(analyzed) -> None:
    run = analyzed("a100_ddp_nccl_rank0.pt.trace.json.gz")
    data = json.loads((run.path / "findings.json").read_text())
    units = {f["name"]: f["unit"] for f in data["facts"]}
    assert units["gpu.idle_ms"] == "ms" and units["gpu.busy_fraction"] == "fraction" and units["kernels.top"] == "table"


def test_convolutions_transposed_around_nhwc_kernels(analyzed) -> None:
    ddp = analyzed("a100_ddp_nccl_rank0.pt.trace.json.gz")
    f = ddp.facts
    # 211 nchwToNhwc / nhwcToNchw kernels per step, a quarter of the convolutions' kernel time
    assert f["conv_layout.convert_per_step"] == 211 and 0.2 < f["conv_layout.conv_share"] < 0.3
    layout = next(d for d in ddp.diagnoses if d["rule_id"] == "GPU018")
    assert layout["severity"] == "low" and "ConvolutionBackward0" in layout["where"]
    # the GPU idles 76% of the window waiting for the host: the transposes' 5 ms give back about a quarter
    assert layout["impact_ms"] == pytest.approx(f["conv_layout.convert_ms"] * f["gpu.busy_fraction"], rel=1e-6)
    resnet = analyzed("mi300x/resnet_act_checkpoint/trace.json.gz", "tracelens")
    layout = next(d for d in resnet.diagnoses if d["rule_id"] == "GPU018")
    assert layout["severity"] == "medium" and "batched_transpose" in json.dumps(layout["evidence"])
    for name in ("v100_resnet_single_rank.pt.trace.json.gz", "a100_alexnet_cuda_sync.pt.trace.json.gz"):
        run = analyzed(name)
        assert run.facts["conv_layout.window_share"] < 0.002
        assert "GPU018" not in {d["rule_id"] for d in run.diagnoses}, name


def test_collective_sizes_from_the_nccl_kernels(analyzed) -> None:
    f = analyzed("a100_ddp_nccl_rank0.pt.trace.json.gz").facts
    sizes = {(r["collective"], r["size"]): r for r in f["comm.sizes"]}
    # five gradient buckets of 8-31 MB per step, and the broadcast of the BN buffers: 212 KB and 424 bytes
    assert sizes[("allreduce", "large")]["per_step"] == 5 and sizes[("allreduce", "large")]["avg_bytes"] > 8e6
    assert sizes[("broadcast", "small")]["avg_bytes"] == 424 and f["comm.small_per_step"] == 1
    run = analyzed("a100_ddp_nccl_rank0.pt.trace.json.gz")
    assert "6.6 GB/s (by time; 13.0 GB/s at best), 2% of the NVLink3 link's 300 GB/s" in " ".join(gpu_section(run).split())
    # the slow all-reduces are exposed too: GPU007 tells both, once (DIST004 quiet)
    gpu007 = next(d for d in run.diagnoses if d["rule_id"] == "GPU007")
    assert "2% of the NVLink3 link's peak" in gpu007["what"] and "DIST004" not in {d["rule_id"] for d in run.diagnoses}
    assert "GPU019" not in {d["rule_id"] for d in analyzed("a100_ddp_nccl_rank0.pt.trace.json.gz").diagnoses}
