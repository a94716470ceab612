"""The trace-pattern rules stay quiet on the real traces recorded elsewhere, where none of the patterns is planted.

Each fixture is a real training or inference run (CUDA and ROCm, eager and compiled, Hugging Face models
that call scaled_dot_product_attention); what the analyzers measure there is checked against what the
traces hold, and no rule of the six may fire.
"""

from __future__ import annotations

import pytest

from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import run_analyzers
from advisor.engine.evaluate import evaluate_rules
from advisor.engine.rulebook import RuleBook
from advisor.load.kineto import load_kineto
from conftest import KINETO_TRACES, fixture_path

BOOK = RuleBook.load(env=False)
RULES = ("CPU002", "CPU003", "CPU004", "OPT002", "CMP001", "CMP002")
TRACELENS = ["Falconsai_nsfw_image_detection__1016002", "Qwen_Qwen1.5-0.5B-Chat__1016005",
             "gaunernst_bert-small-uncased__1016001", "resnet_act_checkpoint", "sglang_qwen3_8b_decode_graph",
             "torch_compile_triton"]
_CACHE: dict[str, dict] = {}


def facts(*parts: str) -> dict:
    key = "/".join(parts)
    if key not in _CACHE:
        _CACHE[key] = run_analyzers(TraceView(load_kineto(fixture_path(*parts)))).values()
    return _CACHE[key]


CASES = [("kineto", name) for name in KINETO_TRACES] + [("tracelens", "mi300x", d, "trace.json.gz") for d in TRACELENS]


@pytest.mark.parametrize("parts", CASES, ids=lambda p: p[-1] if p[-1] != "trace.json.gz" else p[-2])
def test_no_trace_pattern_rule_fires(parts: tuple[str, ...]) -> None:
    values = facts(*parts)
    diagnoses, _ = evaluate_rules([BOOK[r] for r in RULES], values, values.get("steps.time_ms"))
    assert not diagnoses, [(d.rule_id, d.what) for d in diagnoses]


def test_sdpa_models_have_no_hand_written_attention() -> None:
    for name in ("Falconsai_nsfw_image_detection__1016002", "Qwen_Qwen1.5-0.5B-Chat__1016005",
                 "gaunernst_bert-small-uncased__1016001"):
        assert facts("tracelens", "mi300x", name, "trace.json.gz")["attention.unfused_per_step"] == 0


def test_qwen_eager_rmsnorm_is_seen_but_below_the_threshold() -> None:
    """Qwen's RMSNorm and rotary embedding run as eager elementwise chains: found, measured on the GPU,
    a small share of this inference step."""
    f = facts("tracelens", "mi300x", "Qwen_Qwen1.5-0.5B-Chat__1016005", "trace.json.gz")
    assert f["elementwise.chains_per_step"] > 20 and f["elementwise.basis"] == "gpu"
    assert 0 < f["elementwise.share"] < 0.10
    # HF's attention output is made contiguous before the projection: real copies, a few percent of the step
    assert f["layout_copies.calls_per_step"] > 0 and f["layout_copies.share"] < 0.10


def test_compiled_fixture_runs_one_graph_per_step() -> None:
    f = facts("tracelens", "mi300x", "torch_compile_triton", "trace.json.gz")
    assert (f["compile.regions_per_step"], f["compile.graphs_per_step"], f["compile.breaks_per_step"]) == (1, 1, 0)
    assert f["compile.compiles_per_step"] == 0 and f["compile.labels_traced"] is False
