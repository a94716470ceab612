"""The trial stage's findings: what each setting tried gave back on the user's own steps.

One row per comparison the trial ran (each knob against the original settings, and the knobs that gave back
clearly, together), from :func:`advisor.trial_gain.measure`: the median original step less the median step
with the setting, the spread of the pairs of blocks, and how many pairs it rests on. The engine gives a
diagnosis whose rule tries a knob that knob's row (in :mod:`advisor.engine.evaluate`).
"""

from __future__ import annotations

from typing import Any

from advisor.analyze.findings import FactSpec
from advisor.analyze.registry import analyzer
from advisor.knobs import KNOBS
from advisor.load.trial import TrialRecord
from advisor.trial_gain import MIN_PAIRS, measure, tests_of

_ROW = {
    "knob": "text: the knob tried, or knobs joined by + when tried together",
    "gain_ms": "ms: median original step - median step with the setting, over all pairs; positive is faster",
    "spread_ms": "ms: standard error of the pairs' differences of their blocks' medians",
    "pairs": "count: pairs of blocks (original, setting) it rests on",
    "base_ms": "ms: median step with the script's own settings",
    "tried_ms": "ms: median step with the setting",
    "share": "fraction: gain of the original step",
    "steps": "count: steps timed, the first of each block left out",
    "clear": "bool: two pairs or more and a gain over twice its spread",
    "line": "text: the line that makes the change in the user's code",
    "numerics": "bool: the setting may change the results",
}

PROVIDES = (
    FactSpec("trial.outcome", "text", "how the trial run ended: complete, budget, nothing to try, the script "
                                      "ended, no steps, or the script's outcome when it failed"),
    FactSpec("trial.results", "table", "each setting tried on the user's steps, A/B in blocks", columns=_ROW),
    FactSpec("trial.not_tried", "table", "the settings the rules asked for that were not tried, and why", columns={
        "knob": "text: the knob", "why": "text: why it was not tried"}),
    FactSpec("trial.wall_s", "s", "wall time of the trial run of the script, start-up included"),
)


@analyzer("trial_gains", needs=("trial",), provides=PROVIDES, stage="trial")
def trial_gains(record: TrialRecord) -> dict[str, Any]:
    """The measured gain of each setting tried, and what was not tried."""
    rows, short = [], []
    for test in tests_of(record.blocks):
        gain = measure(record.blocks, test)
        if gain is None:
            continue
        idle = [record.knobs[k]["no_effect"] for k in test.split("+") if record.knobs.get(k, {}).get("no_effect")]
        if idle:  # applied, but it changed nothing the script did: its figure is no measure of the fix
            short.append({"knob": test, "why": idle[0]})
            continue
        if gain.pairs < MIN_PAIRS:  # one pair has no spread: a step that waited once would be the gain
            short.append({"knob": test, "why": f"{_ended(record)} after {gain.pairs} pair of blocks, too few to "
                                                f"measure a gain ({MIN_PAIRS} at least)"})
            continue
        parts = [KNOBS[k] for k in test.split("+") if k in KNOBS]
        rows.append({**gain.as_row(), "clear": gain.clear(), "line": "\n".join(k.line for k in parts),
                     "numerics": any(k.numerics for k in parts)})
    not_tried = [{"knob": k, "why": why} for k, why in (record.plan.get("not_tried") or {}).items()]
    not_tried += [{"knob": k, "why": v.get("why_not") or "not tried"} for k, v in record.knobs.items()
                  if not v.get("applies")]
    not_tried += short
    measured = {r["knob"] for r in rows}
    not_tried += [{"knob": k, "why": _unmeasured(record)} for k in record.plan.get("knobs") or []
                  if k not in measured and k not in {r["knob"] for r in not_tried}]
    return {"trial.outcome": _outcome(record), "trial.results": rows, "trial.not_tried": not_tried,
            "trial.wall_s": record.wall_s}


def _outcome(record: TrialRecord) -> str:
    """The trial's own end where the run ended as planned (the collector stopped it); else the script's."""
    if record.outcome not in ("captured", "completed", "exited"):
        return f"the script {record.outcome} in the trial run"
    if record.trial_outcome == "not begun" and record.outcome in ("completed", "exited"):
        return "the script ended before its wait steps were over"
    return record.trial_outcome


def _ended(record: TrialRecord) -> str:
    if record.outcome not in ("captured", "completed", "exited"):
        return f"the script {record.outcome} in the trial run"
    return "the trial ended" if record.trial_outcome != "the script ended" else "the script ended"


def _unmeasured(record: TrialRecord) -> str:
    return f"{_ended(record)} before a pair of blocks was timed"
