"""The one-line verdict of a run, and what the data could not support.

A run is called healthy only when the evidence allows it: enough steps, the
main phases seen (forward, and backward in training), and no diagnosis of
medium severity or above. Otherwise the verdict says what is slow, or that
the run is inconclusive and why. A trace without steps (recorded elsewhere,
without ``profiler.step()``) is judged on its window, and the verdict says so.

Data quality: when the loader found events it cannot use as recorded (a
field missing, an impossible value: ``trace.data_quality``), the note is
shown with the verdict. When such events are :data:`UNTRUSTED_SHARE` of the
trace or more, or include a ProfilerStep range (every per-step figure hangs
on them), the run is inconclusive whatever fired: a confident SLOW or HEALTHY
on data that is largely missing would be a guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from advisor.engine.evaluate import Diagnosis
from advisor.engine.story import combined_gain

__all__ = ["MIN_STEPS", "NO_STEPS", "UNTRUSTED_SHARE", "Verdict", "judge", "untrusted"]

#: fewer analysed steps than this cannot support "healthy"
MIN_STEPS = 3
#: events that cannot be used as recorded, from this share of the trace on, leave no verdict: shares and per-step
#: times may be off by as much, more than the margin of most rules' thresholds
UNTRUSTED_SHARE = 0.10
NO_TRACE = "no trace was captured, so there was nothing to analyse"
#: the note of a trace without steps: it is analysed, and judged, as one window
NO_STEPS = ("no ProfilerStep ranges: the trace was analysed as one window, so per-step figures are for the whole "
            "trace")


@dataclass
class Verdict:
    status: str  # slow | healthy | inconclusive
    headline: str
    missing: list[str] = field(default_factory=list)
    #: what all the fixes give back together, overlaps counted once (advisor.engine.story); at most the step
    combined_impact_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _steps_needed(facts: Mapping[str, Any]) -> int:
    """:data:`MIN_STEPS`, or, where the collector fitted its schedule to steps too long for that many to fit in
    its time window, the steps it planned: a step that long is a sample of its own (its phases repeat within
    it), and the steps timed around the window without the profiler say whether they were steady."""
    planned = facts.get("steps.planned")
    if facts.get("steps.fitted_to_ms") and isinstance(planned, int) and planned >= 1:
        return min(MIN_STEPS, planned)
    return MIN_STEPS


def _missing_evidence(facts: Mapping[str, Any]) -> list[str]:
    if "steps.count" not in facts and "trace.cpu_ops" not in facts:
        return [NO_TRACE]
    missing = []
    if facts.get("trace.data_quality"):
        missing.append(str(facts["trace.data_quality"]))
    if facts.get("trace.partial") and facts.get("trace.analysed_steps"):
        missing.append(str(facts["trace.analysed_steps"]))
    steps = facts.get("steps.count", 0) or 0
    if steps == 0:
        missing.append(NO_STEPS)
    elif steps < _steps_needed(facts):
        missing.append(f"only {steps} step(s) were analysed; at least {_steps_needed(facts)} are needed to judge a "
                       "steady state")
    if not facts.get("trace.cpu_ops"):
        missing.append("the trace has no CPU operator events")
    table = facts.get("phases.table") or []
    # An inference or evaluation loop has no backward; a training loop needs both.
    needed = ("forward",) if facts.get("workload.kind") == "inference" else ("forward", "backward")
    unseen = [row["phase"] for row in table if row.get("source") == "not seen" and row["phase"] in needed]
    if unseen:
        missing.append(f"phase(s) not seen in the trace: {', '.join(unseen)}")
    return missing


def judge(diagnoses: Sequence[Diagnosis], facts: Mapping[str, Any], stopped_early: str | None = None) -> Verdict:
    """Pick the verdict from the ranked diagnoses and the facts, with the fixes' combined gain."""
    verdict = _judge(diagnoses, facts, stopped_early)
    verdict.combined_impact_ms = combined_gain(diagnoses, facts)
    return verdict


def _judge(diagnoses: Sequence[Diagnosis], facts: Mapping[str, Any], stopped_early: str | None) -> Verdict:
    kernel_only = "steps.count" not in facts and any(name.startswith("ncu.") for name in facts)
    missing = [] if kernel_only else _missing_evidence(facts)  # framework checks need framework facts
    if stopped_early:
        if not facts:  # nothing was analysed, and the reason it stopped says why
            missing = [m for m in missing if m != NO_TRACE]
        missing.insert(0, stopped_early)
    why_not = untrusted(facts)
    if why_not:
        unjudged = f" ({len(diagnoses)} finding(s) not judged)" if diagnoses else ""
        return Verdict("inconclusive", "The data cannot support a verdict: " + why_not + unjudged, missing)
    serious = [d for d in diagnoses if d.severity_rank >= 2]
    if serious:
        top = serious[0]
        return Verdict("slow", f"{top.name.replace('-', ' ')}: {top.what}", missing)
    # A window of steps (a trace over the memory budget), or a whole trace without steps, is shown with the
    # rest but still supports a verdict: on that window.
    blocking = [m for m in missing if m not in (facts.get("trace.analysed_steps"), NO_STEPS)]
    if blocking:
        minor = f" ({len(diagnoses)} minor finding(s))" if diagnoses else ""
        return Verdict("inconclusive", "The data cannot support a verdict: " + blocking[0] + minor, missing)
    where = " in the trace's window (it has no steps)" if NO_STEPS in missing else ""
    if diagnoses:
        return Verdict("healthy", f"No major bottleneck{where}; only minor findings.", missing)
    return Verdict("healthy", f"No bottleneck found{where} by the rules that could run on this data.", missing)


def untrusted(facts: Mapping[str, Any]) -> str | None:
    """Why the trace's data is too incomplete for any verdict, or None."""
    share = facts.get("trace.bad_share") or 0.0
    steps = facts.get("trace.bad_steps") or 0
    if share < UNTRUSTED_SHARE and not steps:
        return None
    problems: list[str] = []
    for row in facts.get("trace.data_problems") or []:
        what = f"`{row['field']}` {row['problem']}" if row.get("field") else str(row.get("problem"))
        if what not in problems:
            problems.append(what)
    which = "; ".join(problems[:3]) or "see the data-quality note"
    step_part = f", among them {steps} ProfilerStep range(s), so the step times are not known" if steps else ""
    return (f"{share:.0%} of the trace's events cannot be used as recorded ({which}){step_part}; see the "
            "data-quality note")
