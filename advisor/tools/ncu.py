"""The Nsight Compute CLI and the GPU it needs: finding them, asking them, reading their complaints.

Nothing here profiles. :func:`find_ncu` looks for the binary, :func:`ncu_options`
reads the options the installed version accepts (from ``ncu --help``, so a
command is never built with an option the version lacks), :func:`gpu_status`
says whether an NVIDIA GPU is usable, and :func:`classify_failure` turns ncu's
stderr into one of a few known reasons, each with a sentence for the user.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Failure", "classify_failure", "find_ncu", "gpu_status", "ncu_options", "ncu_version"]

#: Where Nsight Compute installs itself when it is not on PATH, newest first within each pattern.
SEARCH_GLOBS = ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu",
                "/usr/local/NVIDIA-Nsight-Compute*/ncu")
_OPTION = re.compile(r"^\s+(?:-(?P<short>\w) \[ )?--(?P<long>[\w-]+)")


def find_ncu(explicit: str | None = None) -> str | None:
    """The ncu binary: ``explicit``, ``$ADVISOR_NCU``, PATH, then the usual install folders; None if absent."""
    for candidate in (explicit, os.environ.get("ADVISOR_NCU")):
        if candidate:
            return candidate if Path(candidate).is_file() and os.access(candidate, os.X_OK) else None
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in SEARCH_GLOBS:
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.access(path, os.X_OK):
                return path
    return None


@functools.lru_cache(maxsize=8)
def ncu_version(ncu: str) -> str:
    """``"2022.3.0.0"``, from ``ncu --version``; "" when it cannot be read."""
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    m = re.search(r"Version (\S+)", out)
    return m.group(1) if m else ""


@functools.lru_cache(maxsize=8)
def ncu_options(ncu: str) -> frozenset[str]:
    """Every option the installed ncu accepts, long (``--launch-skip``) and short (``-s``), from ``ncu --help``."""
    try:
        text = subprocess.run([ncu, "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    return parse_help(text)


def parse_help(text: str) -> frozenset[str]:
    options: set[str] = set()
    for line in text.splitlines():
        m = _OPTION.match(line)
        if m:
            options.add("--" + m["long"])
            if m["short"]:
                options.add("-" + m["short"])
    return frozenset(options)


def gpu_status() -> tuple[int, str]:
    """(number of NVIDIA GPUs usable here, why not when 0), from ``nvidia-smi -L``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0, f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0, "no NVIDIA driver here (nvidia-smi is not installed)"
    try:
        proc = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 0, f"nvidia-smi did not answer ({exc.__class__.__name__})"
    gpus = [line for line in proc.stdout.splitlines() if line.startswith("GPU ")]
    if gpus:
        return len(gpus), ""
    said = (proc.stdout + proc.stderr).strip().splitlines()
    return 0, f"nvidia-smi found no GPU ({said[0] if said else 'no output'})"


@dataclass(frozen=True)
class Failure:
    """Why an ncu run gave no report: a short code and a sentence saying what to do."""

    code: str
    message: str


_FAILURES: tuple[tuple[str, str, str], ...] = (
    ("ERR_NVGPUCTRPERM", "permission",
     "profiling is not permitted: this user may not read the GPU performance counters (ERR_NVGPUCTRPERM). "
     "Run the command below as root (sudo), or allow all users with the driver option "
     "NVreg_RestrictProfilingToAdminUsers=0 (see https://developer.nvidia.com/ERR_NVGPUCTRPERM); in a "
     "container, start it with --cap-add=SYS_ADMIN"),
    ("No kernels were profiled", "no-kernels",
     "ncu profiled no kernel: the filters matched nothing. The kernel name, --launch-skip or the NVTX range "
     "may not fit this run; run the command below with fewer filters"),
    ("ERR_NVGPU", "gpu",
     "ncu cannot use the GPU here"),
    ("no CUDA-capable device", "no-gpu", "no CUDA-capable GPU is visible to the script"),
    ("couldn't communicate with the NVIDIA driver", "no-gpu", "the NVIDIA driver is not running"),
    ("Failed to connect", "connect",
     "ncu could not connect to the script's process (another ncu may be running, or the ports are taken)"),
)


def classify_failure(stderr: str, returncode: int) -> Failure:
    """Read ncu's stderr/stdout; the first known complaint wins, else a generic failure with the last error line."""
    for needle, code, message in _FAILURES:
        if needle in stderr:
            return Failure(code, message)
    errors = [line for line in stderr.splitlines() if "==ERROR==" in line]
    last = errors[-1].replace("==ERROR==", "").strip() if errors else f"ncu exited with code {returncode}"
    return Failure("failed", f"ncu did not write a report: {last}")
