"""What one operator call must compute and move: FLOPs and bytes from its input shapes and dtypes.

A Kineto trace recorded with shapes (``record_shapes=True``) gives each
``cpu_op`` its ``Input Dims`` (one list per argument, ``[]`` for a scalar or an
absent tensor), ``Input type`` (``c10::BFloat16``, ``float``, ``Scalar``, ...)
and ``Concrete Inputs`` (the scalar arguments as text: ``"[1, 1]"``, ``"True"``).
:func:`model` turns one call's three texts into an :class:`OpCost`: its
category, FLOPs, bytes and the data type and unit (matrix or vector) whose peak
bounds it; an operator it does not know gives ``None`` (counted as unmodelled
by the caller, never dropped).

The formulas follow the peer TraceLens (AMD-AGI/TraceLens,
``TraceLens/PerfModel/perf_model.py``) so that the figures can be checked
against its reports; where this module differs, the difference is said beside
the formula. Bytes assume every tensor is read or written once (no cache reuse,
no re-reads): the least traffic the operator can cause, which is what a
roofline bound needs. Composite ops (``aten::linear``, ``aten::matmul``,
``aten::conv2d``, ``aten::layer_norm``, ``aten::scaled_dot_product_attention``)
are not modelled themselves: they launch no kernel of their own, and the mm,
addmm, bmm, convolution, native norm and fused attention ops inside them are.
Normalisation, elementwise and reduction ops are in :mod:`.op_model_pointwise`; the call and cost types
in :mod:`.op_call`.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from advisor.analyze.framework import op_model_pointwise  # noqa: F401  (its models register themselves)
from advisor.analyze.framework.op_call import MODELS, OpCall, OpCost, register

__all__ = ["CATEGORIES", "OpCall", "OpCost", "gemm_dims", "model", "modelled_names"]

#: the categories of ``ops.efficiency``, in the order reports list them
CATEGORIES = ("GEMM", "CONV_fwd", "CONV_bwd", "SDPA_fwd", "SDPA_bwd", "NORM_fwd", "NORM_bwd", "elementwise",
              "reduce", "triton", "unmodelled")

def modelled_names() -> frozenset[str]:
    """Every operator name :func:`model` knows."""
    return frozenset(MODELS)


def model(call: OpCall) -> OpCost | None:
    """The cost of one call, or ``None`` when the operator is not modelled or its arguments do not fit."""
    func = MODELS.get(call.name)
    if func is None:
        return None
    try:
        return func(call)
    except (TypeError, ValueError, IndexError, ZeroDivisionError):  # shapes that do not fit the signature
        return None


# GEMM ---------------------------------------------------------------------------------------------------------
def _gemm(b: int, m: int, n: int, k: int, bias_elems: int, bpe_in: int, bpe_out: int, dtype: str,
          bias: bool) -> OpCost:
    """C[b,m,n] = A[b,m,k] · B[b,k,n] (+ bias).

    FLOPs: 2·m·n·k per batch (a multiply and an add per term), plus m·n for the bias add.
    Bytes: A, B and C once each, plus the bias tensor's own elements. TraceLens counts the bias as n
    elements (a row vector); for addmm's usual [n] bias that is the same, for a full [m, n] or [b, m, n]
    bias this counts what is really read.
    """
    flops = b * (2 * m * n * k + (m * n if bias else 0))
    moved = b * (m * k + k * n) * bpe_in + b * m * n * bpe_out + bias_elems * bpe_in
    return OpCost("GEMM", float(flops), float(moved), dtype, "matrix")


#: GEMM operator -> (rank of A and B, whether a bias comes first)
_MATMULS = {"aten::mm": (2, False), "aten::addmm": (2, True), "aten::bmm": (3, False),
            "aten::baddbmm": (3, True), "aten::_scaled_mm": (2, False)}


def gemm_dims(c: OpCall) -> tuple[int, int, int, int] | None:
    """(batch, m, n, k) of a GEMM operator's call, A[(b,)m,k] @ B[(b,)k,n]; None for another operator or
    shapes that do not fit."""
    if c.name not in _MATMULS:
        return None
    rank, biased = _MATMULS[c.name]
    first = 1 if biased else 0
    a, b = c.shape(first), c.shape(first + 1)
    if a is None or b is None or len(a) != rank or len(b) != rank:
        return None
    return (a[0] if rank == 3 else 1), a[-2], b[-1], a[-1]


def _matmul(c: OpCall) -> OpCost | None:
    """A[(b,)m,k] @ B[(b,)k,n] from inputs 0 and 1, or 1 and 2 after a bias broadcast to the output."""
    biased = _MATMULS[c.name][1]
    first = 1 if biased else 0
    dims, bpe = gemm_dims(c), c.bpe(first)
    if dims is None or bpe is None:
        return None
    bias = c.shape(0) if biased else None
    batch, m, n, k = dims
    return _gemm(batch, m, n, k, prod(bias) if bias else 0, bpe, bpe, c.dtype(first), biased)


@register("aten::mm")
def _mm(c: OpCall) -> OpCost | None:
    """mm(A[m,k], B[k,n])."""
    return _matmul(c)


@register("aten::addmm")
def _addmm(c: OpCall) -> OpCost | None:
    """addmm(bias, A[m,k], B[k,n], beta, alpha): bias broadcast to [m, n]."""
    return _matmul(c)


@register("aten::bmm")
def _bmm(c: OpCall) -> OpCost | None:
    """bmm(A[b,m,k], B[b,k,n])."""
    return _matmul(c)


@register("aten::baddbmm")
def _baddbmm(c: OpCall) -> OpCost | None:
    """baddbmm(bias, A[b,m,k], B[b,k,n], beta, alpha)."""
    return _matmul(c)


@register("aten::_scaled_mm")
def _scaled_mm(c: OpCall) -> OpCost | None:
    """_scaled_mm(A[m,k], B[k,n], scale_a, scale_b, bias?, ...): an fp8 GEMM.

    The output dtype is not in the trace's inputs; as TraceLens does, an fp8 GEMM is taken to write
    2-byte results (bf16/fp16) and wider inputs their own width. The bias, when given, is argument 4.
    """
    a, b = c.shape(0), c.shape(1)
    bpe = c.bpe(0)
    if a is None or b is None or len(a) != 2 or len(b) != 2 or bpe is None:
        return None
    bias = c.shape(4)
    out = 2 if bpe == 1 else bpe
    return _gemm(1, a[0], b[1], a[1], prod(bias) if bias else 0, bpe, out, c.dtype(0), bias is not None)


# convolution -----------------------------------------------------------------------------------------------------
def _conv_out(x: tuple[int, ...], w: tuple[int, ...], stride: tuple[int, ...], pad: tuple[int, ...],
              dil: tuple[int, ...], transposed: bool, out_pad: tuple[int, ...], groups: int) -> tuple[int, ...]:
    """Output shape [N, C_out, *spatial] of a convolution (PyTorch's formula; transposed: its inverse)."""
    nd = len(x) - 2
    stride, pad, dil, out_pad = (p * nd if len(p) == 1 else p for p in (stride, pad, dil, out_pad))
    spatial = []
    for i in range(nd):
        if transposed:
            spatial.append((x[2 + i] - 1) * stride[i] - 2 * pad[i] + dil[i] * (w[2 + i] - 1) + out_pad[i] + 1)
        else:
            spatial.append((x[2 + i] + 2 * pad[i] - dil[i] * (w[2 + i] - 1) - 1) // stride[i] + 1)
    channels = w[1] * groups if transposed else w[0]  # a transposed conv's weight is [C_in, C_out / groups, ...]
    return (x[0], channels, *spatial)


def _conv_flops(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...], transposed: bool) -> int:
    """2 · (elements of the output, or of the input for a transposed conv) · (weight elements per output channel).

    ``w[1:]`` is already C_in / groups, so grouped and depthwise convolutions need no extra factor
    (torch.utils.flop_counter's conv_flop_count, as TraceLens).
    """
    return 2 * prod(x if transposed else out) * prod(w[1:])


def _conv_args(c: OpCall, x_at: int, first: int
               ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], bool] | None:
    """Input, weight and output shapes and ``transposed`` of a convolution whose input is argument ``x_at``
    (the weight the next) and whose stride is argument ``first`` (then padding, dilation, transposed,
    output_padding, groups)."""
    x, w = c.shape(x_at), c.shape(x_at + 1)
    if x is None or w is None or len(x) < 3 or len(x) != len(w):
        return None
    if len(c.concrete) <= first + 5:  # no stride or padding recorded (older profilers): the output is unknown
        return None
    nd = len(x) - 2
    stride = c.ints(first, (1,) * nd)
    pad = c.ints(first + 1, (0,) * nd)
    dil = c.ints(first + 2, (1,) * nd)
    transposed = c.flag(first + 3)
    out_pad = c.ints(first + 4, (0,) * nd)
    groups = c.ints(first + 5, (1,))[0]
    return x, w, _conv_out(x, w, stride, pad, dil, transposed, out_pad, groups), transposed


@register("aten::convolution")
def _convolution(c: OpCall) -> OpCost | None:
    """convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding, groups).

    FLOPs: :func:`_conv_flops`, plus one add per output element for the bias.
    Bytes: input, weight and output once, plus C_out bias elements.
    """
    args = _conv_args(c, 0, 3)
    bpe = c.bpe(0)
    if args is None or bpe is None:
        return None
    x, w, out, transposed = args
    bias = c.shape(2) is not None
    flops = _conv_flops(x, w, out, transposed) + (prod(out) if bias else 0)
    moved = (prod(x) + prod(w) + prod(out) + (out[1] if bias else 0)) * bpe
    return OpCost("CONV_fwd", float(flops), float(moved), c.dtype(0), "matrix")


@register("aten::convolution_backward")
def _convolution_backward(c: OpCall) -> OpCost | None:
    """convolution_backward(grad_out, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask).

    Each gradient the mask asks for costs what the forward did: grad_input is a (transposed) convolution
    of grad_out with the weight (reads grad_out and weight, writes grad_input), grad_weight one of the
    input with grad_out (reads both, writes grad_weight); grad_bias sums grad_out (reads it, writes C_out).
    TraceLens always counts grad_input and grad_weight; this follows ``output_mask`` (argument 10), so a
    first layer, whose input needs no gradient, counts half. TraceLens also adds the bias term in elements,
    not bytes; here it is bytes.
    """
    args = _conv_args(c, 1, 4)
    bpe = c.bpe(1)
    if args is None or bpe is None:
        return None
    x, w, out, transposed = args
    grad_in, grad_w, grad_b = c.flags(10, 3)
    fwd = _conv_flops(x, w, out, transposed)
    flops = fwd * (int(grad_in) + int(grad_w)) + (prod(out) if grad_b else 0)
    moved = ((prod(out) + prod(w) + prod(x)) * (int(grad_in) + int(grad_w))
             + ((prod(out) + out[1]) if grad_b else 0)) * bpe
    return OpCost("CONV_bwd", float(flops), float(moved), c.dtype(1), "matrix")


# attention -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Attention:
    b: int
    n_q: int
    h_q: int
    n_kv: int
    h_kv: int
    d_qk: int
    d_v: int

    @classmethod
    def of(cls, q: tuple[int, ...] | None, k: tuple[int, ...] | None, v: tuple[int, ...] | None
           ) -> _Attention | None:
        """From q [B, H_q, N_q, d_qk], k [B, H_kv, N_kv, d_qk], v [B, H_kv, N_kv, d_v] (SDPA's layout)."""
        if q is None or k is None or v is None or not len(q) == len(k) == len(v) == 4:
            return None
        return cls(q[0], q[2], q[1], k[2], k[1], q[3], v[3])

    def flops(self, causal: bool) -> float:
        """S = Q·Kᵀ and O = P·V: 2·B·H_q·N_q·N_kv·(d_qk + d_v); softmax left out (d times smaller).

        Causal attention computes half the score matrix (when N_q = N_kv, as TraceLens; otherwise the
        full count is kept, an upper bound).
        """
        total = 2.0 * self.b * self.h_q * self.n_q * self.n_kv * (self.d_qk + self.d_v)
        return total / 2 if causal and self.n_q == self.n_kv else total

    def fwd_bytes(self, bpe: int) -> float:
        """Q, K, V read and O written once each."""
        q, kv = self.b * self.n_q * self.h_q, self.b * self.n_kv * self.h_kv
        return float((q * self.d_qk + kv * (self.d_qk + self.d_v) + q * self.d_v) * bpe)

    def bwd_flops(self, causal: bool, recompute: bool) -> float:
        """dV = Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q (each 2·B·H_q·N_q·N_kv·d), plus, for flash
        kernels, Q·Kᵀ recomputed; with grouped KV heads, the sum of dK and dV over the H_q/H_kv query
        heads of each KV head (TraceLens's formula).
        """
        bh = self.b * self.h_q
        grid = 2.0 * bh * self.n_q * self.n_kv
        total = grid * (2 * self.d_v + 2 * self.d_qk) + (grid * self.d_qk if recompute else 0.0)
        groups = self.h_q // self.h_kv - 1 if self.h_kv else 0
        total += self.b * self.n_kv * (self.d_v + self.d_qk) * groups
        return total / 2 if causal and self.n_q == self.n_kv else total

    def bwd_bytes(self, bpe: int) -> float:
        """Q, K, V and dO read, dQ, dK, dV written, once each."""
        q, kv = self.b * self.n_q * self.h_q, self.b * self.n_kv * self.h_kv
        return float((2 * q * self.d_qk + 2 * kv * (self.d_qk + self.d_v) + q * self.d_v) * bpe)


#: forward SDPA op -> index of is_causal in Concrete Inputs
_SDPA_FWD = {
    "aten::_scaled_dot_product_flash_attention": 4,
    "aten::_scaled_dot_product_flash_attention_for_cpu": 4,
    "aten::_scaled_dot_product_efficient_attention": 6,
    "aten::_scaled_dot_product_cudnn_attention": 6,
}
#: backward SDPA op -> (index of q, index of is_causal, flash)
_SDPA_BWD = {
    "aten::_scaled_dot_product_flash_attention_backward": (1, 11, True),
    "aten::_scaled_dot_product_efficient_attention_backward": (1, 11, False),
    "aten::_scaled_dot_product_cudnn_attention_backward": (1, 14, False),
}


@register(*_SDPA_FWD)
def _sdpa_fwd(c: OpCall) -> OpCost | None:
    """Fused attention forward: :meth:`_Attention.flops`, :meth:`_Attention.fwd_bytes`.

    Without Concrete Inputs (older profilers) ``is_causal`` reads as false: the full count, an upper bound,
    which can only raise the roofline share, never make an operator look further below it.
    """
    att = _Attention.of(c.shape(0), c.shape(1), c.shape(2))
    bpe = c.bpe(0)
    if att is None or bpe is None:
        return None
    causal = c.flag(_SDPA_FWD[c.name])
    return OpCost("SDPA_fwd", att.flops(causal), att.fwd_bytes(bpe), c.dtype(0), "matrix")


@register(*_SDPA_BWD)
def _sdpa_bwd(c: OpCall) -> OpCost | None:
    """Fused attention backward: :meth:`_Attention.bwd_flops`, :meth:`_Attention.bwd_bytes`."""
    q_at, causal_at, flash = _SDPA_BWD[c.name]
    att = _Attention.of(c.shape(q_at), c.shape(q_at + 1), c.shape(q_at + 2))
    bpe = c.bpe(q_at)
    if att is None or bpe is None:
        return None
    causal = c.flag(causal_at)
    return OpCost("SDPA_bwd", att.bwd_flops(causal, flash), att.bwd_bytes(bpe), c.dtype(q_at), "matrix")
