"""Where the step time goes: data loading, forward, backward, optimizer, other."""

from __future__ import annotations

from typing import Any

from advisor.analyze.findings import FactSpec, records
from advisor.analyze.framework.per_step import NS_PER_MS, median_faults, median_step_ms, unprofiled_step_ms
from advisor.analyze.framework.phases import split_step
from advisor.analyze.framework.view import TraceView
from advisor.analyze.registry import analyzer
from advisor.naming import STEP_PARTS as PHASES

#: part of the step -> its facts: mean ms per step, and share of the step time
PHASE_FACTS = {
    "dataloader": ("phases.dataloader.ms", "phases.dataloader.share"),
    "forward": ("phases.forward.ms", "phases.forward.share"),
    "backward": ("phases.backward.ms", "phases.backward.share"),
    "optimizer": ("phases.optimizer.ms", "phases.optimizer.share"),
    "other": ("phases.other.ms", "phases.other.share"),
}

PROVIDES = (
    FactSpec("steps.count", "count", "number of analysed steps (complete ProfilerStep ranges)"),
    FactSpec("steps.incomplete", "count", "steps left out because the script raised, exited or was stopped inside them"),
    FactSpec("steps.evaluation", "count", "recorded training steps that also ran an evaluation pass: more "
             "forward-only model calls than the median step and more DataLoader fetches than the other steps "
             "(advisor.analyze.evaluation_steps)"),
    FactSpec("steps.evaluation_steps", "text", "their step numbers"),
    FactSpec("steps.evaluation_left_out", "count", "recorded steps left out of every figure for it: the evaluation "
             "steps and, on a trace with GPU work or other ranks (which keeps the analysed steps one unbroken run), "
             "the steps on their far side; 0 where fewer than three steps would be left"),
    FactSpec("steps.evaluation_ms", "ms", "how much longer an evaluation step took than an analysed step, on mean"),
    FactSpec("steps.evaluation_calls", "count", "forward-only model calls an evaluation step made beyond the "
             "median step's, on mean"),
    FactSpec("steps.evaluation_fetches", "count", "DataLoader fetches an evaluation step made beyond the other "
             "steps', on mean"),
    FactSpec("steps.source", "text", "how steps were found: ProfilerStep ranges, or the whole trace as one window"),
    FactSpec("steps.method", "text", "how the collector recognised a step: optimizer, dataloader, backward (the "
             "model's first call after each backward: an update written by hand), module (calls of the model), "
             "closure (each closure evaluation of a long optimizer.step(closure)) or time"),
    FactSpec("steps.fitted_to_ms", "ms", "the step length the collector fitted its schedule to, where the steps "
             "were too long for the recorded ones to fit in the time window (--window): fewer steps skipped, warmed "
             "up and recorded (advisor.collect.schedule_fit); absent where the schedule stood as given"),
    FactSpec("steps.planned", "count", "steps the schedule meant to record: --active, or as many as the time "
             "window holds where it was fitted to long steps"),
    FactSpec("steps.closure_unit_calls", "count", "where each step is one closure evaluation of a long "
             "optimizer.step(closure) (and the update after it): the evaluations the first optimizer step ran; "
             "absent otherwise"),
    FactSpec("steps.closure_unit_step_ms", "ms", "that first optimizer step's wall time"),
    FactSpec("steps.skipped_loop", "text", "the loop the collector found first and left for the training's when "
             "it showed (an evaluation before the first optimizer step): how its steps were recognised (module, "
             "dataloader, or evaluation where none were counted); empty where nothing was skipped"),
    FactSpec("steps.skipped_steps", "count", "steps of that loop counted before it was left"),
    FactSpec("steps.skipped_calls", "count", "forward passes without autograd the program ran before it trained"),
    FactSpec("steps.skipped_s", "s", "how long the skipped loop ran before the training's first step"),
    FactSpec("steps.time_ms", "ms", "mean wall time of a step"),
    FactSpec("steps.time_ms_min", "ms", "shortest step"),
    FactSpec("steps.time_ms_max", "ms", "longest step"),
    FactSpec("steps.time_ms_median", "ms", "median wall time of a step (what the unprofiled steps' median is set "
             "against)"),
    FactSpec("steps.spread", "ratio", "(longest - shortest) / mean step time"),
    FactSpec("steps.unprofiled_ms", "ms", "median wall time of the steps the collector ran after the window "
             "without the profiler, its labels or the source marker (as many as the window, at most as long again)"),
    FactSpec("steps.unprofiled_count", "count", "how many steps after the window were timed without the profiler"),
    FactSpec("steps.profiler_overhead", "fraction", "how much longer the recorded steps took than the unprofiled "
             "ones: steps.time_ms_median / steps.unprofiled_ms - 1 (the profiler's own cost, in the recorded "
             "times; medians on both sides, so that a step unlike the others on either side moves neither)"),
    FactSpec("steps.window_fault_bytes", "bytes", "new memory each recorded step faulted in (minor page faults "
             "times the page size, median of the window's steps): pages the process touched for the first time or "
             "got back from the system"),
    FactSpec("steps.unprofiled_fault_bytes", "bytes", "the same for the steps timed after the window without the "
             "profiler"),
    FactSpec("steps.heap_headroom_bytes", "bytes", "heap pages the collector faulted in and gave back to glibc "
             "before the window, for the profiler's records to grow into (advisor.collect.heap_headroom); absent "
             "where none"),
    FactSpec("steps.window_drift", "ratio", "the later half of the recorded steps' mean time over the earlier "
             "half's (at least four steps): above 1 when the steps slowed down as the recording went on"),
    FactSpec("steps.table", "table", "every analysed step and its phase split", columns={
        "step": "count: step number", "time_ms": "ms: wall time",
        **{f"{p}_ms": f"ms: time in {p}" for p in PHASES},
    }),
    *(FactSpec(PHASE_FACTS[p][0], "ms", f"mean time per step in {p}") for p in PHASES),
    *(FactSpec(PHASE_FACTS[p][1], "fraction", f"share of step time in {p}") for p in PHASES),
    FactSpec("phases.table", "table", "the phase split, one row per phase", columns={
        "phase": "text: phase name", "ms": "ms: mean time per step", "share": "fraction: of step time",
        "source": "text: the evidence the phase was found from",
    }),
)


@analyzer("step_split", provides=PROVIDES)
def step_split(view: TraceView) -> dict[str, Any]:
    """Split each step's wall time into phases, by priority where they overlap."""
    rows = []
    for step in view.steps.itertuples(index=False):
        parts = split_step(view, int(step.start), int(step.end))
        rows.append({"step": int(step.step), "time_ms": step.dur / NS_PER_MS,
                     **{f"{p}_ms": parts[p] / NS_PER_MS for p in PHASES}})
    n = len(rows)
    mean = sum(r["time_ms"] for r in rows) / n if n else 0.0
    out: dict[str, Any] = {
        "steps.count": n if view.profiler_steps_present else 0,
        "steps.source": "ProfilerStep ranges" if view.profiler_steps_present else "whole trace (no ProfilerStep ranges)",
        "steps.incomplete": view.incomplete_steps,
        "steps.method": view.run_meta.get("step_method"),
        **_skipped(view.run_meta.get("steps_skipped")),
        **_schedule(view.run_meta.get("schedule"), view.run_meta.get("closure_unit")),
        "steps.time_ms": mean,
        "steps.time_ms_min": min((r["time_ms"] for r in rows), default=0.0),
        "steps.time_ms_max": max((r["time_ms"] for r in rows), default=0.0),
        "steps.time_ms_median": median_step_ms(view),
        "steps.table": records(rows),
    }
    if view.profiler_steps_present:
        out.update(_evaluation(view, mean))
    out["steps.spread"] = (out["steps.time_ms_max"] - out["steps.time_ms_min"]) / mean if mean else 0.0
    out["steps.window_drift"] = _drift([r["time_ms"] for r in rows])
    out.update(_unprofiled(view.run_meta.get("unprofiled_step_ms"), out["steps.time_ms_median"]))
    out.update(_faults(view.run_meta.get("heap")))
    sources = view.phase_sources
    table = []
    for p in PHASES:
        ms = sum(r[f"{p}_ms"] for r in rows) / n if n else 0.0
        share = ms / mean if mean else 0.0
        ms_fact, share_fact = PHASE_FACTS[p]
        out[ms_fact] = ms
        out[share_fact] = share
        table.append({"phase": p, "ms": ms, "share": share,
                      "source": sources.get(p, "the rest of the step") if p != "other" else "the rest of the step"})
    out["phases.table"] = table
    return out


def _evaluation(view: TraceView, mean_ms: float) -> dict[str, Any]:
    """The evaluation-step facts; none where no step ran an evaluation pass."""
    complete, found = view.evaluation_steps
    if not found.found:
        return {}
    which = found.evaluation
    dur_ms = (complete["end"] - complete["start"]).to_numpy()[which] / NS_PER_MS
    return {
        "steps.evaluation": int(which.sum()),
        "steps.evaluation_steps": ", ".join(str(n) for n in complete["step"].to_numpy()[which]),
        "steps.evaluation_left_out": found.left_out,
        "steps.evaluation_ms": max(float(dur_ms.mean()) - mean_ms, 0.0),
        "steps.evaluation_calls": float(found.extra_calls[which].mean()),
        "steps.evaluation_fetches": float(found.extra_fetches[which].mean()),
    }


#: fewer recorded steps than this say nothing about a trend within the window
MIN_DRIFT_STEPS = 4


def _drift(times: list[float]) -> float | None:
    """Mean of the later half of ``times`` over the earlier half's (the middle one of an odd count left out)."""
    if len(times) < MIN_DRIFT_STEPS:
        return None
    half = len(times) // 2
    early, late = sum(times[:half]) / half, sum(times[-half:]) / half
    return late / early if early > 0 else None


def _schedule(plan: Any, closure_unit: Any) -> dict[str, Any]:
    """The schedule as the collector ran it (run.json ``schedule``, ``closure_unit``); none from older runs."""
    out: dict[str, Any] = {}
    if isinstance(plan, dict) and isinstance(plan.get("active"), int):
        out["steps.planned"] = plan["active"]
        if isinstance(plan.get("fitted_to_s"), (int, float)):
            out["steps.fitted_to_ms"] = plan["fitted_to_s"] * 1e3
    if isinstance(closure_unit, dict) and isinstance(closure_unit.get("closure_calls"), int):
        out["steps.closure_unit_calls"] = closure_unit["closure_calls"]
        out["steps.closure_unit_step_ms"] = float(closure_unit.get("optimizer_step_s") or 0.0) * 1e3
    return out


def _unprofiled(times: Any, profiled_ms: float) -> dict[str, Any]:
    """The unprofiled steps' facts from run.json's ``unprofiled_step_ms``; none without such steps."""
    unprofiled = unprofiled_step_ms(times)
    if unprofiled is None:
        return {}
    median, count = unprofiled
    return {"steps.unprofiled_ms": median, "steps.unprofiled_count": count,
            "steps.profiler_overhead": profiled_ms / median - 1 if profiled_ms else None}


def _faults(heap: Any) -> dict[str, Any]:
    """The page-fault facts from run.json's ``heap`` (the collector's record of the steps' minor faults)."""
    if not isinstance(heap, dict):
        return {}
    page = heap.get("page_bytes") or 4096
    out: dict[str, Any] = {}
    for key, fact in (("window_faults", "steps.window_fault_bytes"),
                       ("unprofiled_faults", "steps.unprofiled_fault_bytes")):
        faults = median_faults(heap, key)
        if faults is not None:
            out[fact] = faults * page
    headroom = heap.get("headroom")
    if isinstance(headroom, dict) and headroom.get("kept"):
        out["steps.heap_headroom_bytes"] = round((headroom.get("mb") or 0) * 2**20)
    return out


def _skipped(skipped: Any) -> dict[str, Any]:
    """What the collector skipped before the recorded loop (run.json ``steps_skipped``); none where nothing was."""
    if not isinstance(skipped, dict):
        return {"steps.skipped_loop": ""}
    return {"steps.skipped_loop": str(skipped.get("method") or "evaluation"),
            "steps.skipped_steps": int(skipped.get("steps") or 0),
            "steps.skipped_calls": int(skipped.get("evaluation_calls") or 0),
            "steps.skipped_s": float(skipped.get("seconds") or 0.0)}
