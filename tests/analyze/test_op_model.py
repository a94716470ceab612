"""The per-call formulas of op_model on hand-worked calls (the peer comparison is in test_roofline.py)."""

from __future__ import annotations

import json

import pytest

from advisor.analyze.framework.op_model import CATEGORIES, OpCall, model, modelled_names


def _cost(name: str, dims: list, types: list, concrete: list | None = None):  # noqa: ANN202
    call = OpCall.parse(name, json.dumps(dims), json.dumps(types), json.dumps(concrete or [""] * len(dims)))
    assert call is not None
    return model(call)


BF16, F32 = "c10::BFloat16", "float"


def test_mm_is_two_flops_per_multiply_add_and_each_matrix_once() -> None:
    c = _cost("aten::mm", [[64, 32], [32, 16]], [BF16, BF16])
    assert (c.category, c.flops, c.bytes, c.dtype, c.unit) == ("GEMM", 2 * 64 * 32 * 16,
                                                                (64 * 32 + 32 * 16 + 64 * 16) * 2, "bf16", "matrix")


def test_baddbmm_counts_its_real_bias_tensor() -> None:
    c = _cost("aten::baddbmm", [[4, 8, 16], [4, 8, 32], [4, 32, 16], [], []], [F32] * 3 + ["Scalar"] * 2)
    assert c.flops == 4 * (2 * 8 * 16 * 32 + 8 * 16)
    assert c.bytes == (4 * (8 * 32 + 32 * 16 + 8 * 16) + 4 * 8 * 16) * 4


def test_scaled_mm_in_fp8_writes_two_byte_results() -> None:
    c = _cost("aten::_scaled_mm", [[128, 64], [64, 256], [], []], ["c10::Float8_e4m3fn"] * 2 + [F32, F32])
    assert c.dtype == "fp8" and c.bytes == 128 * 64 + 64 * 256 + 128 * 256 * 2


def test_causal_attention_computes_half_the_scores() -> None:
    dims = [[2, 8, 128, 64]] * 3 + [[]] * 4
    full = _cost("aten::_scaled_dot_product_flash_attention", dims, [BF16] * 3 + ["Scalar"] * 4,
                 ["", "", "", "0.", "False", "False", ""])
    causal = _cost("aten::_scaled_dot_product_flash_attention", dims, [BF16] * 3 + ["Scalar"] * 4,
                   ["", "", "", "0.", "True", "False", ""])
    assert full.flops == 4 * 2 * 8 * 128 * 128 * 64
    assert causal.flops == full.flops / 2 and causal.bytes == full.bytes


def test_flash_backward_recomputes_the_scores() -> None:
    q = [2, 8, 128, 64]
    dims = [q, q, q, q, q, [2, 8, 128], [], [], [], [], [], [], [], [], []]
    concrete = [""] * 11 + ["False"] + [""] * 3
    flash = _cost("aten::_scaled_dot_product_flash_attention_backward", dims, [BF16] * 15, concrete)
    fwd = 4 * 2 * 8 * 128 * 128 * 64
    assert flash.category == "SDPA_bwd" and flash.flops == pytest.approx(2.5 * fwd)
    eff_dims = [q, q, q, q, [], q, [2, 8, 128], [], [], [], [], [], []]
    eff = _cost("aten::_scaled_dot_product_efficient_attention_backward", eff_dims, [BF16] * 13,
                [""] * 11 + ["True", ""])
    assert eff.flops == pytest.approx(2 * fwd / 2)


def test_convolution_output_follows_stride_padding_and_groups() -> None:
    # 3x3, stride 2, padding 1 on 32x32 -> 16x16; depthwise (groups = 64): weight [64, 1, 3, 3]
    c = _cost("aten::convolution", [[8, 64, 32, 32], [64, 1, 3, 3], [], [], [], [], [], [], []],
              [BF16, BF16, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
              ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "64"])
    out = 8 * 64 * 16 * 16
    assert c.flops == 2 * out * 9
    assert c.bytes == (8 * 64 * 32 * 32 + 64 * 9 + out) * 2


def test_transposed_convolution_grows_its_input() -> None:
    c = _cost("aten::convolution", [[1, 16, 8, 8], [16, 4, 2, 2], [4], [], [], [], [], [], []],
              [F32, F32, F32] + [""] * 6, ["", "", "", "[2, 2]", "[0, 0]", "[1, 1]", "True", "[0, 0]", "1"])
    out = 1 * 4 * 16 * 16
    assert c.flops == 2 * (16 * 8 * 8) * (4 * 2 * 2) + out


def test_convolution_backward_follows_its_output_mask() -> None:
    dims = [[2, 8, 16, 16], [2, 4, 16, 16], [8, 4, 3, 3], [], [], [], [], [], [], [], []]
    concrete = ["", "", "", "[0]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]
    both = _cost("aten::convolution_backward", dims, [F32] * 3 + [""] * 8, concrete + ["[True, True, False]"])
    weight = _cost("aten::convolution_backward", dims, [F32] * 3 + [""] * 8, concrete + ["[False, True, False]"])
    fwd = 2 * (2 * 8 * 16 * 16) * (4 * 9)
    assert both.flops == 2 * fwd and weight.flops == fwd and weight.bytes == both.bytes / 2


def test_layer_norm_backward_reads_its_mask() -> None:
    dims = [[4, 128, 256], [4, 128, 256], [], [4, 128, 1], [4, 128, 1], [256], [256], []]
    c = _cost("aten::native_layer_norm_backward", dims, [BF16] * 8,
              ["", "", "[256]", "", "", "", "", "[True, True, True]"])
    n = 4 * 128 * 256
    assert c.category == "NORM_bwd" and c.flops == 9 * n
    assert c.bytes == n * 2 + n * 2 * 2 + 256 * 2 * 2 + 256 * 2 * 2


def test_eval_mode_batch_norm_is_not_training() -> None:
    dims = [[8, 32, 14, 14], [32], [32], [32], [32], [], [], []]
    train = _cost("aten::native_batch_norm", dims, [BF16] * 5 + ["Scalar"] * 3, ["", "", "", "", "", "True", "0.1", "1e-05"])
    evals = _cost("aten::native_batch_norm", dims, [BF16] * 5 + ["Scalar"] * 3, ["", "", "", "", "", "False", "0.1", "1e-05"])
    n = 8 * 32 * 14 * 14
    assert train.flops - evals.flops == 3 * n


def test_binary_ops_broadcast_and_reductions_follow_dim() -> None:
    add = _cost("aten::add", [[4, 1, 16], [8, 1], []], [F32, F32, "Scalar"])
    assert add.flops == 4 * 8 * 16 and add.bytes == (4 * 16 + 8 + 4 * 8 * 16) * 4
    total = _cost("aten::sum", [[4, 8, 16], [], [], []], [F32, "ScalarList", "Scalar", ""], ["", "[-1]", "False", ""])
    assert total.flops == 4 * 8 * 16 and total.bytes == (4 * 8 * 16 + 4 * 8) * 4


def test_a_convolution_without_its_scalar_arguments_has_no_model() -> None:
    """Without stride and padding (profilers before Concrete Inputs) the output size would be a guess."""
    call = OpCall.parse("aten::convolution", json.dumps([[8, 3, 32, 32], [16, 3, 3, 3], [], [], [], [], [], [], []]),
                        json.dumps([F32, F32] + [""] * 7), "")
    assert call is not None and model(call) is None


def test_unknown_ops_and_misfit_shapes_have_no_model() -> None:
    assert _cost("aten::embedding", [[10, 4], [3]], [F32, "long int"]) is None
    assert _cost("aten::mm", [[4, 4, 4], [4, 4]], [F32, F32]) is None
    assert OpCall.parse("aten::mm", "", "", "") is None
    assert "aten::linear" not in modelled_names() and "aten::addmm" in modelled_names()
    assert CATEGORIES[-1] == "unmodelled"
