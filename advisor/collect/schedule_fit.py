"""The profiling schedule fitted to how long the script's steps take.

The default schedule (5 steps skipped, 3 warmed up, 5 recorded, as many timed after) suits steps of a second or
less: it records a few seconds. A step of 30 s would make it record for minutes, keep gigabytes of trace, and
never reach its window in a script that runs only a few steps. So the step driver times its steps as it waits
and, where the recorded steps would take longer than the time window does (``window_s``), fits the schedule to the
shortest step timed after step 0 (which holds the script's set-up, or a compilation; a recompilation or an
evaluation in a later step is outvoted by the steps after it while the driver still waits):

- **active**: as many steps as ``window_s`` holds, at least one. A longer step is its own sample: its
  phases repeat within it (forward and backward, micro-batches, a closure's evaluations).
- **warmup**: one step, or none for a step longer than ``window_s``: the warm-up lets the profiler's own
  start-up (Kineto, CUPTI) land outside the recorded steps, and against a step that long it is noise, while a
  warm-up step would double the recording's wall time.
- **wait**: no longer than it takes to time a step after the first (the script's set-up, first-time
  allocations); a long step has had time to settle. Input shapes are recorded in one wait step of their own where a step is
  no longer than ``window_s``; beyond that, not at all (``record_shapes`` would keep every operator's inputs
  alive for the whole step: see :class:`~advisor.collect.backends.KinetoBackend`).

The schedule only ever shrinks, and only where the user left ``--wait``/``--warmup``/``--active`` to us.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Schedule", "fit_schedule"]


@dataclass(frozen=True)
class Schedule:
    """Steps skipped (the last ``shape_steps`` of them recorded for their shapes), warmed up, recorded."""

    wait: int
    warmup: int
    active: int
    shape_steps: int
    #: the step length it was fitted to (seconds); None where the defaults stand
    fitted_to_s: float | None = None

    def as_json(self) -> dict[str, float | int | None]:
        return {"wait": self.wait, "warmup": self.warmup, "active": self.active, "shape_steps": self.shape_steps,
                "fitted_to_s": None if self.fitted_to_s is None else round(self.fitted_to_s, 3)}


def fit_schedule(default: Schedule, step_s: float, window_s: float, next_step: int, shapes: bool) -> Schedule:
    """The schedule for steps of ``step_s`` seconds, decided as step ``next_step`` begins (so no earlier step can
    be given a new role); ``default`` where its recording fits in ``window_s``. ``shapes``: whether input shapes
    may be recorded in a step of their own."""
    if step_s <= 0 or default.active * step_s <= window_s:
        return default
    active = max(1, min(default.active, math.floor(window_s / step_s)))
    warmup = 0 if step_s >= window_s else min(default.warmup, 1)
    shape_steps = 1 if shapes and default.shape_steps and step_s <= window_s else 0
    wait = min(default.wait, max(next_step + shape_steps, 1 + shape_steps))
    return Schedule(wait=wait, warmup=warmup, active=active, shape_steps=shape_steps, fitted_to_s=step_s)
