"""What the run ran on: versions, hardware and thread settings, for the run metadata.

:func:`thread_settings` is called by the step driver when the recording
starts: the thread pools and the cores this process may use, which debugging
APIs are on, the DataLoader worker processes, and two probes that take a few
microseconds in a healthy process (milliseconds where the problem they look
for is present):

- ``parallel_region_us``: the time of one small operator that runs on the
  intra-op pool (a fill of 2**16 floats, split in chunks across the threads).
  When the pool's threads must wait for a core, every parallel operator pays
  for that wait, and so does this one.
- ``anomaly_node``: with anomaly detection on, the median time to record one
  autograd node (anomaly mode captures the Python stack for each), with the
  depth of the stack it was measured at and of the user's frame below it.

:func:`describe_environment`, written when the process ends, adds how busy
the DataLoader workers kept the CPU since the recording started.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from advisor.collect import host_hooks

__all__ = ["describe_environment", "thread_settings"]

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY", "LOCAL_WORLD_SIZE",
                "CUDA_VISIBLE_DEVICES",
                "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_DEBUG", "PYTORCH_CUDA_ALLOC_CONF")
#: variables that switch on debugging behaviour with a cost per operation or per launch
_DEBUG_VARS = ("CUDA_LAUNCH_BLOCKING", "TORCH_DISTRIBUTED_DEBUG", "PYTORCH_NO_CUDA_MEMORY_CACHING",
               "TORCH_SHOW_CPP_STACKTRACES")
#: the workers' CPU time when the recording started: {"at": monotonic seconds, "cpu": {pid: seconds}}
_AT_CAPTURE: dict[str, Any] = {}


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
    """torch's thread pools, the cores, debugging APIs and DataLoader workers, as this process has them now.

    Called when the recording starts; it also remembers the workers' CPU time, so that
    :func:`describe_environment` can say how busy they were since.
    """
    import torch

    pids = host_hooks.worker_pids()
    _AT_CAPTURE.update(at=time.monotonic(), cpu=host_hooks.worker_cpu(pids), own=host_hooks.own_threads_cpu())
    probes: dict[str, Any] = {"parallel_region_us": _parallel_region_us(torch)}
    if torch.is_anomaly_enabled():
        probes["anomaly_node"] = _anomaly_node(torch)
    settings = {**_threads(torch), "dataloader_workers": len(pids), "load_average": _load_average(),
                "debug": debug_settings(), "allocator": allocator_settings(),
                **{k: v for k, v in probes.items() if v is not None}}
    for what, where in host_hooks.CALLED_AT.items():
        settings[f"{what}_at"] = list(where)
    return settings


#: host allocators that keep freed memory in the process for the next allocation (as opposed to glibc's
#: malloc, which unmaps or trims large freed blocks, so that the next step faults them in again)
_CACHING_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")
#: glibc keeps large freed blocks only when both thresholds are fixed (setting them turns off its dynamic
#: threshold, which follows the sizes freed and trims the heap above twice the largest)
_GLIBC_KEEP_VARS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")
_GLIBC_KEEP_TUNABLES = ("glibc.malloc.trim_threshold", "glibc.malloc.mmap_threshold")


def allocator_settings(maps: str | None = None, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The host allocator of this process, and whether it keeps freed memory for the next allocation.

    ``name``: jemalloc, tcmalloc or mimalloc when one is loaded (preloaded or linked), else glibc;
    ``keeps_freed_memory``: true for those, and for glibc with both thresholds fixed by variable or tunable;
    ``how``: what was seen, in words; for glibc that keeps it, ``trim_threshold`` in bytes (None when
    unreadable). ``maps`` (``/proc/self/maps``) and ``environ`` are for tests.
    """
    env = os.environ if environ is None else environ
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:
            maps = ""
    libraries = {Path(line.split()[-1]).name for line in maps.splitlines() if "/" in line}
    for name in _CACHING_ALLOCATORS:
        if any(lib.startswith(f"lib{name}") for lib in libraries):
            return {"name": name, "keeps_freed_memory": True, "how": f"lib{name} is loaded"}
    tunables = env.get("GLIBC_TUNABLES", "")
    if all(env.get(v) for v in _GLIBC_KEEP_VARS):
        fixed = _GLIBC_KEEP_VARS
        trim = env[_GLIBC_KEEP_VARS[0]]
    elif all(t + "=" in tunables for t in _GLIBC_KEEP_TUNABLES):
        fixed = _GLIBC_KEEP_TUNABLES
        found = re.search(re.escape(_GLIBC_KEEP_TUNABLES[0]) + r"=(\w+)", tunables)
        trim = found.group(1) if found else ""
    else:
        return {"name": "glibc", "keeps_freed_memory": False,
                "how": "glibc malloc with its dynamic thresholds: large freed blocks go back to the system"}
    return {"name": "glibc", "keeps_freed_memory": True, "how": f"glibc malloc with {' and '.join(fixed)} set",
            "trim_threshold": _bytes(trim)}


def _bytes(text: str) -> int | None:
    """A glibc threshold's value as glibc reads it (decimal, 0x hex or 0 octal); None when it cannot be read."""
    try:
        return int(text, 0)
    except ValueError:
        return None


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not on Unix
        return None


def _threads(torch: Any) -> dict[str, Any]:
    return {
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
        "usable_cores": _usable_cores(),
        **{var: os.environ.get(var) for var in _THREAD_VARS if os.environ.get(var) is not None},
    }


def _usable_cores() -> int | None:
    """The cores this process may run on (its affinity mask), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count()


def debug_settings() -> dict[str, Any]:
    """The debugging APIs that are on, and the variables that switch some on (only those that are set)."""
    import torch

    settings: dict[str, Any] = {
        "anomaly_detection": torch.is_anomaly_enabled(),
        "anomaly_check_nan": torch.is_anomaly_enabled() and torch.is_anomaly_check_nan_enabled(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
    }
    if torch.cuda.is_initialized():  # asking earlier would initialise CUDA
        settings["cuda_sync_debug_mode"] = int(torch.cuda.get_sync_debug_mode())
    return {**settings, **{var: os.environ[var] for var in _DEBUG_VARS if os.environ.get(var) is not None}}


def _median_us(func: Any, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1e6, 1)


def _anomaly_node(torch: Any, repeats: int = 20) -> dict[str, Any] | None:
    """What anomaly mode adds to every operation autograd records: the median time of recording one node.

    The median: twenty samples on a busy machine can lose a scheduler time slice. Stack capture grows
    with the stack's depth, so the depth is recorded with it.
    """
    try:
        with torch.inference_mode(False), torch.enable_grad():
            leaf = torch.ones(1, requires_grad=True, device="cpu")
            for _ in range(2):  # the first captures read the source files into linecache
                leaf * 2
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                leaf * 2
                times.append(time.perf_counter() - start)
    except RuntimeError:  # a mode or guard of the script that refuses the probe tensor
        return None
    depth, user_depth = _stack_depths()
    return {"us": round(statistics.median(times) * 1e6, 1), "depth": depth, "user_depth": user_depth}


def _stack_depths() -> tuple[int, int]:
    """Frames on the stack here, and the depth of the innermost frame that is neither torch's nor ours."""
    import torch

    libraries = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(host_hooks.__file__)))
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        frames.append(frame.f_code.co_filename)
        frame = frame.f_back
    depth = len(frames)
    for i, filename in enumerate(frames):  # innermost first
        if not filename.startswith(libraries) and not filename.startswith("<"):
            return depth, depth - i
    return depth, depth


def _parallel_region_us(torch: Any) -> float | None:
    """One small operator on the intra-op pool; None with a single thread (there is no pool to wait for)."""
    if torch.get_num_threads() < 2:
        return None
    try:
        buffer = torch.empty(1 << 16, dtype=torch.float32, device="cpu")
    except RuntimeError:  # a script that forbids CPU tensors (a mode or default-device guard)
        return None
    return _median_us(lambda: buffer.fill_(1.0))


def _workers_since_capture() -> dict[str, Any]:
    """How many cores the DataLoader workers used, and wanted (used or waited for), since the recording began."""
    if not _AT_CAPTURE:
        return {}
    seconds = time.monotonic() - _AT_CAPTURE["at"]
    now = host_hooks.worker_cpu(list(_AT_CAPTURE["cpu"]))
    both = [(now[pid], before) for pid, before in _AT_CAPTURE["cpu"].items() if pid in now]
    if seconds <= 0:
        return {}
    out: dict[str, Any] = {"workers_busy_cores": round(sum(n[0] - b[0] for n, b in both) / seconds, 3),
                           "workers_measured_s": round(seconds, 3)}
    own_now, own_then = host_hooks.own_threads_cpu(), _AT_CAPTURE.get("own")
    if own_now is not None and own_then is not None:
        # the process's own threads: cores used, and cores' worth of time they were runnable without a core
        out["process_busy_cores"] = round((own_now[0] - own_then[0]) / seconds, 3)
        out["process_waiting_cores"] = round((own_now[1] - own_then[1]) / seconds, 3)
    if all(n[1] is not None and b[1] is not None for n, b in both):
        wanted = sum(n[0] - b[0] + n[1] - b[1] for n, b in both)  # type: ignore[operator]
        out["workers_wanted_cores"] = round(wanted / seconds, 3)
    return out


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
        "threads": {**_threads(torch), **_workers_since_capture()},
    }
