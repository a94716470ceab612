"""The settings the framework collector hands to the child process that runs the script."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = ["BOOTSTRAP_PATH_ENV", "EXIT_INTERRUPTED", "EXIT_STOPPED", "STEP_METHODS", "CollectorConfig"]

STEP_METHODS = ("auto", "optimizer", "dataloader", "backward", "module", "time")

#: set by the parent when it put the advisor package on PYTHONPATH for the child (:mod:`.bootstrap`)
BOOTSTRAP_PATH_ENV = "ADVISOR_BOOTSTRAP_PATH"
#: exit codes of the outcomes the collector causes (as a shell reports the signals)
EXIT_INTERRUPTED = 130
EXIT_STOPPED = 143

@dataclass
class CollectorConfig:
    """Everything the child needs; written as ``collector.json`` into the stage folder."""

    script: str
    args: list[str] = field(default_factory=list)
    out_dir: str = "."
    #: profiler schedule, in steps: skipped, then warmed up, then recorded
    wait: int = 5
    warmup: int = 3
    active: int = 5
    #: shrink that schedule where steps are long (advisor.collect.schedule_fit); off where the user set it
    fit_schedule: bool = True
    #: how a step is recognised: auto = optimizer steps, else DataLoader batches, else a model call after a
    #: backward (hand-written updates), else model calls (inference), else a time window
    step_method: str = "auto"
    #: time window (seconds) used when no step can be recognised
    window_start_s: float = 10.0
    window_s: float = 5.0
    #: keep running the script after the profile is written
    run_to_end: bool = False
    record_shapes: bool = True
    profile_memory: bool = False
    with_stack: bool = False
    source_lines: bool = True
    #: "kineto" records a torch.profiler trace; "nvtx" only marks phases and the
    #: capture range for an outer tool (nsys, ncu); "trial" records nothing and tries settings on the steps
    #: after the wait steps (advisor.collect.trial_blocks)
    mode: str = "kineto"
    #: the trial stage's plan: knobs, block_steps, pairs, budget_s (mode "trial" only)
    trial: dict[str, Any] | None = None
    #: seconds of trial steps the trial stage may spend, all settings together (--trial-budget)
    trial_budget_s: float = 60.0
    #: settings that may change the results (TF32, a fused optimizer) may be tried (--trial-numerics)
    trial_numerics: bool = False
    source_roots: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CollectorConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def read(cls, path: Path) -> CollectorConfig:
        return cls.from_dict(json.loads(path.read_text()))

    def schedule(self) -> dict[str, int]:
        return {"wait": self.wait, "warmup": self.warmup, "active": self.active}
