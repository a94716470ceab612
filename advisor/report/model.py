"""The serialized data every report renders from.

``build_report_data`` gathers, from a run directory's own files
(``run.json``, ``findings.json``, ``diagnoses.json``), one plain dict; the
Markdown, HTML and terminal renderers all read that dict, so they say the
same thing. ``advisor report RUN_DIR`` rebuilds it without profiling again.

Keys: ``run`` (run.json), ``verdict``, ``summary`` (step time, phases, the
ranked diagnoses in one line each, ``combined``: the sentence on what the fixes
give back together), ``diagnoses`` (each with ``sources``, ``module``,
``knowledge`` entries, ``evidence_facts`` (name, value, unit, and the
``function`` that computed it and ``where`` it is), ``evidence_code`` (those
functions, once each), ``fix_short`` and ``chain``, its story across the stages:
:mod:`advisor.report.story`),
``facts`` and ``units`` (by fact name), ``findings``, ``outcomes``, ``charts``
(:class:`~advisor.report.charts.Chart`), ``trail`` (see
:mod:`advisor.report.trail`), ``environment``, ``reproduce`` and ``artifacts``.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from advisor import __version__
from advisor.knowledge import find_entry, parse_entry
from advisor.engine.story import measured_base_ms
from advisor.report.artifacts import artifacts, environment
from advisor.report.charts import rank_times, report_charts, straggler
from advisor.report.sources import locations, module_path, source_context
from advisor.report.story import chain, combined_line
from advisor.report.trail import build_trail
from advisor.rundir import RunDir
from advisor.units import fmt_bytes, fmt_ms, fmt_pct

__all__ = ["build_report_data", "first_sentence", "source_context"]


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` (up to the first '. '), whitespace collapsed."""
    text = " ".join(str(text or "").split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def _knowledge(diag: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The knowledge entries a diagnosis names; a user's rule may keep them beside its file."""
    source = Path(str(diag.get("source") or ""))
    extra = [source.parent, source.parent / "knowledge"] if diag.get("source") else []
    out = []
    for entry_id in diag.get("knowledge") or []:
        path = find_entry(str(entry_id), extra)
        if path is None:
            out.append({"id": entry_id, "missing": True})
            continue
        entry = parse_entry(path.read_text(encoding="utf-8"), path)
        out.append({"id": entry.id, "title": entry.title, "summary": entry.summary, "sections": entry.sections,
                    "why": entry.sections.get("Why it slows training", ""), "path": str(path), "missing": False})
    return out


def _evidence_facts(diag: Mapping[str, Any], units: Mapping[str, str],
                    codes: Mapping[str, dict[str, str]]) -> list[dict[str, Any]]:
    """The facts a diagnosis used, with the unit of each (from findings.json) and the code that computed it:
    ``function`` (``step_split``) and ``where`` (``advisor/analyze/framework/step_split.py:37``)."""
    return [{"name": k, "value": v, "unit": units.get(k, ""), **codes.get(k, {"function": "", "where": ""})}
            for k, v in (diag.get("facts") or {}).items()]


def _evidence_code(facts: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Each function that computed some of these facts, once, in the order the facts name them."""
    seen = {f["function"]: {"function": f["function"], "where": f["where"]} for f in facts if f["function"]}
    return list(seen.values())


def _fact_codes(findings: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """fact name -> the function of the analyzer that computed it and its file:line, from each fact's
    ``source`` in findings.json (the analyzer's name)."""
    from advisor.analyze.registry import find  # the analyzers import pandas; only the reports need them here

    out = {}
    for fact in findings.get("facts", []):
        analyzer = find(str(fact.get("source") or ""))
        if analyzer is not None:
            out[fact["name"]] = {"function": analyzer.function, "where": f"{analyzer.file}:{analyzer.line}"}
    return out


def _diagnoses(raw: list[dict[str, Any]], facts: Mapping[str, Any], units: Mapping[str, str],
               roots: list[Path], codes: Mapping[str, dict[str, str]]) -> list[dict[str, Any]]:
    step = facts.get("steps.time_ms")
    out = []
    for diag in raw:
        view = dict(diag)
        view["sources"] = [c for c in (source_context(f, ln, roots) for f, ln in locations(diag)) if c]
        view["module"] = module_path(diag)
        view["knowledge_entries"] = _knowledge(diag)
        view["evidence_facts"] = _evidence_facts(diag, units, codes)
        view["evidence_code"] = _evidence_code(view["evidence_facts"])
        view["fix_short"] = first_sentence(diag.get("fix", ""))
        impact = diag.get("impact_ms")
        # a measured gain is a share of the step as the script runs it, not of the recorded one
        base = measured_base_ms(diag) if diag.get("gain_source") == "trial" else step
        view["impact_share"] = impact / base if isinstance(impact, (int, float)) and isinstance(base, (int, float)) \
            and base > 0 else None
        view["trial_text"] = trial_text(diag) or not_tried_text(diag, facts)
        # the line that makes the change in the user's code, shown as code under the trial's figures
        view["trial_line"] = (diag.get("measured") or {}).get("line") if diag.get("gain_source") == "trial" else None
        out.append(view)
    return out


def not_tried_text(diag: Mapping[str, Any], facts: Mapping[str, Any]) -> str | None:
    """Why the trial stage did not measure this diagnosis's setting, where it ran and said why."""
    knob = diag.get("knob")
    rows = facts.get("trial.not_tried") or []
    why = next((r.get("why") for r in rows if isinstance(r, Mapping) and r.get("knob") == knob), None) if knob else None
    return f"Not tried ({knob}): {why}. The gain is the rule's estimate." if why else None


def trial_text(diag: Mapping[str, Any]) -> str | None:
    """What the trial stage measured for this diagnosis's fix, beside the rule's estimate; None where no trial
    measured it."""
    row = diag.get("measured")
    if not isinstance(row, Mapping) or not isinstance(row.get("gain_ms"), (int, float)):
        return None
    gain, spread, pairs = float(row["gain_ms"]), float(row.get("spread_ms") or 0.0), row.get("pairs")
    how = (f"A/B on the script's own steps, {pairs} pairs of blocks: {fmt_ms(row.get('base_ms') or 0)} a step as "
           f"it is, {fmt_ms(row.get('tried_ms') or 0)} with the setting")
    if gain > 0 and row.get("clear"):
        said = f"Measured: the setting gave back {fmt_ms(gain)} ± {fmt_ms(spread)} per step ({how})."
    elif gain > 0:
        said = (f"Measured: {fmt_ms(gain)} ± {fmt_ms(spread)} per step, within the noise of the trial "
                f"({how}).")
    else:
        said = f"Measured: the setting gave back nothing ({fmt_ms(gain)} ± {fmt_ms(spread)} per step; {how})."
    estimate = diag.get("estimate_ms")
    if isinstance(estimate, (int, float)):
        said += f" The rule's estimate was {fmt_ms(estimate)}."
    if row.get("numerics"):
        said += " It may change the results in the last bits: check the loss against a run without it."
    return said


def loop_note(facts: Mapping[str, Any]) -> str | None:
    """What kind of loop the step split describes, where it is not a plain training loop, what ran before it
    and was skipped, and which recorded steps it leaves out for an evaluation pass."""
    said = [text for text in (_loop_kind(facts), long_steps_note(facts), skipped_note(facts),
                              evaluation_note(facts) or outlier_note(facts)) if text]
    return " ".join(said) or None


def long_steps_note(facts: Mapping[str, Any]) -> str | None:
    """Where the steps were too long for the default schedule: what a step is, and how many were recorded."""
    fitted = facts.get("steps.fitted_to_ms")
    if not isinstance(fitted, (int, float)) or fitted <= 0:
        return None
    planned = facts.get("steps.planned") or 1
    calls = facts.get("steps.closure_unit_calls")
    step_ms = facts.get("steps.closure_unit_step_ms")
    unit = ""
    if isinstance(calls, int) and isinstance(step_ms, (int, float)):
        unit = (f"Each optimizer.step(closure) took {fmt_ms(step_ms)} and evaluated its closure {calls} times, so "
                "each step here is one closure evaluation with the update after it; the figures are per "
                f"evaluation (about {calls} to an optimizer step). ")
    return (f"{unit}Steps of about {fmt_ms(fitted)} are too long for the default schedule: {planned} "
            f"{'was' if planned == 1 else 'were'} recorded (as many as the --window time holds), after fewer steps "
            "skipped and warmed up; --wait, --warmup and --active set the schedule by hand.")


def skipped_note(facts: Mapping[str, Any]) -> str | None:
    """The loop recognised first and left for the training's: an evaluation before the first training step."""
    loop = facts.get("steps.skipped_loop")
    if not loop:
        return None
    calls = facts.get("steps.skipped_calls") or 0
    steps = facts.get("steps.skipped_steps") or 0
    seconds = facts.get("steps.skipped_s")
    what = [f"{calls:,} forward pass{'es' if calls != 1 else ''} without autograd"] if calls else []
    if steps and loop != "evaluation":
        what.append(f"{steps:,} step{'s' if steps != 1 else ''} counted as {loop} steps")
    took = f", {seconds:.1f} s" if isinstance(seconds, (int, float)) and seconds >= 0.1 else ""
    before = ", ".join(what) or "an evaluation"
    return (f"The recorded steps are the training's: what ran before its first step ({before}{took}) was an "
            "evaluation, and was skipped.")


#: a recorded step this many times the median step is named in the summary (the figures are means)
OUTLIER_STEP = 2.0


def outlier_note(facts: Mapping[str, Any]) -> str | None:
    """The recorded steps far longer than the median one, where no evaluation pass explains them: the figures are
    means over the steps, those included, and the reader should know (an evaluation on a held-out tensor with no
    DataLoader of its own, a save, a rollout: the trace alone cannot tell which)."""
    rows = [r for r in facts.get("steps.table") or [] if isinstance(r, Mapping)
            and isinstance(r.get("time_ms"), (int, float))]
    median = facts.get("steps.time_ms_median")
    if len(rows) < 3 or not isinstance(median, (int, float)) or median <= 0:
        return None
    long = [r for r in rows if r["time_ms"] >= OUTLIER_STEP * median]
    if not long:
        return None
    names = ", ".join(str(r.get("step")) for r in long)
    times = ", ".join(fmt_ms(r["time_ms"]) for r in long)
    many = len(long) > 1
    return (f"Step{'s' if many else ''} {names} took {times}, {OUTLIER_STEP:.0f} times the median step "
            f"({fmt_ms(median)}) or more: the figures are means over the {len(rows)} steps, "
            f"{'those' if many else 'that one'} included. Look at what else the script does every few steps "
            "(an evaluation without a DataLoader of its own, a new epoch's DataLoader workers, a save, logging).")


def _loop_kind(facts: Mapping[str, Any]) -> str | None:
    if facts.get("steps.method") == "backward":
        return ("A training loop without torch.optim: each step begins at the model's first call after a "
                "backward(), and the update written by hand (from the end of the backward to the next forward) is "
                "the optimizer phase.")
    if facts.get("optimizer.closure"):
        return ("Forward and backward ran inside optimizer.step() (a closure, as in LBFGS or Lightning's automatic "
                "optimization); they are counted as forward and backward, and the optimizer phase is the update alone.")
    if facts.get("workload.kind") != "inference":
        return None
    method = facts.get("steps.method")
    each = {"module": "one call of the model", "dataloader": "one DataLoader batch"}.get(str(method))
    return "An inference or evaluation loop: forward passes only, no backward or optimizer" + (
        f"; each step is {each}." if each else ".")


def evaluation_note(facts: Mapping[str, Any]) -> str | None:
    """The recorded steps that also ran an evaluation pass, and whether the figures leave them out."""
    count = facts.get("steps.evaluation")
    if not isinstance(count, int) or count < 1:
        return None
    steps = facts.get("steps.evaluation_steps")
    calls = facts.get("steps.evaluation_calls") or 0
    # the batches are not counted out: the fetch that ends a DataLoader's loop is a fetch too
    what = f"{calls:.0f} model call{'s' if round(calls) != 1 else ''} with no backward, on batches of their own"
    extra = facts.get("steps.evaluation_ms")
    longer = f", {fmt_ms(extra)} longer than a training step" if isinstance(extra, (int, float)) else ""
    said = (f"Step{'s' if count != 1 else ''} {steps} also ran an evaluation pass ({what}{longer}"
            f"{', on mean' if count != 1 else ''}).")
    left_out = facts.get("steps.evaluation_left_out") or 0
    kept = facts.get("steps.count")
    if left_out and left_out == count:
        return said + (f" {'They are' if count != 1 else 'It is'} left out: the figures are over the other {kept} "
                       "steps, the training alone.")
    if left_out:
        numbers = [r.get("step") for r in facts.get("steps.table") or [] if isinstance(r, Mapping)]
        over = f"steps {numbers[0]}-{numbers[-1]}" if len(numbers) > 1 else f"{kept} steps"
        return said + (f" The figures are over {over}, the longest unbroken run without one; the other {left_out} "
                       "recorded steps are left out.")
    return said + (" Too few steps lie between evaluations to leave them out: the figures include them, so the "
                   "data wait and forward time hold the evaluation's too; record more steps (--active) or "
                   "evaluate less often.")


#: the profiler's share of the recorded step from which the summary warns that the times include it
PROFILER_OVERHEAD_NOTE = 0.25
#: the later recorded steps over the earlier ones from which the summary says the steps slowed down in the window
WINDOW_DRIFT_NOTE = 1.5


def profiler_note(facts: Mapping[str, Any]) -> str | None:
    """One sentence comparing the recorded steps with the steps the collector timed after them, unprofiled."""
    unprofiled, overhead = facts.get("steps.unprofiled_ms"), facts.get("steps.profiler_overhead")
    count = facts.get("steps.unprofiled_count")
    # the medians, as the overhead is taken (a run directory from before the median fact: the mean)
    step = facts.get("steps.time_ms_median") or facts.get("steps.time_ms")
    if not isinstance(unprofiled, (int, float)) or not isinstance(overhead, (int, float)) or not step:
        return None
    said = (f"Without the profiler the steps took {fmt_ms(unprofiled)} (the median of {count} steps run after the "
            f"window), against {fmt_ms(step)} recorded (the median)")
    if overhead < PROFILER_OVERHEAD_NOTE:
        return said + "."
    return (said + f": profiling made the recorded steps {fmt_pct(overhead)} longer. The times and gains in this "
            "report are the recorded ones; in proportion to the step they hold, but in milliseconds expect "
            f"about {fmt_pct(unprofiled / step)} of them without the profiler." + _drift_note(facts))


def _drift_note(facts: Mapping[str, Any]) -> str:
    """A sentence when the recorded steps slowed down as the window went on, or paid for new memory; "" otherwise."""
    drift = facts.get("steps.window_drift")
    faulted = _fault_note(facts)
    if not isinstance(drift, (int, float)) or drift < WINDOW_DRIFT_NOTE:
        return faulted
    slowed = (f" The recorded steps also slowed down as the window went on (the later half took {drift:.1f} times "
              "the earlier half)")
    if faulted:
        return slowed + "." + faulted
    if isinstance(facts.get("steps.window_fault_bytes"), (int, float)):
        # measured, and not new memory: say only what was seen
        return slowed + ", without faulting in new memory." + _PROFILERS_TIME
    if facts.get("trace.shapes") == "window":
        held = ("the profiler keeps every operator's inputs until it stops (record_shapes), so the process grows "
                "with each recorded step")
    else:
        held = ("the profiler keeps its records until it stops, and the memory the script frees between them is "
                "harder to reuse, so the process grows with each recorded step")
    return (slowed + f": {held}, and where new memory is slow to fault in (on virtual machines in particular) the "
            "later steps pay for it." + _PROFILERS_TIME)


_PROFILERS_TIME = (" As the steps after the window were faster, that extra time is most likely the profiler's, not "
                   "your program's; a shorter window (--active 3) keeps more of it out.")


#: new memory a recorded step faulted in, from which (and from FAULT_RATIO times the unprofiled steps') it is said
FAULT_NOTE_BYTES = 4 << 20
FAULT_RATIO = 4


def _fault_note(facts: Mapping[str, Any]) -> str:
    """A sentence when the recorded steps faulted in much more new memory than the steps after them; "" else."""
    window, unprofiled = facts.get("steps.window_fault_bytes"), facts.get("steps.unprofiled_fault_bytes")
    if not isinstance(window, (int, float)) or not isinstance(unprofiled, (int, float)):
        return ""
    if window < FAULT_NOTE_BYTES or window < FAULT_RATIO * unprofiled:
        return ""
    if facts.get("trace.shapes") == "window":
        held = "every operator's inputs (record_shapes)"
    else:
        held = "its records"
    return (f" Each recorded step faulted in {fmt_bytes(window)} of new memory (the median), the steps after the "
            f"window {fmt_bytes(unprofiled)}: the profiler keeps {held} until it stops, where they take the place "
            "of memory your script freed, the script's next allocations land on fresh pages, and the recorded "
            "times pay for faulting them in, which your program without the profiler does not.")


def _summary(facts: Mapping[str, Any], diagnoses: list[dict[str, Any]]) -> dict[str, Any]:
    phases = sorted((r for r in facts.get("phases.table") or [] if isinstance(r, Mapping)),
                    key=lambda r: -(r.get("ms") or 0.0))
    return {
        "step_ms": facts.get("steps.time_ms"), "step_count": facts.get("steps.count", 0),
        "step_min": facts.get("steps.time_ms_min"), "step_max": facts.get("steps.time_ms_max"),
        "step_source": facts.get("steps.source"), "phases": phases, "loop": loop_note(facts),
        "profiler": profiler_note(facts),
        "gpu_idle": facts.get("gpu.idle_fraction"), "diagnoses": diagnoses,
    }


def _advisor_command(meta: Mapping[str, Any], out: str | None = None) -> str:
    """The advisor command line that made this run, without its ``--out`` (a new run needs a new folder), or
    with ``--out OUT`` in its place: among advisor's own options, before the ``--`` that starts the script's
    arguments, which the script would otherwise receive (and a script's own ``--out`` after it is kept)."""
    argv = list(meta.get("command") or [])[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    own, script_args = argv[:cut], argv[cut:]
    kept: list[str] = []
    skip = False
    for arg in own:
        if skip:
            skip = False
            continue
        if arg == "--out":
            skip = True
            continue
        if not arg.startswith("--out="):
            kept.append(arg)
    if not kept:
        return ""
    if out is not None:
        kept += ["--out", out]
    return shlex.join(["advisor", *kept, *script_args])


def _reproduce(meta: Mapping[str, Any], run: RunDir, stages: list[dict[str, Any]]) -> list[dict[str, str]]:
    cwd = meta.get("cwd") or ""
    again = _advisor_command(meta)
    here = shlex.quote(str(run.path.resolve()))
    prefix = f"cd {shlex.quote(cwd)} && " if cwd else ""
    steps = []
    if again:
        label = ("Profile again with the same settings" if meta.get("kind") == "diagnose"
                 else "Analyse the same traces again")
        steps.append({"label": f"{label} (into a new run directory)", "command": prefix + again})
    if meta.get("script_command"):
        steps.append({"label": "Run the script alone, without advisor", "command": shlex.join(meta["script_command"])})
    for stage in stages:
        if stage.get("command") and stage["stage"] != "framework":
            steps.append({"label": f"The {stage['stage']} stage's tool command", "command": stage["command"]})
    steps.append({"label": "Re-evaluate the rules and re-render this report, without profiling",
                  "command": f"advisor report {here}"})
    if again and meta.get("kind") == "diagnose":
        after = _advisor_command(meta, out=f"{run.path.resolve()}-after")
        steps.append({"label": "After a fix: profile again and compare the two runs",
                      "command": f"{prefix}{after}\nadvisor compare {here} {here}-after"})
    return steps


def build_report_data(run: RunDir, charts: bool = True) -> dict[str, Any]:
    """Everything the reports show, from the run directory's own files (``charts=False``: no drawing,
    for the terminal card)."""
    meta = run.read_metadata()
    findings = run.read_json("findings.json")
    diagnosed = run.read_json("diagnoses.json")
    facts = {f["name"]: f["value"] for f in findings.get("facts", [])}
    units = {f["name"]: f.get("unit", "") for f in findings.get("facts", [])}
    roots = [Path(p) for p in meta.get("source_roots", [])]
    diagnoses = _diagnoses(diagnosed.get("diagnoses", []), facts, units, roots, _fact_codes(findings))
    trail = build_trail(meta, diagnoses, draw_graph=charts)
    for view in diagnoses:
        view["chain"] = chain(view, trail["stages"], meta, str(run.path.resolve()), units, facts.get("trace.has_gpu"))
    verdict = diagnosed.get("verdict", {})
    drawn = report_charts(facts) if charts else []
    expected = ["report.md", "report.html", *(f"charts/{c.id}.svg" for c in [*drawn, trail["chart"]] if c.svg)]
    return {
        "advisor_version": __version__,
        "generated_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "run": meta,
        "run_dir": str(run.path.resolve()),
        "verdict": verdict,
        "summary": {**_summary(facts, diagnoses), "combined": combined_line(verdict, diagnoses,
                                                                             facts.get("steps.time_ms"))},
        "diagnoses": diagnoses,
        "outcomes": diagnosed.get("outcomes", []),
        "facts": facts,
        "units": units,
        "findings": findings,
        "charts": drawn,
        "trail": trail,
        "ranks": rank_times(facts),
        "straggler": straggler(facts),
        "environment": environment(meta),
        "reproduce": _reproduce(meta, run, trail["stages"]),
        "artifacts": artifacts(run, meta, expected),
    }
