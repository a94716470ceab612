"""The names the collector gives its ranges, shared by the collector and the analyzers.

The collector writes them into the Kineto trace (``record_function``) and into
NVTX (for Nsight Systems); the analyzers and the nsys loader read them back.
This module imports nothing heavy, so analysis never needs torch.
"""

from __future__ import annotations

import re

__all__ = [
    "CALLER_MARK",
    "CAPTURE_RANGE",
    "CLOSURE",
    "DIRECT_MARK",
    "LABEL_PREFIX",
    "MODULE_PREFIX",
    "OTHER_PHASE",
    "PARTIAL_STEP",
    "PHASES",
    "PHASE_NAMES",
    "PHASE_ORDER",
    "POOL_PROBE_RANGE",
    "RECOMPUTE",
    "SAVE_RANGE",
    "SHAPES_DIR",
    "SOURCE_PREFIX",
    "STEP_PARTS",
    "STEP_PREFIX",
    "WORKERS_START_RANGE",
    "is_direct_label",
    "module_label",
    "parse_caller_chain",
    "parse_source_callers",
    "parse_source_label",
    "phase_of_label",
    "source_label",
]

#: the start of every range name the collector writes (and only of those)
LABEL_PREFIX = "advisor::"

#: the phases of a training step, in the order a step runs them
PHASES = ("dataloader", "forward", "backward", "optimizer")
#: what a step split calls the time outside every phase
OTHER_PHASE = "other"
#: the parts a step's time is split into: its phases, in order, and the rest
STEP_PARTS = (*PHASES, OTHER_PHASE)
#: the same phases from the innermost: where their ranges overlap, the innermost wins, so that a step's time is split
#: once (a forward and backward inside ``optimizer.step(closure)`` are forward and backward time, a forward recomputed
#: inside backward is backward time; nothing nests in data loading). See advisor.analyze.framework.phases.
PHASE_ORDER = ("dataloader", "backward", "forward", "optimizer")
#: phase -> range name, e.g. "forward" -> "advisor::forward"
PHASE_NAMES = {phase: f"{LABEL_PREFIX}{phase}" for phase in PHASES}
_PHASE_BY_NAME = {name: phase for phase, name in PHASE_NAMES.items()}

#: the step ranges; the same name torch.profiler.profile.step() writes
STEP_PREFIX = "ProfilerStep#"
#: the NVTX range around the active steps, for nsys --capture-range=nvtx
CAPTURE_RANGE = "advisor::capture"
#: a mark inside a step the script never finished (it raised, exited or was stopped);
#: analysis leaves such a step out, so a cut-short step does not skew the step time
PARTIAL_STEP = "advisor::partial_step"

#: the folder beside a Kineto trace that holds the steps recorded for their input shapes alone (same file name):
#: ``record_shapes`` keeps every operator's inputs alive until the profiler stops, which slows the recorded steps,
#: so the collector records shapes in steps of their own before the warm-up (advisor.collect.steps)
SHAPES_DIR = "shapes"

#: a closure passed to optimizer.step(closure): its forward and backward are not optimizer time
CLOSURE = "advisor::closure"
#: a module called while backward runs: activation checkpointing recomputing its forward
RECOMPUTE = "advisor::recompute"
#: around each torch.save call in the profiled window (advisor.collect.host_hooks)
SAVE_RANGE = "advisor::torch.save"
#: around the start of a DataLoader's worker processes (a new multi-process iterator)
WORKERS_START_RANGE = "advisor::dataloader_workers_start"
#: around one small operator on the intra-op pool, after each optimizer step in the profiled window
POOL_PROBE_RANGE = "advisor::pool_probe"

SOURCE_PREFIX = "advisor::src "
#: ends the source label of a torch call that the user's line made itself, rather than library code it called
#: (a model's forward, say): ``advisor::src train.py:57 in augment [direct]``. A loop over samples makes its
#: calls directly; a line that calls a whole model does not.
DIRECT_MARK = " [direct]"
#: joins the user's frames that called the labelled line's function straight from the user's code (no library
#: frame between), innermost first: ``advisor::src m.py:8 in row [direct] < m.py:30 in forward``. A loop whose
#: body calls a helper per row is found at the caller's line.
CALLER_MARK = " < "
MODULE_PREFIX = "advisor::module "
_SOURCE = re.compile(r"^advisor::src (?P<file>.+):(?P<line>\d+) in (?P<func>.+?)(?: \[direct\])?$")
_CALLER = re.compile(r"^(?P<file>.+):(?P<line>\d+) in (?P<func>.+)$")


def source_label(path: str, line: int, func: str, direct: bool = False,
                 callers: tuple[tuple[str, int, str], ...] = ()) -> str:
    return (f"{SOURCE_PREFIX}{path}:{line} in {func}" + (DIRECT_MARK if direct else "")
            + "".join(f"{CALLER_MARK}{p}:{n} in {f}" for p, n, f in callers))


def _own_part(name: str) -> str:
    """The label without its callers."""
    cut = name.find(CALLER_MARK)
    return name if cut < 0 else name[:cut]


def parse_source_label(name: str) -> tuple[str, int, str] | None:
    """``"advisor::src a/b.py:12 in f"`` (or ``... in f [direct]``, with or without callers) -> ``("a/b.py", 12, "f")``."""
    m = _SOURCE.match(_own_part(name))
    return (m["file"], int(m["line"]), m["func"]) if m else None


def parse_source_callers(name: str) -> tuple[tuple[str, int, str], ...]:
    """The callers a source label names, innermost first (see :data:`CALLER_MARK`); () for none."""
    cut = name.find(CALLER_MARK)
    return parse_caller_chain(name[cut + len(CALLER_MARK):]) if cut >= 0 else ()


def parse_caller_chain(chain: str) -> tuple[tuple[str, int, str], ...]:
    """``"m.py:30 in forward < m.py:50 in main"`` (a label's callers) -> ``(("m.py", 30, "forward"), ...)``."""
    found = (_CALLER.match(part) for part in chain.split(CALLER_MARK)) if chain else ()
    return tuple((m["file"], int(m["line"]), m["func"]) for m in found if m)


def is_direct_label(name: str) -> bool:
    """Whether a source label marks a call the user's line made itself (see :data:`DIRECT_MARK`)."""
    return name.startswith(SOURCE_PREFIX) and _own_part(name).endswith(DIRECT_MARK)


def module_label(path: str) -> str:
    return MODULE_PREFIX + path


def phase_of_label(name: str) -> str | None:
    """``"advisor::forward"`` -> ``"forward"``; None for other names."""
    return _PHASE_BY_NAME.get(name)
