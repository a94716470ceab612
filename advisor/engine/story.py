"""One bottleneck, one story: deeper stages refine earlier diagnoses, and the gains add up.

Two steps after the rules are evaluated:

- :func:`refine`: a deeper-stage diagnosis (system, kernel) whose rule says
  ``refines: [{rule: DL001, when: ...}]`` and whose condition holds on this
  run, with DL001 among the diagnoses, is the same bottleneck seen by a
  deeper tool. It becomes a *section* of DL001 (``refinements``: its texts,
  numbers, evidence and the stage's files) and leaves the ranked list, so the
  cause is told once. Without the earlier diagnosis it stays its own entry.
  The condition can read ``refined.kernels``, the kernels the earlier
  diagnosis names (its ``kernels``): a kernel-stage diagnosis explains the
  diagnosis that named its kernel (``framework_name`` of ``ncu.kernels``).
- :func:`combined_gain`: the time all the fixes together give back. Each
  diagnosis keeps its own ``impact_ms``; where several take their gain from
  the same phase of the step (``impact.phase``), they act on the same time,
  so within a phase of ``P`` ms each fix is taken to remove its share of what
  the others left: ``P * (1 - prod(1 - g_i / P))``, never more than ``P``.
  The phases' results are added; gains with no phase act on the whole step,
  combined the same way with that sum over the step time. The total never
  exceeds the step time. A gain the trial stage measured counts as the same
  share of the recorded step (the estimates are made on it); diagnoses whose
  settings it tried together count as one, of the gain measured together.

``stages`` of a diagnosis are the stages whose facts it read, in workflow
order: a fact's name says its stage (``system.*`` Nsight Systems, ``ncu.*``
Nsight Compute, the rest the framework profile).
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from advisor.errors import ExpressionError
from advisor.expr.expression import Absent, Environment

if TYPE_CHECKING:
    from advisor.engine.evaluate import Diagnosis, Outcome
    from advisor.engine.rule import Rule

__all__ = ["STAGE_ORDER", "STAGE_TOOLS", "attach_files", "combined_gain", "fact_stage", "measured_base_ms", "refine",
           "stages_of"]

STAGE_ORDER = ("framework", "system", "kernel")
STAGE_TOOLS = {"framework": "PyTorch Profiler", "system": "Nsight Systems", "kernel": "Nsight Compute"}
_PREFIXES = {"system": "system", "ncu": "kernel"}


def fact_stage(name: str) -> str:
    """The stage whose analyzers measure a fact, from its name."""
    return _PREFIXES.get(name.split(".", 1)[0], "framework")


def stages_of(names: Iterable[str], own: str) -> list[str]:
    """The stages of the facts a rule reads (and its own stage), in workflow order."""
    found = {fact_stage(n) for n in names} | {own}
    return [s for s in STAGE_ORDER if s in found]


# refinement ---------------------------------------------------------------------
def _section(d: Diagnosis, rule: Rule) -> dict[str, Any]:
    reads = sorted(n for n in rule.compiled().references() if fact_stage(n) == d.stage)
    return {"rule_id": d.rule_id, "name": d.name, "stage": d.stage, "tool": STAGE_TOOLS.get(d.stage, d.stage),
            "severity": d.severity, "impact_ms": d.impact_ms, "what": d.what, "where": d.where, "why": d.why,
            "fix": d.fix, "evidence": d.evidence, "facts": {k: v for k, v in d.facts.items()
                                                           if fact_stage(k) == d.stage}, "reads": reads, "files": []}


def _holds(rule: Rule, target: Diagnosis, env: Environment) -> bool:
    """Whether the rule's ``refines`` entry for ``target`` holds on this run."""
    compiled = rule.compiled()
    refined: dict[str, Any] = {"refined.rule_id": target.rule_id, "refined.kernels": list(target.kernels)}
    if target.phase is not None:
        refined["refined.phase"] = target.phase
    scope = Environment(ChainMap(refined, env.values))  # type: ignore[arg-type]
    for entry, expr in zip(rule.refines, compiled.refines):
        if entry.rule != target.rule_id:
            continue
        try:
            return bool(expr.evaluate(scope))
        except (Absent, ExpressionError):
            return False
    return False


def refine(diagnoses: list[Diagnosis], outcomes: list[Outcome], rules: Mapping[str, Rule],
           env: Environment) -> list[Diagnosis]:
    """Fold each deeper diagnosis that explains an earlier one into it; the others are kept, in order."""
    by_id = {d.rule_id: d for d in diagnoses}
    host: dict[str, Diagnosis] = {}  # rule id -> the diagnosis it is now shown in
    deeper = sorted((d for d in diagnoses if rules.get(d.rule_id) and rules[d.rule_id].refines),
                    key=lambda d: STAGE_ORDER.index(d.stage) if d.stage in STAGE_ORDER else 0)
    for d in deeper:
        rule = rules[d.rule_id]
        for entry in rule.refines:
            target = by_id.get(entry.rule)
            if target is None or target is d or STAGE_ORDER.index(target.stage) >= STAGE_ORDER.index(d.stage):
                continue
            if not _holds(rule, target, env):
                continue
            into = host.get(target.rule_id, target)
            _fold(d, rule, into, host)
            _note(outcomes, d.rule_id, f"explains {target.rule_id}: shown inside it as its "
                                       f"{'how (system)' if d.stage == 'system' else 'why (kernel)'}")
            break
    return [d for d in diagnoses if d.rule_id not in host]


def _fold(d: Diagnosis, rule: Rule, into: Diagnosis, host: dict[str, Diagnosis]) -> None:
    into.refinements.append(_section(d, rule))
    into.refinements.extend(d.refinements)  # what already refined d comes along
    into.stages = [s for s in STAGE_ORDER if s in {*into.stages, *d.stages}]
    if into.impact_ms is None and d.impact_ms is not None:  # the deeper stage estimated what the first could not
        into.impact_ms, into.impact_basis = d.impact_ms, d.impact_basis
    host[d.rule_id] = into
    for rid, h in list(host.items()):
        if h is d:
            host[rid] = into


def _note(outcomes: list[Outcome], rule_id: str, reason: str) -> None:
    for outcome in outcomes:
        if outcome.rule_id == rule_id:
            outcome.reason = reason


def attach_files(diagnoses: Sequence[Diagnosis], evidence: Mapping[str, str | None]) -> None:
    """Each section's ``files``: the raw files its stage's facts were measured in (fact name -> file), those of
    the tables it read (``reads``: ncu.kernels) included."""
    for d in diagnoses:
        for section in d.refinements:
            names = {*section["facts"], *section.get("reads", [])}
            files = {evidence[n] for n in names if evidence.get(n)}
            section["files"] = sorted(f for f in files if f)


# gains that add up ----------------------------------------------------------------
def _combine(gains: Iterable[float], total: float) -> float:
    """What gains acting on the same ``total`` ms give back together: each takes its share of what is left."""
    gains = [min(max(g, 0.0), total) for g in gains]
    left = 1.0
    for g in gains:
        left *= 1.0 - g / total
    # never below the largest gain alone, which the product's rounding can otherwise undercut by an ulp
    return max(total * (1.0 - left), max(gains, default=0.0))


def combined_gain(diagnoses: Sequence[Any], facts: Mapping[str, Any]) -> float | None:
    """The time per step all the diagnoses' fixes give back together, at most the step time (see the module
    docstring); None when no diagnosis estimates a gain. ``diagnoses`` are Diagnosis objects or their dicts."""
    step = _number(facts.get("steps.time_ms")) or _number(facts.get("system.steps.time_ms"))
    rows = _tried_together([d if isinstance(d, Mapping) else d.to_dict() for d in diagnoses], facts)
    gains = [(r.get("phase"), _recorded_ms(r, step)) for r in rows if isinstance(r.get("impact_ms"), (int, float))]
    if not gains:
        return None
    if not step:
        return sum(g for _, g in gains)  # no step to bound them by: each is already its own estimate
    by_phase: dict[str, list[float]] = {}
    whole: list[float] = []
    for phase, gain in gains:
        length = _number(facts.get(f"phases.{phase}.ms")) if phase else None
        (by_phase.setdefault(str(phase), []) if length else whole).append(gain)
    phased = sum(_combine(g, float(facts[f"phases.{p}.ms"])) for p, g in by_phase.items())
    return _combine([min(phased, step), *whole], step)


def measured_base_ms(diagnosis: Any) -> float | None:
    """The step a diagnosis's gain was measured on, as the script runs it, where the trial measured it (None for
    an estimate, made on the recorded step). ``diagnosis``: a Diagnosis or its dict."""
    get = diagnosis.get if isinstance(diagnosis, Mapping) else lambda key: getattr(diagnosis, key, None)
    if get("gain_source") != "trial":
        return None
    return _number((get("measured") or {}).get("base_ms"))


def _recorded_ms(row: Mapping[str, Any], step: float | None) -> float:
    """A diagnosis's gain on the recorded step, as the estimates are made: a gain the trial measured on the steps
    as the script runs them is taken as the same share of the recorded step."""
    gain = float(row["impact_ms"])
    base = measured_base_ms(row)
    return gain / base * step if base and step else gain


def _tried_together(rows: list[Mapping[str, Any]], facts: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Where the trial stage tried the settings of several diagnoses together, their combined gain is that
    measure, not a combination of their separate gains: those diagnoses count as one, of the measured gain."""
    tried = {r.get("knob"): r for r in rows if r.get("gain_source") == "trial" and r.get("knob")}
    for result in facts.get("trial.results") or []:
        knobs = str(result.get("knob", "")).split("+") if isinstance(result, Mapping) else []
        if len(knobs) >= 2 and all(k in tried for k in knobs) and isinstance(result.get("gain_ms"), (int, float)):
            together = {id(tried[k]) for k in knobs}
            return [r for r in rows if id(r) not in together] + [{
                "impact_ms": max(float(result["gain_ms"]), 0.0), "gain_source": "trial", "measured": result}]
    return rows


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None
