"""The facts behind the roofline rules (GPU005/GPU006's model gain, GPU021, GPU022, GPU023, the kernel
stage's candidates) on the real traces, with figures checked by hand, and which rules fire on them.

The MI300X traces (TraceLens's) are inference in bf16 with shapes; the NVIDIA ones have no shapes (V100,
A100 AlexNet and DDP: the model falls back to the kernel-name rules) or no deviceProperties (A100 recsys,
whose device is given here to test the TF32 path).
"""

from __future__ import annotations

import dataclasses

import pytest

from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import run_analyzers
from advisor.engine.evaluate import evaluate_rules
from advisor.engine.rulebook import RuleBook
from advisor.load.kineto import load_kineto
from conftest import fixture_path

BOOK = RuleBook.load(env=False)
TIMESFORMER = "facebook_timesformer-base-finetuned-k400__1016002"
OWLV2 = "google_owlv2-large-patch14-ensemble__1016001"
QWEN = "Qwen_Qwen1.5-0.5B-Chat__1016005"
BERT = "gaunernst_bert-small-uncased__1016001"
MI300X = [BERT, QWEN, "Falconsai_nsfw_image_detection__1016002", TIMESFORMER, OWLV2, "resnet_act_checkpoint",
          "sglang_qwen3_8b_decode_graph", "torch_compile_triton"]
NVIDIA = ["v100_resnet_single_rank.pt.trace.json.gz", "a100_alexnet_cuda_sync.pt.trace.json.gz",
          "a100_ddp_nccl_rank0.pt.trace.json.gz", "a100_recsys_2of128_ranks/rank0.pt.trace.json.gz"]
RULES = ("CPU003", "CPU004", "GPU005", "GPU006", "GPU020", "GPU021", "GPU022", "GPU023")
#: what fires of RULES, per trace: each checked by hand below or in test_roofline.py
FIRES = {TIMESFORMER: {"GPU020", "GPU021"}, OWLV2: {"GPU021"}, QWEN: {"GPU023"},
         "v100_resnet_single_rank.pt.trace.json.gz": {"GPU006"}, "a100_alexnet_cuda_sync.pt.trace.json.gz": {"GPU005"}}
_CACHE: dict[str, dict] = {}


def facts(name: str) -> dict:
    if name not in _CACHE:
        path = fixture_path("tracelens", "mi300x", name, "trace.json.gz") if name in MI300X else \
            fixture_path("kineto", *name.split("/"))
        _CACHE[name] = run_analyzers(TraceView(load_kineto(path))).values()
    return _CACHE[name]


def fired(name: str) -> dict[str, object]:
    values = facts(name)
    diagnoses, _ = evaluate_rules([BOOK[r] for r in RULES], values, values.get("steps.time_ms"))
    return {d.rule_id: d for d in diagnoses}


@pytest.mark.parametrize("name", MI300X + NVIDIA, ids=lambda n: n.split("/")[0][:24])
def test_the_roofline_rules_fire_only_where_the_numbers_say(name: str) -> None:
    assert set(fired(name)) == FIRES.get(name, set())


def test_timesformer_attention_is_written_out_over_a_1_8_gib_score_matrix() -> None:
    """12 layers, each a time and a space attention (HF's TimesformerSelfAttention, dropout as a child
    module): the softmax over [8, 12, 3137, 3137] bf16 moves the matrix in and out (2 x 1.76 GiB) in 3.48 ms
    a call, the scaling 0.91 ms: 12 x 2 x 2 x 1.89 GB over 52.7 ms of forward passes, 1.72 TB/s."""
    f = facts(TIMESFORMER)
    assert f["attention.unfused_per_step"] == 24 and f["attention.basis"] == "gpu"
    assert f["attention.scores_shape"] == "[8,12,3137,3137]"
    assert f["attention.scores_bytes"] == 8 * 12 * 3137 * 3137 * 2
    assert f["attention.dropout"] is False  # inference: nn.Dropout called, nothing launched
    assert f["attention.pointwise_ms"] == pytest.approx(52.88, abs=0.01)
    assert f["attention.scores_tb_s"] == pytest.approx(12 * 2 * 2 * 1_889_427_648 / 52.7e-3 / 1e12, rel=0.01)
    assert f["attention.scores_bandwidth_share"] == pytest.approx(f["attention.scores_tb_s"] / 5.3)
    d = fired(TIMESFORMER)["GPU021"]
    assert d.severity == "medium" and d.impact_ms == pytest.approx(f["attention.pointwise_ms"])
    assert "[8,12,3137,3137] (1.8 GiB a call)" in d.what and "32% of the AMD Instinct MI300X" in d.what


def test_owlv2_attention_counts_no_dropout_in_evaluation() -> None:
    f = facts(OWLV2)
    assert f["attention.unfused_per_step"] == 180 and f["attention.dropout"] is False
    assert f["attention.pointwise_dropout_ms"] == 0.0
    assert f["attention.scores_shape"] == "[16,5185,5185]"
    d = fired(OWLV2)["GPU021"]
    assert d.impact_ms == pytest.approx(154.55, abs=0.01) and d.severity == "medium"


def test_qwen_eager_rmsnorm_runs_on_the_gpu() -> None:
    """Qwen2RMSNorm after each residual add: add, to(fp32), pow, mean, add eps, rsqrt, mul, to(bf16), mul
    weight: nine kernels, 41 times a step (two per layer of 20, and the final norm). Its dearest kernel is
    the fp32 multiply by rsqrt over [16, 559, 1024] (23.6 us), which the fused kernel is taken to cost."""
    f = facts(QWEN)
    top = f["elementwise_runs.sites"][0]
    assert top["ops"] == "add copy_ pow mean add rsqrt mul copy_ mul"
    assert (top["runs_per_step"], top["kernels"]) == (41, 9)
    assert top["gain_ms"] == pytest.approx(top["ms"] - 41 * 0.0236, abs=0.02)
    assert f["elementwise_runs.gain_ms"] == pytest.approx(6.94, abs=0.01)
    assert f["elementwise_runs.fused_ms"] == pytest.approx(f["elementwise_runs.ms"] - f["elementwise_runs.gain_ms"])
    assert 0.45 < f["elementwise_runs.bandwidth_share"] < 0.55
    d = fired(QWEN)["GPU023"]
    assert d.severity == "medium" and d.impact_ms == pytest.approx(6.94, abs=0.01)


@pytest.mark.parametrize("name", ["torch_compile_triton", "sglang_qwen3_8b_decode_graph"])
def test_compiled_and_graph_replayed_runs_have_no_elementwise_runs(name: str) -> None:
    assert facts(name)["elementwise_runs.runs_per_step"] == 0


def test_attention_kernels_are_not_elementwise_runs() -> None:
    """TimeSformer's scaling and softmax over the score matrix are adjacent elementwise kernels, GPU021's."""
    assert all("softmax" not in s["ops"] for s in facts(TIMESFORMER)["elementwise_runs.sites"])


def test_misaligned_gemms_are_compared_with_their_aligned_peers() -> None:
    """TimeSformer's GEMMs over 25,089 rows run at 35.6% of the roofline, its aligned ones of the same work
    ([25088, 768] and [25096, 768] x [768, 2304]) at 35.8%: no gain. BERT's vocabulary projection (N = 30522)
    has no aligned GEMM of its size in the run: no estimate."""
    f = facts(TIMESFORMER)
    rows = {(r["shape"]): r for r in f["gemm_alignment.rows"]}
    odd = rows["[[3072],[25089,768],[768,3072],[],[]]"]
    assert odd["dims"] == "M=25089" and odd["multiple"] == 8 and odd["references"] == 2
    assert odd["reference_share"] == pytest.approx(0.358, abs=0.001) and odd["gain_ms"] is None
    assert f["gemm_alignment.gain_ms"] == 0.0
    vocab = [r for r in facts(BERT)["gemm_alignment.rows"] if "30522" in r["dims"]][0]
    assert vocab["dims"] == "M=141 N=30522" and vocab["reference_share"] is None and vocab["gain_ms"] is None


def test_fp32_gemms_of_recsys_are_listed_with_shapes_without_a_spec() -> None:
    f = facts("a100_recsys_2of128_ranks/rank0.pt.trace.json.gz")
    assert f["precision.fp32_modelled_ms"] == pytest.approx(f["precision.fp32_ms"])
    top = f["precision.fp32_gemms"][0]
    assert (top["op"], top["shape"], top["dtype"]) == ("aten::bmm", "[[2048,160,20],[2048,20,606]]", "fp32")
    assert "precision.fp32_gain_ms" not in f  # no deviceProperties: no roof, GPU005 would count half


def test_tf32_gives_thin_fp32_gemms_nothing_when_memory_bound() -> None:
    """The recsys trace on its A100 (its deviceProperties were stripped; given here): the DLRM GEMMs are
    thin (K = 10 to 40). mm [327680, 20] x [20, 606] moves 820.6 MB, 528 us at 1.555 TB/s, against 407 us
    of fp32 FLOPs: memory-bound, and TF32 leaves its bytes as they are. bmm [2048, 160, 40] x [2048, 40, 267]
    is compute-bound in fp32 (359 us) but memory-bound at the TF32 roof (315 us): 1.14x."""
    path = fixture_path("kineto", "a100_recsys_2of128_ranks", "rank0.pt.trace.json.gz")
    trace = load_kineto(path)
    a100 = {"id": 0, "name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 42_297_524_224, "computeMajor": 8,
            "computeMinor": 0, "warpSize": 32}
    f = run_analyzers(TraceView(dataclasses.replace(trace, meta={**trace.meta, "deviceProperties": [a100]}))).values()
    assert f["precision.fp32_target"] == "tf32"
    rows = {r["shape"]: r for r in f["precision.fp32_gemms"]}
    thin = rows["[[327680,20],[20,606]]"]
    assert thin["bound"] == "memory" and thin["speedup_at_roof"] == pytest.approx(1.0) and thin["gain_ms"] == 0
    bmm = rows["[[2048,160,40],[2048,40,267]]"]
    assert bmm["bound"] == "compute" and bmm["speedup_at_roof"] == pytest.approx(359.0 / 315.0, rel=0.01)
    assert bmm["gain_ms"] == pytest.approx(bmm["ms"] * (1 - 1 / bmm["speedup_at_roof"]))
    # far under the half of the fp32 time that the kernel names alone would give
    assert f["precision.fp32_gain_ms"] == pytest.approx(0.27, abs=0.01)
    assert f["precision.fp32_gain_ms"] < 0.1 * f["precision.fp32_ms"]


def test_the_kernel_stage_candidates_lose_the_most_to_the_roofline() -> None:
    """TimeSformer: the softmax over the score matrix, 41.7 ms at 20.5% of its roof, loses 33.2 ms; then the
    tiny batched GEMM of GPU020 (13.7 ms at 1.4%)."""
    rows = facts(TIMESFORMER)["roofline.ncu_candidates"]
    assert rows[0]["op"] == "aten::_softmax" and "SoftMax" in rows[0]["name"]
    assert rows[0]["lost_ms"] == pytest.approx(rows[0]["ms"] * (1 - rows[0]["roofline_share"]))
    assert rows[0]["lost_ms"] == pytest.approx(33.17, abs=0.01) and rows[0]["calls_per_step"] == 12
    assert rows[1]["shape"] == "[[37632,8,64],[37632,64,8]]"
    lost = [r["lost_ms"] for r in rows]
    assert lost == sorted(lost, reverse=True) and len({r["name"] for r in rows}) == len(rows) <= 10


def test_no_candidates_without_shares() -> None:
    assert facts("v100_resnet_single_rank.pt.trace.json.gz")["roofline.ncu_candidates"] == []
