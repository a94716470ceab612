"""A rule as the engine reads it: plain objects, built from data the schema validated.

:mod:`advisor.engine.schema` (pydantic) says what a rule file may hold and
refuses anything else; these classes hold a rule that passed it, with the
same fields. They are kept apart so that a run whose rule files were all
validated before (see :mod:`advisor.engine.rulebook`) never imports pydantic,
some 100-150 ms of imports and model building on every command that loads the
rules. :meth:`Rule.from_dict` builds a rule from the schema's dump of it,
whether that dump was made just now or read back from the cache.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any, Union

from advisor.expr.expression import Expression, compile_expression
from advisor.expr.template import Template

__all__ = ["PHASE_NAME", "REFINED_NAMES", "SEVERITIES", "CompiledRule", "Impact", "Refinement", "Rule", "RuleTest",
           "Severity", "SeverityTier"]

#: a phase named as it is (no dot, so no fact): dataloader, forward, backward, optimizer, other
PHASE_NAME = re.compile(r"^[a-z][a-z_]*$")

#: what a ``refines.when`` condition can read besides the facts: the refined diagnosis
REFINED_NAMES = {"refined.phase": "the phase the refined diagnosis's gain comes from (its impact.phase)",
                 "refined.rule_id": "the id of the refined diagnosis's rule",
                 "refined.kernels": "the kernels the refined diagnosis names (its `kernels`: the trace's names)"}


class Severity(str, Enum):
    info = "info"
    low = "low"
    medium = "medium"
    high = "high"
    critical = "critical"

    @property
    def rank(self) -> int:
        return SEVERITIES.index(self.value)


SEVERITIES = [s.value for s in Severity]


@dataclass
class SeverityTier:
    level: Severity
    when: str = "true"


@dataclass
class Impact:
    ms_per_step: str
    basis: str
    confidence: str = "medium"
    #: the phase of the step the gain comes from (dataloader, forward, backward, optimizer, other), or an
    #: expression naming it: gains of one phase are combined within that phase's time (advisor.engine.story)
    phase: str | None = None


@dataclass
class Refinement:
    """A deeper-stage rule explains an earlier diagnosis: it is shown inside that diagnosis, not beside it."""

    rule: str
    when: str = "true"


@dataclass
class RuleTest:
    """One test case: fact values, and what the rule must conclude from them."""

    name: str
    expect: str
    facts: dict[str, Any] = field(default_factory=dict)
    severity: Severity | None = None
    impact_ms: float | None = None
    #: the rule whose diagnosis this case's diagnosis refines ("" for none); ``refined.*`` may be given in facts
    refines: str | None = None


@dataclass
class Rule:
    """A validated rule (the fields of :class:`advisor.engine.schema.Rule`); see :meth:`compiled`."""

    id: str
    name: str = ""
    status: str = "stable"
    stage: str = "framework"
    severity: Union[Severity, list[SeverityTier]] = Severity.medium
    when: str = "false"
    impact: Impact | None = None
    what: str = ""
    where: str = ""
    why: str = ""
    fix: str = ""
    fix_code: str = ""
    escalate: str | None = None
    #: the setting the trial stage tries for this rule's fix (a name of advisor.knobs.KNOBS; ``try:`` in YAML)
    trial: str | None = None
    refines: list[Refinement] = field(default_factory=list)
    #: the kernels the diagnosis names (a list of kernel names, or of rows with ``name``/``kernel``): what the
    #: kernel stage is asked about, and what its diagnoses refine; without it, the evidence's ``kernel`` column
    kernels: str | None = None
    evidence: str | None = None
    knowledge: list[str] = field(default_factory=list)
    references: list[str] = field(default_factory=list)
    tests: list[RuleTest] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rule:
        """The rule of the schema's dump (every field present, enums as their values)."""
        data = dict(data)
        severity = data["severity"]
        data["severity"] = (Severity(severity) if isinstance(severity, str)
                            else [SeverityTier(Severity(t["level"]), t["when"]) for t in severity])
        data["impact"] = Impact(**data["impact"]) if data["impact"] is not None else None
        data["refines"] = [Refinement(**r) for r in data["refines"]]
        data["tests"] = [RuleTest(**{**t, "severity": Severity(t["severity"]) if t["severity"] else None})
                         for t in data["tests"]]
        return cls(**data)

    # compiled parts, cached on first use ---------------------------------------
    def compiled(self) -> CompiledRule:
        cached = self.__dict__.get("_compiled")
        if cached is None:
            cached = CompiledRule(self)
            self.__dict__["_compiled"] = cached
        return cached

    @property
    def base_severity(self) -> Severity:
        if isinstance(self.severity, Severity):
            return self.severity
        return max((t.level for t in self.severity), key=lambda s: s.rank)


class CompiledRule:
    """The parsed expressions and templates of one rule, each parsed when first read: a run evaluates every
    rule's ``when`` and most stay quiet, so their impact, tiers and texts are never needed (about half the
    time the rules took on a small trace went to parsing texts that were never rendered)."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule

    @cached_property
    def when(self) -> Expression:
        return compile_expression(self.rule.when)

    @cached_property
    def impact(self) -> Expression | None:
        return compile_expression(self.rule.impact.ms_per_step) if self.rule.impact else None

    @cached_property
    def phase(self) -> Expression | None:
        phase = self.rule.impact.phase if self.rule.impact else None
        if phase and PHASE_NAME.match(phase):  # a bare name is the phase itself: `phase: dataloader`
            phase = f'"{phase}"'
        return compile_expression(phase) if phase else None

    @cached_property
    def refines(self) -> list[Expression]:
        return [compile_expression(r.when) for r in self.rule.refines]

    @cached_property
    def evidence(self) -> Expression | None:
        return compile_expression(self.rule.evidence) if self.rule.evidence else None

    @cached_property
    def kernels(self) -> Expression | None:
        return compile_expression(self.rule.kernels) if self.rule.kernels else None

    @cached_property
    def tiers(self) -> list[tuple[Severity, Expression]]:
        severity = self.rule.severity
        return [(t.level, compile_expression(t.when)) for t in severity] if isinstance(severity, list) else []

    @cached_property
    def texts(self) -> dict[str, Template]:
        return {f: Template(getattr(self.rule, f)) for f in ("what", "where", "why", "fix")}

    def expressions(self) -> Iterator[tuple[tuple[Any, ...], Expression]]:
        """Every expression of the rule, with the path of the field that holds it (for lint messages)."""
        yield ("when",), self.when
        for i, (_, expr) in enumerate(self.tiers):
            yield ("severity", i, "when"), expr
        if self.impact is not None:
            yield ("impact", "ms_per_step"), self.impact
        if self.phase is not None:
            yield ("impact", "phase"), self.phase
        for i, expr in enumerate(self.refines):
            yield ("refines", i, "when"), expr
        if self.evidence is not None:
            yield ("evidence",), self.evidence
        if self.kernels is not None:
            yield ("kernels",), self.kernels
        for name, template in self.texts.items():
            for expr in template.expressions():
                yield (name,), expr

    def references(self) -> set[str]:
        """Every fact name the rule reads."""
        names = set(self.when.references())
        for expr in (self.impact, self.phase, self.evidence, self.kernels, *(e for _, e in self.tiers)):
            if expr is not None:
                names |= expr.references()
        for template in self.texts.values():
            names |= template.references()
        return names
