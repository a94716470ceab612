"""FLOPs and bytes of normalisation, elementwise and reduction calls (see :mod:`.op_model`, which imports this module).

All of these run on the vector units, and all but the largest are bound by memory: the byte counts
matter more than the FLOPs. Bytes assume each tensor is read or written once. The normalisation
formulas are TraceLens's (``Normalization`` in ``TraceLens/PerfModel/perf_model.py``), term by term,
so that the figures can be checked against it; where the arguments are read differently the
docstring says so.
"""

from __future__ import annotations

from math import prod

from advisor.analyze.framework.op_call import OpCall, OpCost, register

__all__: list[str] = []


# normalisation -----------------------------------------------------------------------------------------------------
def _norm_fwd(n: int, c: float, bpe_in: int, bpe_out: int, training: bool, affine: bool, bias: bool,
              dtype: str) -> OpCost:
    """Forward of a batch/layer/group norm over ``n`` elements with ``c`` statistics channels.

    FLOPs: 3·c for the per-channel scale and shift, 3·n to compute mean and variance (training), 3·c for
    1/sqrt(var + eps), and 2·n to normalise (a multiply and an add per element).
    Bytes: the input read and the output written once, plus c elements for each of mean and variance,
    weight and bias (when affine), and the running statistics written back (training).
    """
    flops = 3 * c + (3 * n if training else 0) + 3 * c + 2 * n
    tensors = 2 + (1 if affine else 0) + (1 if affine and bias else 0) + (2 if training else 0)
    return OpCost("NORM_fwd", float(flops), float(n * bpe_in + n * bpe_out + tensors * c * bpe_in), dtype, "vector")


def _norm_bwd(n: int, c: float, bpe_in: int, bpe_out: int, training: bool, affine: bool, bias: bool,
              grad_input: bool, dtype: str) -> OpCost:
    """Backward of a batch/layer/group norm.

    FLOPs per channel, with e = n / c elements each: 3 for 1/std (not training), 4·e for the dot product
    of grad_out and the centred input, and 5·e for grad_input (training) or 2·e when grad_input is not
    asked for (TraceLens's branches).
    Bytes: grad_out read, the input read (twice when grad_input is computed in training, once otherwise),
    the saved 1/std read (training), the weight read (affine), grad_weight and grad_bias written
    (affine, training).
    """
    e = n / c
    per_channel = (0 if training else 3) + 4 * e
    if grad_input:
        per_channel += 5 * e if training else 0
    else:
        per_channel += 2 * e
    moved = n * bpe_out + n * bpe_in * (2 if grad_input and training else 1)
    moved += (c * bpe_in if training else 0) + (c * bpe_in if affine else 0)
    moved += c * bpe_in * (2 if bias else 1) if affine and training else 0
    return OpCost("NORM_bwd", float(c * per_channel), float(moved), dtype, "vector")


def _present(c: OpCall, i: int) -> bool:
    return c.shape(i) is not None


@register("aten::native_layer_norm")
def _layer_norm(c: OpCall) -> OpCost | None:
    """native_layer_norm(input, normalized_shape, weight?, bias?, eps): c = prod(normalized_shape)."""
    x, bpe = c.shape(0), c.bpe(0)
    if x is None or bpe is None:
        return None
    channels = prod(c.ints(1, x[-1:]))
    return _norm_fwd(prod(x), channels, bpe, bpe, True, _present(c, 2), _present(c, 3), c.dtype(0))


@register("aten::native_layer_norm_backward")
def _layer_norm_bwd(c: OpCall) -> OpCost | None:
    """native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?, output_mask)."""
    x, bpe = c.shape(1), c.bpe(1)
    if x is None or bpe is None:
        return None
    mask = c.flags(7, 3)
    channels = prod(c.ints(2, x[-1:]))
    return _norm_bwd(prod(x), channels, bpe, bpe, True, mask[1], mask[2], mask[0], c.dtype(1))


_BATCH_NORM_TRAINING = {"aten::native_batch_norm": 5, "aten::cudnn_batch_norm": 5, "aten::miopen_batch_norm": 5,
                        "aten::_native_batch_norm_legit": 5, "aten::_native_batch_norm_legit_no_training": -1}


@register(*_BATCH_NORM_TRAINING)
def _batch_norm(c: OpCall) -> OpCost | None:
    """batch_norm(input, weight?, bias?, running_mean, running_var, training, momentum, eps): c = C.

    ``training`` is read as the flag it is (TraceLens takes any non-empty text as true, so an eval-mode
    batch norm counts there as training).
    """
    x, bpe = c.shape(0), c.bpe(0)
    if x is None or bpe is None or len(x) < 2:
        return None
    at = _BATCH_NORM_TRAINING[c.name]
    training = c.flag(at, True) if at >= 0 else False
    return _norm_fwd(prod(x), x[1], bpe, bpe, training, _present(c, 1), _present(c, 2), c.dtype(0))


@register("aten::native_batch_norm_backward")
def _batch_norm_bwd(c: OpCall) -> OpCost | None:
    """native_batch_norm_backward(grad_out, input, weight?, running_mean, running_var, save_mean, save_invstd,
    train, eps, output_mask)."""
    x, bpe = c.shape(1), c.bpe(1)
    if x is None or bpe is None or len(x) < 2:
        return None
    mask = c.flags(9, 3)
    return _norm_bwd(prod(x), x[1], bpe, bpe, c.flag(7, True), _present(c, 2), mask[2], mask[0], c.dtype(1))


@register("aten::cudnn_batch_norm_backward", "aten::miopen_batch_norm_backward")
def _cudnn_batch_norm_bwd(c: OpCall) -> OpCost | None:
    """cudnn/miopen_batch_norm_backward(input, grad_out, weight, running_mean, running_var, save_mean, save_var,
    eps, ...): always training (it reads the batch statistics saved by the forward; TraceLens takes it
    as not training), every gradient computed."""
    x, bpe = c.shape(0), c.bpe(0)
    if x is None or bpe is None or len(x) < 2:
        return None
    return _norm_bwd(prod(x), x[1], bpe, bpe, True, _present(c, 2), True, True, c.dtype(0))


@register("aten::native_group_norm")
def _group_norm(c: OpCall) -> OpCost | None:
    """native_group_norm(input, weight?, bias?, N, C, HxW, group, eps): c = C, as TraceLens."""
    x, bpe = c.shape(0), c.bpe(0)
    if x is None or bpe is None or len(x) < 2:
        return None
    return _norm_fwd(prod(x), x[1], bpe, bpe, True, _present(c, 1), _present(c, 2), c.dtype(0))


@register("aten::native_group_norm_backward")
def _group_norm_bwd(c: OpCall) -> OpCost | None:
    """native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask):
    c = C / group, as TraceLens."""
    x, bpe = c.shape(1), c.bpe(1)
    if x is None or bpe is None or len(x) < 2:
        return None
    groups = max(c.ints(8, (1,))[0], 1)
    mask = c.flags(9, 3)
    return _norm_bwd(prod(x), x[1] / groups, bpe, bpe, True, mask[1], mask[2], mask[0], c.dtype(1))


@register("aten::_fused_rms_norm")
def _rms_norm(c: OpCall) -> OpCost | None:
    """_fused_rms_norm(input, normalized_shape, weight?, eps).

    FLOPs: (n / c)·(2·c + 2) for the root mean square of each row, and n (2·n with a weight) to scale.
    Bytes: input and output once, the weight's c elements.
    """
    x, bpe = c.shape(0), c.bpe(0)
    if x is None or bpe is None:
        return None
    n, channels, affine = prod(x), prod(c.ints(1, x[-1:])), _present(c, 2)
    flops = n / channels * (2 * channels + 2) + n * (2 if affine else 1)
    moved = 2 * n * bpe + (channels * bpe if affine else 0)
    return OpCost("NORM_fwd", float(flops), float(moved), c.dtype(0), "vector")


@register("aten::_fused_rms_norm_backward")
def _rms_norm_bwd(c: OpCall) -> OpCost | None:
    """_fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight?, output_mask).

    FLOPs: n (grad_out times the weight, when there is one), n for x·rstd, 6·n for grad_input, and
    n plus n for the sum over rows for grad_weight. Bytes: grad_out, input and grad_input once, the
    weight and grad_weight.
    """
    x, bpe = c.shape(1), c.bpe(1)
    if x is None or bpe is None:
        return None
    n, channels, affine = prod(x), prod(c.ints(2, x[-1:])), _present(c, 4)
    mask = c.flags(5, 2)
    flops = (n if affine else 0) + n + (6 * n if mask[0] else 0)
    if mask[1] and affine:
        flops += n + (n if n > channels else 0)
    moved = 3 * n * bpe + (2 * channels * bpe if affine else 0)
    return OpCost("NORM_bwd", float(flops), float(moved), c.dtype(1), "vector")


# elementwise -------------------------------------------------------------------------------------------------------
UNARY = ("aten::copy_", "aten::clamp_min", "aten::clamp_min_", "aten::clamp_max", "aten::clamp_max_", "aten::clamp",
         "aten::clamp_", "aten::sigmoid", "aten::sigmoid_", "aten::rsqrt", "aten::sqrt", "aten::silu", "aten::silu_",
         "aten::neg", "aten::pow", "aten::relu", "aten::relu_", "aten::gelu", "aten::gelu_", "aten::tanh",
         "aten::tanh_", "aten::exp", "aten::exp_", "aten::log", "aten::abs", "aten::reciprocal", "aten::hardtanh",
         "aten::hardtanh_", "aten::leaky_relu", "aten::leaky_relu_", "aten::elu", "aten::elu_", "aten::cos",
         "aten::sin", "aten::erf")
BINARY = ("aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::mul", "aten::mul_", "aten::div", "aten::div_",
          "aten::sigmoid_backward", "aten::threshold_backward", "aten::gelu_backward", "aten::silu_backward",
          "aten::tanh_backward", "aten::maximum", "aten::minimum")


def _elements(shape: tuple[int, ...] | None) -> int:
    return prod(shape) if shape is not None else 1  # a scalar operand is one element


@register(*UNARY)
def _unary(c: OpCall) -> OpCost | None:
    """One FLOP per element; the input read and the output written once (the output dtype is the second
    argument's when that is a tensor, as for ``copy_``, else the input's)."""
    x, bpe = c.shape(0), c.bpe(0)
    if x is None or bpe is None:
        return None
    out_bpe = (c.bpe(1) or bpe) if c.shape(1) is not None else bpe
    n = prod(x)
    return OpCost("elementwise", float(n), float(n * (bpe + out_bpe)), c.dtype(0), "vector")


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    nd = max(len(a), len(b))
    a, b = (1,) * (nd - len(a)) + a, (1,) * (nd - len(b)) + b
    if any(x != y and x != 1 and y != 1 for x, y in zip(a, b)):
        raise ValueError(f"shapes {a} and {b} do not broadcast")
    return tuple(max(x, y) for x, y in zip(a, b))


@register(*BINARY)
def _binary(c: OpCall) -> OpCost | None:
    """One FLOP per output element (the operands broadcast); both operands read and the output written once.
    A scalar operand counts as one 4-byte element (TraceLens's convention); the output takes the wider
    dtype of two tensor operands."""
    a, b = c.shape(0), c.shape(1)
    bpe_a = c.bpe(0)
    if a is None or bpe_a is None:
        return None
    bpe_b = c.bpe(1) or 4
    out = _broadcast(a, b) if b is not None else a
    bpe_out = max(bpe_a, bpe_b) if b is not None else bpe_a
    moved = prod(a) * bpe_a + _elements(b) * bpe_b + prod(out) * bpe_out
    return OpCost("elementwise", float(prod(out)), float(moved), c.dtype(0), "vector")


# reductions --------------------------------------------------------------------------------------------------------
REDUCE = ("aten::sum", "aten::mean", "aten::amax", "aten::amin", "aten::max", "aten::min", "aten::norm",
          "aten::linalg_vector_norm", "aten::std", "aten::var", "aten::logsumexp", "aten::prod", "aten::cumsum",
          "aten::cumprod")


@register(*REDUCE)
def _reduce(c: OpCall) -> OpCost | None:
    """One FLOP per input element; the input read once and the result written once.

    The result's size follows ``dim`` (argument 1, 2 for norms, where given); cumulative ops
    write as many elements as they read. TraceLens counts the result as one element whatever ``dim`` is.
    """
    x, bpe = c.shape(0), c.bpe(0)
    if x is None or bpe is None:
        return None
    n = prod(x)
    if c.name in ("aten::cumsum", "aten::cumprod"):
        out = n
    else:
        # the dim overloads have three or more arguments (sum(self, dtype) has two); norm's dim comes after p
        at = 2 if c.name in ("aten::norm", "aten::linalg_vector_norm") else 1
        dims = {d % len(x) for d in c.ints(at, ())} if len(c.concrete) >= 3 else set()
        out = prod(s for i, s in enumerate(x) if i not in dims) if dims else 1
    return OpCost("reduce", float(n), float(n * bpe + out * bpe), c.dtype(0), "vector")


@register("aten::_softmax", "aten::_log_softmax")
def _softmax(c: OpCall) -> OpCost | None:
    """Softmax over one dimension: 3 FLOPs per element (exponent, sum, divide; TraceLens's count), the input
    read and the output written once."""
    x, bpe = c.shape(0), c.bpe(0)
    if x is None or bpe is None:
        return None
    n = prod(x)
    return OpCost("reduce", 3.0 * n, 2.0 * n * bpe, c.dtype(0), "vector")


@register("aten::_softmax_backward_data", "aten::_log_softmax_backward_data")
def _softmax_bwd(c: OpCall) -> OpCost | None:
    """Softmax backward, grad_in = y·(grad - Σ grad·y): 4 FLOPs per element; grad and y read, grad_in written."""
    x, bpe = c.shape(0), c.bpe(0)
    if x is None or bpe is None:
        return None
    n = prod(x)
    return OpCost("reduce", 4.0 * n, 3.0 * n * bpe, c.dtype(0), "vector")
