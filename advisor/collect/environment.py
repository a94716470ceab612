"""What the run ran on: versions, hardware and thread settings, for the run metadata."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["describe_environment", "thread_settings"]

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
                "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_DEBUG", "PYTORCH_CUDA_ALLOC_CONF")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_smi(query: str) -> list[list[str]]:
    """Rows of ``nvidia-smi --query-gpu`` (empty when there is no NVIDIA driver)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run(
            [smi, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    return [[cell.strip() for cell in line.split(",")] for line in out.stdout.strip().splitlines() if line.strip()]


def _driver_version() -> str | None:
    rows = _nvidia_smi("driver_version")
    return rows[0][0] if rows and rows[0] else None


def _gpus() -> list[dict[str, Any]]:
    """The GPUs, from torch when the script has initialised CUDA, else from nvidia-smi.

    The collector never initialises CUDA itself: a script may still set
    ``CUDA_VISIBLE_DEVICES`` or fork workers before it does.
    """
    import torch

    if torch.cuda.is_initialized():
        gpus = []
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            gpus.append({
                "index": i,
                "name": props.name,
                "memory_bytes": int(props.total_memory),
                "compute_capability": f"{props.major}.{props.minor}",
                "multiprocessors": int(props.multi_processor_count),
            })
        return gpus
    return [
        {"index": int(row[0]), "name": row[1], "memory_bytes": int(float(row[2]) * 2**20)}
        for row in _nvidia_smi("index,name,memory.total") if len(row) >= 3 and row[0].isdigit()
    ]


def thread_settings() -> dict[str, Any]:
    """torch's thread pools and the variables that size them, as this process has them now."""
    import torch

    return {
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
        **{var: os.environ.get(var) for var in _THREAD_VARS if os.environ.get(var) is not None},
    }


def describe_environment() -> dict[str, Any]:
    """Versions, CPU/GPU models and thread settings of this process (imports torch, never initialises CUDA)."""
    import torch

    return {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "hostname": platform.node(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "driver": _driver_version(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": _gpus(),
        "threads": thread_settings(),
    }
