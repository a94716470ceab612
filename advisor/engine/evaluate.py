"""Evaluating rules over findings: which fire, and the diagnoses they make.

For each active rule:

- ``when`` is evaluated over the findings. A fact the run lacks makes the
  rule *not applicable* (recorded with the missing name), never an error.
- When it fires, the severity tiers pick a level, ``impact.ms_per_step``
  gives the time per step the fix should give back (clamped to the step
  time, and to zero from below), the texts are rendered with the run's
  numbers, and ``evidence`` (a list of records) is attached. ``impact.phase``
  names the phase the gain comes from; ``stages`` lists the stages whose
  facts the diagnosis read.
- A deeper-stage diagnosis whose ``refines`` names an earlier diagnosis of
  this run, with its condition true, becomes a section of that diagnosis
  instead of an entry of its own (:mod:`advisor.engine.story`).

An expression that fails on this run's values (a type error, say) is an
``error`` outcome with the message: the run goes on and the report shows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from advisor.engine.rulebook import LoadedRule
from advisor.engine.rule import Rule, Severity
from advisor.engine.story import measured_base_ms, refine, stages_of
from advisor.errors import ExpressionError
from advisor.expr.expression import Absent, Environment

__all__ = ["Diagnosis", "Outcome", "evaluate_rule", "evaluate_rules"]

MAX_EVIDENCE_ROWS = 20


@dataclass
class Diagnosis:
    """A rule that fired, rendered with the run's numbers."""

    rule_id: str
    name: str
    stage: str
    severity: str
    impact_ms: float | None
    confidence: str
    impact_basis: str
    what: str
    where: str
    why: str
    fix: str
    fix_code: str = ""
    escalate: str | None = None
    phase: str | None = None
    kernels: list[str] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)
    refinements: list[dict[str, Any]] = field(default_factory=list)
    knowledge: list[str] = field(default_factory=list)
    references: list[str] = field(default_factory=list)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    status: str = "stable"
    source: str = ""
    #: the setting the trial stage tries for this fix (the rule's ``try``), and what the trial measured: the
    #: row of ``trial.results`` (gain_ms, spread_ms, pairs, base_ms, tried_ms, line, numerics)
    knob: str | None = None
    measured: dict[str, Any] | None = None
    #: the rule's formula, kept where a trial measured the gain (``impact_ms`` is then the measured gain)
    estimate_ms: float | None = None
    #: where ``impact_ms`` comes from: "estimate" (the rule's formula) or "trial" (measured on the user's steps)
    gain_source: str = "estimate"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Diagnosis:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def severity_rank(self) -> int:
        return Severity(self.severity).rank


@dataclass
class Outcome:
    """What happened to one rule on this run: fired, quiet, not_applicable or error."""

    rule_id: str
    result: str
    reason: str = ""


def _env(values: Mapping[str, Any]) -> Environment:
    return values if isinstance(values, Environment) else Environment(values)


def evaluate_rule(loaded: LoadedRule | Rule, values: Mapping[str, Any] | Environment,
                  step_ms: float | None = None) -> tuple[Outcome, Diagnosis | None]:
    rule = loaded.rule if isinstance(loaded, LoadedRule) else loaded
    source = str(loaded.path) if isinstance(loaded, LoadedRule) else ""
    env = _env(values)
    compiled = rule.compiled()
    try:
        fired = bool(compiled.when.evaluate(env))
    except Absent as missing:
        return Outcome(rule.id, "not_applicable", f"needs `{missing.name}`"), None
    except ExpressionError as exc:
        return Outcome(rule.id, "error", f"`when`: {exc.message}"), None
    if not fired:
        return Outcome(rule.id, "quiet"), None
    references = compiled.references()
    diagnosis = Diagnosis(
        rule_id=rule.id, name=rule.name, stage=rule.stage, severity=_severity(rule, env),
        impact_ms=_impact(compiled.impact, env, step_ms), confidence=rule.impact.confidence if rule.impact else "low",
        impact_basis=rule.impact.basis if rule.impact else "",
        **{k: t.render(env) for k, t in compiled.texts.items()},
        fix_code=rule.fix_code.strip("\n"), escalate=rule.escalate, phase=_phase(compiled.phase, env),
        stages=stages_of(references, rule.stage), knowledge=list(rule.knowledge),
        references=list(rule.references), evidence=_evidence(compiled.evidence, env),
        facts=_facts_used(references, env), status=rule.status, source=source,
    )
    diagnosis.kernels = _kernels(compiled.kernels, env, diagnosis.evidence)
    if rule.trial:
        _measured(diagnosis, rule.trial, env, step_ms)
    return Outcome(rule.id, "fired"), diagnosis


def _measured(diagnosis: Diagnosis, knob: str, env: Environment, step_ms: float | None) -> None:
    """Where the trial stage tried the rule's setting, its measured gain is the diagnosis's figure (a gain
    measured on the user's steps beats a formula), the formula's kept beside it."""
    diagnosis.knob = knob
    try:
        rows, rest = env.resolve(("trial", "results"))
    except Absent:
        return
    row = next((r for r in rows or [] if isinstance(r, dict) and r.get("knob") == knob), None) if not rest else None
    if row is None or not isinstance(row.get("gain_ms"), (int, float)):
        return
    diagnosis.measured = dict(row)
    diagnosis.estimate_ms = diagnosis.impact_ms
    gain = max(float(row["gain_ms"]), 0.0)
    diagnosis.impact_ms = min(gain, step_ms) if step_ms else gain
    diagnosis.gain_source = "trial"


def _severity(rule: Rule, env: Environment) -> str:
    if isinstance(rule.severity, Severity):
        return rule.severity.value
    for level, expr in rule.compiled().tiers:
        try:
            if expr.evaluate(env):
                return level.value
        except (Absent, ExpressionError):
            continue
    return min((t.level for t in rule.severity), key=lambda s: s.rank).value


def _value(expr: Any, env: Environment) -> Any:
    """The expression's value, or None when there is none or it cannot be evaluated on these facts."""
    if expr is None:
        return None
    try:
        return expr.evaluate(env)
    except (Absent, ExpressionError):
        return None


def _impact(expr: Any, env: Environment, step_ms: float | None) -> float | None:
    value = _value(expr, env)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    value = max(float(value), 0.0)
    return min(value, step_ms) if step_ms else value


def _phase(expr: Any, env: Environment) -> str | None:
    value = _value(expr, env)
    return value if isinstance(value, str) and value else None


def _evidence(expr: Any, env: Environment) -> list[dict[str, Any]]:
    value = _value(expr, env)
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return []
    return [row for row in value[:MAX_EVIDENCE_ROWS] if isinstance(row, dict)]


def _kernels(expr: Any, env: Environment, evidence: list[dict[str, Any]]) -> list[str]:
    """The kernels a diagnosis names: its rule's ``kernels`` (names, or rows with ``name``/``kernel``), else
    the evidence's ``kernel`` column; in order, once each."""
    value = _value(expr, env) if expr is not None else [r for r in evidence if r.get("kernel")]
    if isinstance(value, (str, dict)):
        value = [value]
    names = []
    for item in value if isinstance(value, list) else []:
        name = item.get("kernel") or item.get("name") if isinstance(item, dict) else item
        if isinstance(name, str) and name:
            names.append(name)
    return list(dict.fromkeys(names))


def _facts_used(names: Iterable[str], env: Environment) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in sorted(names):
        try:
            value, rest = env.resolve(tuple(name.split(".")))
        except Absent:
            continue
        key = name if not rest else name[: len(name) - len(".".join(rest)) - 1]
        if not isinstance(value, list):
            out[key] = value
    return out


def evaluate_rules(rules: Iterable[LoadedRule], values: Mapping[str, Any],
                   step_ms: float | None = None) -> tuple[list[Diagnosis], list[Outcome]]:
    """Evaluate every rule; diagnoses come ranked by the time they should give back, then severity, with
    the deeper-stage diagnoses that refine an earlier one folded into it."""
    env = Environment(values)
    rules = list(rules)
    diagnoses: list[Diagnosis] = []
    outcomes: list[Outcome] = []
    for loaded in rules:
        outcome, diagnosis = evaluate_rule(loaded, env, step_ms)
        outcomes.append(outcome)
        if diagnosis is not None:
            diagnoses.append(diagnosis)
    # a deeper stage that explains an earlier diagnosis is told inside it, not beside it
    diagnoses = refine(diagnoses, outcomes, {r.rule.id: r.rule for r in rules}, env)
    diagnoses.sort(key=lambda d: (-gain_share(d, step_ms), -d.severity_rank, d.rule_id))
    return diagnoses, outcomes


def gain_share(diagnosis: Diagnosis, step_ms: float | None) -> float:
    """The share of the step a diagnosis's fix gives back, what diagnoses are ranked by: a gain the trial measured
    on the steps as the script runs them, over that step; an estimate, over the recorded step it was made on (the
    profiler can make that several times longer, so milliseconds of the two kinds do not compare)."""
    gain = diagnosis.impact_ms or 0.0
    base = measured_base_ms(diagnosis) if diagnosis.gain_source == "trial" else step_ms
    return gain / base if base else gain
