"""Comparing two runs: did the fix work, and did it give back what the advisor estimated?

``compare_runs(a, b)`` reads both run directories' own files and returns one
plain, JSON-ready dict (written as ``compare.json``; the Markdown, HTML and
terminal views render from it):

- ``step``: the mean step time of each run, the change, the speed-up, and
  whether the change stands out of the step-to-step noise (a two-sample test
  on the per-step times in ``steps.table``);
- ``phases``, ``operators``, ``kernels``: the change per phase, per operator
  (``ops.top``, self time) and per kernel (``kernels.top``); a name in only one
  run's top list is marked, not given a made-up zero;
- ``diagnoses``: which of A's diagnoses are ``gone`` in B, which ``remain``, which are ``new``;
- ``gains``: for each of A's diagnoses, the time its fix was estimated to give back
  next to what was measured: the change of the whole step, and the change of the
  time the diagnosis pointed at (its largest ``ms`` fact that both runs measured).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from advisor.rundir import RunDir
from advisor.units import fmt_ms, fmt_pct

__all__ = ["MATCH_HIGH", "MATCH_LOW", "compare_runs"]

#: the measured gain "matches" the estimate when it is between these multiples of it
MATCH_LOW, MATCH_HIGH = 0.67, 1.5
#: a step-time change counts as real when it exceeds this many standard errors
NOISE_SIGMAS = 2.0


def _side(run: RunDir) -> dict[str, Any]:
    meta = run.read_metadata()
    findings = run.read_json("findings.json")
    diagnosed = run.read_json("diagnoses.json")
    return {
        "run": run, "meta": meta,
        "facts": {f["name"]: f["value"] for f in findings.get("facts", [])},
        "units": {f["name"]: f.get("unit", "") for f in findings.get("facts", [])},
        "diagnoses": diagnosed.get("diagnoses", []), "verdict": diagnosed.get("verdict", {}),
    }


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _change(a: Any, b: Any) -> dict[str, Any]:
    """A, B, B - A and (B - A) / A; None where a side is missing."""
    a, b = _num(a), _num(b)
    delta = b - a if a is not None and b is not None else None
    return {"a": a, "b": b, "delta": delta, "ratio": delta / a if delta is not None and a else None}


def _step_times(facts: Mapping[str, Any]) -> list[float]:
    return [v for v in (_num(r.get("time_ms")) for r in facts.get("steps.table") or [] if isinstance(r, Mapping))
            if v is not None]


def _noise(a: list[float], b: list[float]) -> float | None:
    """The standard error of the difference of two means, or None with fewer than two steps a side."""
    if len(a) < 2 or len(b) < 2:
        return None

    def var(xs: list[float]) -> float:
        mean = sum(xs) / len(xs)
        return sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)

    return math.sqrt(var(a) / len(a) + var(b) / len(b))


def _step(fa: Mapping[str, Any], fb: Mapping[str, Any]) -> dict[str, Any]:
    out = _change(fa.get("steps.time_ms"), fb.get("steps.time_ms"))
    out["speedup"] = out["a"] / out["b"] if out["a"] and out["b"] else None
    out["steps"] = [fa.get("steps.count"), fb.get("steps.count")]
    error = _noise(_step_times(fa), _step_times(fb))
    out["noise_ms"] = error
    out["significant"] = None if error is None or out["delta"] is None else abs(out["delta"]) > NOISE_SIGMAS * error
    # The steps each run timed after its window without the profiler: what the change gives a run that is
    # not being profiled (the profiler's own cost grows with the operators a step records).
    out["unprofiled"] = _change(fa.get("steps.unprofiled_ms"), fb.get("steps.unprofiled_ms"))
    return out


def _phases(fa: Mapping[str, Any], fb: Mapping[str, Any]) -> list[dict[str, Any]]:
    a = {r.get("phase"): r for r in fa.get("phases.table") or [] if isinstance(r, Mapping)}
    b = {r.get("phase"): r for r in fb.get("phases.table") or [] if isinstance(r, Mapping)}
    names = list(a) + [n for n in b if n not in a]
    return [{"phase": n, **_change(a.get(n, {}).get("ms"), b.get(n, {}).get("ms"))} for n in names]


def _by_name(fa: Mapping[str, Any], fb: Mapping[str, Any], table: str, column: str,
             limit: int = 12) -> list[dict[str, Any]] | None:
    """The change per name in two top-N tables, biggest change first; None when neither run has the table."""
    rows_a, rows_b = fa.get(table), fb.get(table)
    if not rows_a and not rows_b:
        return None
    a = {r.get("name"): _num(r.get(column)) for r in rows_a or [] if isinstance(r, Mapping)}
    b = {r.get("name"): _num(r.get(column)) for r in rows_b or [] if isinstance(r, Mapping)}
    out = []
    for name in list(a) + [n for n in b if n not in a]:
        row = {"name": name, **_change(a.get(name), b.get(name))}
        row["only_in"] = "a" if name not in b else ("b" if name not in a else None)
        out.append(row)
    out.sort(key=lambda r: -abs(r["delta"]) if r["delta"] is not None else -(r["a"] or r["b"] or 0.0))
    return out[:limit]


def _target(diag: Mapping[str, Any], side_a: Mapping[str, Any], fb: Mapping[str, Any]) -> dict[str, Any] | None:
    """The time a diagnosis pointed at (its largest ms fact), in both runs."""
    best = None
    for name, value in (diag.get("facts") or {}).items():
        if side_a["units"].get(name) == "ms" and _num(value) is not None and _num(fb.get(name)) is not None:
            if best is None or value > best[1]:
                best = (name, value)
    if best is None:
        return None
    return {"fact": best[0], **_change(best[1], fb.get(best[0]))}


def _judge(estimate: float | None, measured: float | None) -> str:
    if estimate is None or measured is None or estimate <= 0:
        return "not comparable"
    ratio = measured / estimate
    if ratio < MATCH_LOW:
        return "less than estimated" if measured > 0 else "no gain"
    return "as estimated" if ratio <= MATCH_HIGH else "more than estimated"


def _gains(side_a: Mapping[str, Any], side_b: Mapping[str, Any], step: Mapping[str, Any],
           phases: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    b_ids = {d.get("rule_id") for d in side_b["diagnoses"]}
    step_gain = -step["delta"] if step["delta"] is not None else None
    out = []
    for diag in side_a["diagnoses"]:
        target = _target(diag, side_a, side_b["facts"])
        target_gain = -target["delta"] if target and target["delta"] is not None else None
        # the rule's formula, where a trial measured the gain in its place (that gain is given beside it)
        trial = diag.get("gain_source") == "trial"
        estimate = _num(diag.get("estimate_ms") if trial else diag.get("impact_ms"))
        row = {
            "rule_id": diag.get("rule_id"), "name": diag.get("name"), "severity": diag.get("severity"),
            "status": "remains" if diag.get("rule_id") in b_ids else "gone", "estimate_ms": estimate,
            "trial_ms": _num(diag.get("impact_ms")) if trial else None,
            "step_gain_ms": step_gain, "target": target, "target_gain_ms": target_gain,
            "step_judgement": _judge(estimate, step_gain), "target_judgement": _judge(estimate, target_gain),
        }
        row["explanation"] = _explain(row, phases, target)
        out.append(row)
    return out


def _explain(row: Mapping[str, Any], phases: Sequence[Mapping[str, Any]], target: Mapping[str, Any] | None) -> str:
    """One sentence on why the step changed less than the diagnosed time, when it did."""
    step_gain, target_gain = row["step_gain_ms"], row["target_gain_ms"]
    if step_gain is None or target_gain is None or target_gain <= 0 or step_gain >= 0.8 * target_gain:
        return ""
    grew = sorted((p for p in phases if p["delta"] is not None and p["delta"] > 0 and
                   (target is None or f"phases.{p['phase']}." not in target["fact"])), key=lambda p: -p["delta"])
    if not grew:
        return ""
    parts = ", ".join(f"{p['phase']} +{fmt_ms(p['delta'])}" for p in grew[:3])
    return f"The step gained less than the diagnosed time because other phases grew ({parts})."


def _notes(side_a: Mapping[str, Any], side_b: Mapping[str, Any], step: Mapping[str, Any]) -> list[str]:
    notes = []
    ma, mb = side_a["meta"], side_b["meta"]
    if ma.get("script") and mb.get("script") and Path(ma["script"]).name != Path(mb["script"]).name:
        notes.append(f"the runs are of different scripts ({Path(ma['script']).name} and {Path(mb['script']).name})")
    if ma.get("step_method") != mb.get("step_method"):
        notes.append(f"steps were recognised differently ({ma.get('step_method')} and {mb.get('step_method')}), "
                     "so per-step times may not be comparable")
    if step["significant"] is False:
        notes.append(f"the step-time change ({fmt_ms(step['delta'])}) is within the step-to-step noise "
                     f"(standard error {fmt_ms(step['noise_ms'])}); profile more steps (--active) to be sure")
    fa, fb = side_a["facts"], side_b["facts"]
    if fa.get("trace.device") != fb.get("trace.device"):
        notes.append(f"the runs ran on different devices ({fa.get('trace.device')} and {fb.get('trace.device')})")
    return notes


def _headline(step: Mapping[str, Any], gains: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> str:
    if step["a"] is None or step["b"] is None:
        text = "The step time could not be compared: a run has no step time."
    else:
        word = "faster" if step["delta"] < 0 else "slower"
        text = (f"Step {fmt_ms(step['a'])} → {fmt_ms(step['b'])} ({fmt_pct(abs(step['ratio'] or 0.0))} {word}"
                + (f", {step['speedup']:.2f}x" if step["speedup"] and step["delta"] < 0 else "") + ")")
        bare = step.get("unprofiled") or {}
        if bare.get("delta") is not None:
            text += f"; without the profiler {fmt_ms(bare['a'])} → {fmt_ms(bare['b'])}"
        text += "."
    gone = [g for g in gains if g["status"] == "gone"]
    for g in gone:
        text += f" Gone: {g['rule_id']} {g['name']} (estimated {fmt_ms(g['estimate_ms'] or 0.0)}"
        if g["step_gain_ms"] is not None:
            text += f", measured {fmt_ms(g['step_gain_ms'])} per step"
        if g["target"] and g["target_gain_ms"] is not None:
            text += f"; {g['target']['fact']} fell by {fmt_ms(g['target_gain_ms'])}"
        text += ")."
    if new:
        text += " New: " + ", ".join(f"{d.get('rule_id')} {d.get('name')}" for d in new) + "."
    if not gone and not new:
        text += " The same diagnoses fire in both runs." if gains else " No diagnosis in either run."
    return text


def _describe(side: Mapping[str, Any]) -> dict[str, Any]:
    meta, run = side["meta"], side["run"]
    report = run.path.resolve() / "report.html"
    return {"path": str(run.path.resolve()), "report_uri": report.as_uri(), "title": meta.get("title", run.path.name),
            "started_at": meta.get("started_at"), "args": meta.get("args", []), "verdict": side["verdict"],
            "reproduce": meta.get("reproduce", "")}


def compare_runs(run_a: RunDir, run_b: RunDir) -> dict[str, Any]:
    """Everything ``advisor compare`` reports about run B against run A (before and after a change)."""
    side_a, side_b = _side(run_a), _side(run_b)
    fa, fb = side_a["facts"], side_b["facts"]
    step = _step(fa, fb)
    phases = _phases(fa, fb)
    gains = _gains(side_a, side_b, step, phases)
    a_ids = {d.get("rule_id") for d in side_a["diagnoses"]}
    new = [{"rule_id": d.get("rule_id"), "name": d.get("name"), "severity": d.get("severity"),
            "impact_ms": d.get("impact_ms"), "what": d.get("what")}
           for d in side_b["diagnoses"] if d.get("rule_id") not in a_ids]
    return {
        "a": _describe(side_a), "b": _describe(side_b),
        "headline": _headline(step, gains, new),
        "step": step, "phases": phases,
        "operators": _by_name(fa, fb, "ops.top", "self_ms"),
        "kernels": _by_name(fa, fb, "kernels.top", "ms"),
        "gains": gains, "new": new,
        "gone": [g["rule_id"] for g in gains if g["status"] == "gone"],
        "remaining": [g["rule_id"] for g in gains if g["status"] == "remains"],
        "notes": _notes(side_a, side_b, step),
    }


def write_comparison(run_a: Path, run_b: Path, out: Path | None = None) -> tuple[dict[str, Any], dict[str, Path]]:
    """Compare two run directories and write compare.json, compare.md and compare.html into a new folder."""
    from advisor.report.charts import compare_chart
    from advisor.report.render import write_reports

    a, b = RunDir.open(run_a), RunDir.open(run_b)
    data = compare_runs(a, b)
    folder = RunDir.create(f"compare-{b.path.name}", out)
    path = folder.write_json("compare.json", data)
    view = {**data, "charts": [compare_chart(data["phases"])], "out_dir": str(folder.path.resolve())}
    return data, {"json": path, **write_reports(view, folder.path, stem="compare")}
