"""The files of a run, each with what it is and how to open it, and the environment it ran in.

Every number in a report can be traced to a file listed here. Links are
relative to the run directory (the reports sit at its top), so the folder can
be moved or zipped whole; inputs that live elsewhere (``advisor analyze``'s
traces) are linked with ``file://`` URIs.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from advisor.rundir import RunDir

__all__ = ["PERFETTO_URL", "artifacts", "environment"]

PERFETTO_URL = "https://ui.perfetto.dev"
TRACE_HOW = (f"open it in Perfetto ({PERFETTO_URL}: Open trace file, pick this file; .json.gz is read as is and "
             "stays on your machine) or in Chrome/Chromium at chrome://tracing (Load)")

# (pattern, what it is, how to open it); the first match wins
_KINDS: list[tuple[str, str, str]] = [
    ("run.json", "command, outcome, timings, versions, hardware", ""),
    ("findings.json", "every measured fact, with units", ""),
    ("diagnoses.json", "verdict, diagnoses, every rule's outcome", ""),
    ("report.md", "this report as Markdown", ""),
    ("report.html", "this report as self-contained HTML", ""),
    ("charts/*.svg", "a chart of the report (SVG)", ""),
    ("*.pt.trace.json*", "a PyTorch Profiler (Kineto) trace", TRACE_HOW),
    ("*.nsys-rep", "an Nsight Systems report", "open it with `nsys-ui FILE`, or `nsys stats FILE` for tables"),
    ("*.sqlite", "an Nsight Systems report exported to SQLite", "query it with `sqlite3 FILE`"),
    ("*.ncu-rep", "an Nsight Compute report", "open it with `ncu-ui FILE`, or `ncu --import FILE --page details`"),
    ("collector.json", "settings of the profiled child process", ""),
    ("status.*.json", "what the profiled process reported", ""),
    ("*.log", "a tool's output", ""),
]

_ENV_LABELS = [
    ("python", "Python"), ("torch", "PyTorch"), ("cuda", "CUDA"), ("cudnn", "cuDNN"), ("hip", "ROCm/HIP"),
    ("driver", "GPU driver"), ("cpu", "CPU"), ("cpu_count", "CPU cores"), ("platform", "Platform"),
    ("hostname", "Host"), ("python_executable", "Interpreter"),
]


def _kind(relative: str) -> tuple[str, str]:
    name = Path(relative).name
    for pattern, what, how in _KINDS:
        if fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(name, pattern):
            return what, how
    return "", ""


def artifacts(run: RunDir, meta: Mapping[str, Any], expected: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Files of the run directory (and any inputs outside it), with a link, size, meaning and how to open.

    ``expected`` names the files the report is about to write (the reports, the charts), so the list is
    right on the first render too; chart files not in it are stale and left out.
    """
    found = {}
    for path in sorted(run.path.rglob("*")):
        if path.is_file() and not path.name.endswith(".tmp"):
            found[run.relative(path)] = path.stat().st_size
    for name in expected:
        found.setdefault(name, None)
    out = []
    for relative in sorted(found, key=_order):
        if relative.startswith("charts/") and expected and relative not in expected:
            continue
        what, how = _kind(relative)
        out.append({"path": relative, "href": quote(relative), "bytes": found[relative], "what": what, "how": how,
                    "open_url": PERFETTO_URL if how == TRACE_HOW else None})
    for item in meta.get("inputs") or []:
        path = Path(str(item))
        if path.is_file():
            what, how = _kind(path.name)
            out.append({"path": str(path), "href": path.resolve().as_uri(), "bytes": path.stat().st_size,
                        "what": (what or "an input") + " (given to advisor analyze)", "how": how,
                        "open_url": PERFETTO_URL if how == TRACE_HOW else None})
    return out


def _order(relative: str) -> tuple[int, str]:
    """Top-level files first, then each folder's."""
    return (relative.count("/"), relative)


def environment(meta: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) pairs of the environment a run recorded; empty when it recorded none."""
    env = meta.get("environment") or {}
    rows = [(label, str(env[key])) for key, label in _ENV_LABELS if env.get(key) not in (None, "", [])]
    gpus = env.get("gpus") or []
    if gpus:
        names = [g.get("name", str(g)) if isinstance(g, Mapping) else str(g) for g in gpus]
        rows.append(("GPUs", ", ".join(names)))
    # The threads when the recording began: scripts often set them after start-up.
    threads = meta.get("threads_at_capture") or env.get("threads") or {}
    if isinstance(threads, Mapping) and threads:
        rows.append(("Threads", ", ".join(f"{k} {v}" for k, v in threads.items())))
    return rows
