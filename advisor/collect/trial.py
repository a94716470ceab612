"""The trial stage's collector, parent side: run the script again and try the settings the diagnoses name.

Why a second run of the script, and not the framework run's process kept alive at a step boundary while the
framework stage is analysed: the run that tries settings is then a run of its own, like the Nsight stages',
so that

- a setting that breaks the script (``no_grad`` on a loop that calls ``backward`` after all, a fused optimizer
  a GPU refuses) ends the trial run alone, never the profile already collected;
- nothing of the profiled run (the profiler's buffers, the heap headroom, the labels' hooks) is in the steps
  timed;
- the ranks of a distributed run follow one plan counted in steps, and none waits in a collective while the
  parent analyses;
- the GPU's memory is not held by a paused process while later stages run.

It costs the script's start-up and wait steps again: 2-4 s on the bundled examples (see the note in
docs/trial.md). The plan (which knobs, blocks of how many steps, how many pairs) is sized here from the
framework run's unprofiled steps and the time budget; the child does the rest
(:mod:`advisor.collect.trial_blocks`) and writes its record into its status, which is gathered into
``trial/trial.json``.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from advisor.collect.config import CollectorConfig
from advisor.knobs import KNOBS
from advisor.trial_gain import MIN_PAIRS

__all__ = ["TRIAL_FILE", "TrialPlan", "plan_trial", "run_trial", "steps_left", "trial_wait", "unprofiled_step_ms"]

TRIAL_FILE = "trial.json"
#: how long a block of steps should last: a few scheduler slices and allocator cycles, so that one slow step
#: does not decide a block
BLOCK_S = 0.2
#: blocks of steps: at least one timed step after the one that follows the switch, at most this many
MIN_BLOCK_STEPS, MAX_BLOCK_STEPS = 3, 50
DEFAULT_PAIRS = 4
#: pairs added while a comparison's spread is large against its gain (advisor.collect.trial_blocks) stop here
MAX_PAIRS = 12


@dataclass
class TrialPlan:
    """What the trial run will try, and what it will not, with why."""

    knobs: list[str] = field(default_factory=list)
    block_steps: int = MIN_BLOCK_STEPS
    pairs: int = DEFAULT_PAIRS
    max_pairs: int = MAX_PAIRS
    budget_s: float = 60.0
    step_ms: float | None = None
    #: knob -> why it is not tried (numerics not allowed, no GPU, the steps too long for the budget)
    not_tried: dict[str, str] = field(default_factory=dict)
    #: knob -> the rules that asked for it
    asked_by: dict[str, list[str]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"knobs": self.knobs, "block_steps": self.block_steps, "pairs": self.pairs, "max_pairs": self.max_pairs,
                "budget_s": self.budget_s, "step_ms": self.step_ms, "not_tried": self.not_tried,
                "asked_by": self.asked_by}


def plan_trial(asked: Iterable[tuple[str, str]], step_ms: float | None, *, budget_s: float, numerics: bool,
               cuda: bool, steps_left: int | None = None, step_method: str | None = None) -> TrialPlan:
    """The plan for the knobs ``asked`` ((knob, rule id) pairs), steps of ``step_ms`` as the script runs them
    without the profiler, within ``budget_s`` seconds of trial steps; ``steps_left``: the steps the script runs
    after the wait steps, where the framework run saw it end by itself (the blocks are then cut to fit);
    ``step_method``: how the framework run found its steps (a time window has none to switch settings at)."""
    plan = TrialPlan(budget_s=budget_s, step_ms=step_ms)
    for name, rule in asked:
        plan.asked_by.setdefault(name, []).append(rule)
    for name in plan.asked_by:
        knob = KNOBS.get(name)
        if knob is None:
            plan.not_tried[name] = "this version of advisor has no such knob"
        elif knob.numerics and not numerics:
            plan.not_tried[name] = "it may change the results (numerics); --trial-numerics allows it"
        elif knob.gpu and not cuda:
            plan.not_tried[name] = "it applies to a CUDA GPU, which the script did not use"
        elif step_method == "time":
            plan.not_tried[name] = ("the framework run recognised no steps (it recorded a time window), and a "
                                    "setting is switched at a step boundary")
        else:
            plan.knobs.append(name)
    if plan.knobs and not (step_ms and step_ms > 0):
        plan.not_tried.update({k: "the framework run timed no steps to size the trial by" for k in plan.knobs})
        plan.knobs = []
    if not plan.knobs or not step_ms:
        return plan
    step_s = step_ms / 1e3
    plan.block_steps = min(max(math.ceil(BLOCK_S / step_s) + 1, MIN_BLOCK_STEPS), MAX_BLOCK_STEPS)
    # each knob's share of the budget, and one more share for trying the knobs together: blocks no longer than
    # two pairs of them fit in it, of two steps at least
    share = budget_s / (len(plan.knobs) + 1)
    plan.block_steps = min(plan.block_steps, max(math.floor(share / (2 * MIN_PAIRS * step_s)), 2))
    per_pair = 2 * plan.block_steps * step_s
    if MIN_PAIRS * per_pair > share:
        need = MIN_PAIRS * per_pair * (len(plan.knobs) + 1)
        why = (f"steps of {step_s:.1f} s: {MIN_PAIRS} pairs of blocks of {plan.block_steps} steps per setting would "
               f"take {need:.0f} s, over the budget of {budget_s:.0f} s (--trial-budget)")
        plan.not_tried.update({k: why for k in plan.knobs})
        plan.knobs = []
        return plan
    plan.pairs = max(MIN_PAIRS, min(DEFAULT_PAIRS, int(share // per_pair)))
    if steps_left is not None:
        _fit_to_steps(plan, steps_left)
    return plan


def _fit_to_steps(plan: TrialPlan, steps_left: int) -> None:
    """Blocks and pairs cut to the steps the script has left after its wait steps: every comparison (each knob,
    and the knobs together where there are two or more) gets two pairs at least, else none is tried."""
    tests = len(plan.knobs) + (1 if len(plan.knobs) >= 2 else 0)
    plan.block_steps = min(plan.block_steps, steps_left // (tests * 2 * MIN_PAIRS))
    if plan.block_steps < 2:
        why = (f"the script runs {steps_left} steps after its wait steps: too few for {MIN_PAIRS} pairs of blocks of "
               f"2 steps per setting")
        plan.not_tried.update({k: why for k in plan.knobs})
        plan.knobs = []
        return
    fits = steps_left // (tests * 2 * plan.block_steps)
    plan.pairs, plan.max_pairs = min(plan.pairs, fits), min(plan.max_pairs, fits)


def steps_left(run_meta: Mapping[str, Any], wait: int) -> int | None:
    """The steps the script runs after ``wait`` steps, where the framework run saw it end by itself; None where
    the collector stopped it (it would have run on)."""
    if run_meta.get("outcome") not in ("completed", "exited"):
        return None
    seen = [r.get("steps_seen") for r in run_meta.get("ranks") or [] if isinstance(r.get("steps_seen"), int)]
    if not seen:
        return None
    return max(min(seen) - wait, 0)


def unprofiled_step_ms(run_meta: Mapping[str, Any], facts: Mapping[str, Any]) -> float | None:
    """The step as the script runs it without the profiler: the steps the framework run timed after the
    window, else the recorded ones."""
    timed = [float(ms) for ms in run_meta.get("unprofiled_step_ms") or [] if isinstance(ms, (int, float))]
    if timed:
        return statistics.median(timed)
    recorded = facts.get("steps.time_ms")
    return float(recorded) if isinstance(recorded, (int, float)) and recorded > 0 else None


def trial_wait(cfg: CollectorConfig) -> int:
    """The steps the trial run lets pass before its first block: as many as the framework run had run when it
    timed its steps without the profiler (its wait, warm-up, recorded and timed steps), the steps the plan was
    sized from. A process is not in its steady state after a few steps: a variant's first 25 steps ran at 50 ms,
    its later ones at 35 (the allocator, the intra-op pool, the caches still settling), and blocks begun at step 5
    took that fall for the setting's gain."""
    return cfg.wait + cfg.warmup + 2 * cfg.active


def stage_config(cfg: CollectorConfig, plan: TrialPlan) -> CollectorConfig:
    """The framework run's settings, for a run that records nothing and tries the plan's knobs after
    :func:`trial_wait` steps (fitted to long steps as there), its steps found the same way. The trial run always
    stops after its trials: with --run-to-end the framework run already ran the training to its end."""
    return replace(cfg, mode="trial", trial=plan.as_json(), wait=trial_wait(cfg), record_shapes=False,
                   source_lines=False, profile_memory=False, with_stack=False, run_to_end=False)


def gather(stage_dir: Path, statuses: Sequence[Mapping[str, Any]], outcome: str, plan: TrialPlan,
           wall_s: float) -> Path:
    """The ranks' trial records and the plan, as ``trial.json`` in the stage folder."""
    ranks = [{"rank": s.get("rank", 0), "script_outcome": s.get("outcome"), "step_method": s.get("step_method"),
              "steps_seen": s.get("steps_seen"), "error": s.get("error"), "trial": s.get("trial")}
             for s in statuses]
    record = {"version": 1, "outcome": outcome, "wall_s": wall_s, "plan": plan.as_json(), "ranks": ranks}
    path = stage_dir / TRIAL_FILE
    path.write_text(json.dumps(record, indent=2, default=str))
    return path


def run_trial(cfg: CollectorConfig, stage_dir: Path, plan: TrialPlan, *, timeout_s: float | None, nproc_per_node: int = 1) -> tuple[Path, Any]:
    """Run the script with the plan; the path of ``trial.json`` and the run's FrameworkResult."""
    from advisor.collect.framework import run_framework

    result = run_framework(stage_config(cfg, plan), stage_dir, timeout_s=timeout_s,
                           nproc_per_node=nproc_per_node)
    return gather(stage_dir, result.statuses, result.outcome, plan, result.wall_s), result
