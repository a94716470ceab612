"""What a GPU kernel's name says: matrix multiply or convolution, tensor cores, precision.

Vendor libraries name their kernels after the algorithm and the instruction
they use, so the name is evidence even without hardware counters:

- cuBLAS/cuDNN on NVIDIA: ``volta_sgemm_128x64_nn`` (fp32 on the CUDA cores),
  ``volta_h884gemm_...`` / ``ampere_fp16_s16816gemm_...`` (HMMA tensor-core
  shapes 884, 1688, 16816), ``sm80_xmma_gemm_..._tf32f32_...`` (TF32 on
  tensor cores), ``cutlass_tensorop_...``, ``..._bf16_...``;
- cuDNN convolutions: ``implicit_gemm``, ``fprop``, ``dgrad``, ``wgrad``,
  ``scudnn`` (fp32), ``hcudnn`` (fp16);
- rocBLAS/hipBLASLt (Tensile) on AMD: ``Cijk_..._MT64x16x32_MI16x16x1_...``,
  where ``MI`` names the matrix-core (MFMA) instruction and ``SB``/``HB``/
  ``BB`` the data types (single, half, bfloat16).
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["is_matmul_or_conv", "kernel_precision", "uses_tensor_cores"]

_MATMUL = re.compile(
    r"gemm|gemv|matmul|cutlass|xmma|Cijk_|convolve|conv\d|conv_|_conv|implicit_gemm|fprop|dgrad|wgrad|"
    r"winograd|fft2d_|fft_|scudnn|hcudnn|cudnn_|magma", re.IGNORECASE)
_NOT_MATMUL = re.compile(r"nchwToNhwc|nhwcToNchw|computeOffsets|reduce_kernel|elementwise|splitKreduce|"
                         r"epilogue::impl|bn_fw|bn_bw|batch_norm|batchnorm|Offsets|fbgemm|embedding|scal_kernel", re.IGNORECASE)
_TENSOR_CORE = re.compile(
    r"h884|h1688|h16816|s884|s1688|s16816|i8816|i16832|884gemm|1688gemm|16816gemm|tensorop|xmma|hmma|wmma|"
    r"_mma|mma_|gmma|wgmma|tf32|bf16|f16f16|fp16|_hgemm|hcudnn|sm(80|86|89|90|100)_.*gemm|"
    r"_MI\d+x\d+x\d+", re.IGNORECASE)
_FP32_SIMT = re.compile(r"sgemm|scudnn|gemmk1|gemv2T_kernel_val<.*float|gemmSN|_sgemv", re.IGNORECASE)


@lru_cache(maxsize=1 << 14)  # a trace has a few hundred kernel names, asked about by several analyzers
def is_matmul_or_conv(name: str) -> bool:
    """A matrix multiply or convolution kernel (the work tensor cores can do)."""
    return bool(_MATMUL.search(name)) and not _NOT_MATMUL.search(name)


@lru_cache(maxsize=1 << 14)
def uses_tensor_cores(name: str) -> bool:
    """The kernel's name says it runs on tensor cores (NVIDIA) or matrix cores (AMD)."""
    if _FP32_SIMT.search(name) and not re.search(r"tf32|1688|16816|884", name, re.IGNORECASE):
        return False
    return bool(_TENSOR_CORE.search(name))


@lru_cache(maxsize=1 << 14)
def kernel_precision(name: str) -> str:
    """fp16, bf16, tf32, fp32 or "" (unknown), as far as the name says."""
    low = name.lower()
    if "bf16" in low or "bfloat16" in low or re.search(r"_BB_|_BBS_", name):
        return "bf16"
    if "tf32" in low or "s1688" in low or "s16816" in low:
        return "tf32"
    if re.search(r"fp16|f16f16|half|h884|h1688|h16816|_hgemm|hcudnn|_HB_|_HHS_|_HSS_", name, re.IGNORECASE):
        return "fp16"
    if _FP32_SIMT.search(name) or re.search(r"<float|_SB_|f32f32", name):
        return "fp32"
    return ""
