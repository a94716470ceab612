"""The names the collector gives its ranges, shared by the collector and the analyzers.

The collector writes them into the Kineto trace (``record_function``) and into
NVTX (for Nsight Systems); the analyzers and the nsys loader read them back.
This module imports nothing heavy, so analysis never needs torch.
"""

from __future__ import annotations

import re

__all__ = [
    "CAPTURE_RANGE",
    "MODULE_PREFIX",
    "PARTIAL_STEP",
    "PHASES",
    "PHASE_NAMES",
    "POOL_PROBE_RANGE",
    "SAVE_RANGE",
    "SOURCE_PREFIX",
    "STEP_PREFIX",
    "WORKERS_START_RANGE",
    "module_label",
    "parse_source_label",
    "phase_of_label",
    "source_label",
]

PHASES = ("dataloader", "forward", "backward", "optimizer")
#: phase -> range name, e.g. "forward" -> "advisor::forward"
PHASE_NAMES = {phase: f"advisor::{phase}" for phase in PHASES}
_PHASE_BY_NAME = {name: phase for phase, name in PHASE_NAMES.items()}

#: the step ranges; the same name torch.profiler.profile.step() writes
STEP_PREFIX = "ProfilerStep#"
#: the NVTX range around the active steps, for nsys --capture-range=nvtx
CAPTURE_RANGE = "advisor::capture"
#: a mark inside a step the script never finished (it raised, exited or was stopped);
#: analysis leaves such a step out, so a cut-short step does not skew the step time
PARTIAL_STEP = "advisor::partial_step"

#: around each torch.save call in the profiled window (advisor.collect.host_hooks)
SAVE_RANGE = "advisor::torch.save"
#: around the start of a DataLoader's worker processes (a new multi-process iterator)
WORKERS_START_RANGE = "advisor::dataloader_workers_start"
#: around one small operator on the intra-op pool, after each optimizer step in the profiled window
POOL_PROBE_RANGE = "advisor::pool_probe"

SOURCE_PREFIX = "advisor::src "
MODULE_PREFIX = "advisor::module "
_SOURCE = re.compile(r"^advisor::src (?P<file>.+):(?P<line>\d+) in (?P<func>.+)$")


def source_label(path: str, line: int, func: str) -> str:
    return f"{SOURCE_PREFIX}{path}:{line} in {func}"


def parse_source_label(name: str) -> tuple[str, int, str] | None:
    """``"advisor::src a/b.py:12 in f"`` -> ``("a/b.py", 12, "f")``."""
    m = _SOURCE.match(name)
    return (m["file"], int(m["line"]), m["func"]) if m else None


def module_label(path: str) -> str:
    return MODULE_PREFIX + path


def phase_of_label(name: str) -> str | None:
    """``"advisor::forward"`` -> ``"forward"``; None for other names."""
    return _PHASE_BY_NAME.get(name)
