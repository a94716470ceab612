"""The rule file schema.

One rule per YAML file, ``rules/<stage>/<ID>-<name>.yaml``::

    id: DL001                       # category prefix + number
    name: dataloader-starvation     # kebab-case, names the problem, not the fix
    status: stable                  # preview | stable | deprecated | disabled
    stage: framework                # framework | system | kernel
    severity: high                  # or tiers: [{level: high, when: "..."}, {level: medium}]
    when: phases.dataloader.share >= 0.25
    impact:
      ms_per_step: phases.dataloader.ms * 0.8
      basis: workers overlap loading with compute; most of the wait goes away
      confidence: medium            # low | medium | high
      phase: dataloader             # optional: the phase of the step the gain comes from
    what: "The training loop waits {{ ms(phases.dataloader.ms) }} per step for data."
    where: "{{ dataloader.site }}"
    why: ...
    fix: ...
    fix_code: |                     # optional snippet, shown as code
      DataLoader(ds, num_workers=4, pin_memory=True, persistent_workers=True)
    escalate: nsys                  # optional: nsys | ncu
    try: intra_op_threads           # optional: the setting the trial stage tries on the user's steps
    kernels: "[k.name for k in kernels.top if k.share >= 0.05]"  # optional: the kernels this diagnosis names
    refines:                        # optional, deeper stages: the earlier diagnosis this one explains
      - {rule: DL001, when: 'system.osrt.main_top_phase == refined.phase'}
    evidence: lines.top             # optional: a list-valued expression shown as a table
    knowledge: [dataloader-starvation]
    references: [https://pytorch.org/docs/stable/data.html]
    tests:
      - {name: starved, expect: fires, facts: {phases.dataloader.share: 0.25, ...}}
      - {name: fed, expect: quiet, facts: {phases.dataloader.share: 0.2499, ...}}

Texts are templates: ``{{ expr }}`` is an expression of the rule language,
formatted with ``ms()``, ``pct()``, ``num()`` or ``size()``. A user file with
only ``id`` and ``status: disabled`` switches a built-in rule off.

These pydantic models only check a file's data; the engine reads the plain
:mod:`advisor.engine.rule` objects built from their dump, and data checked
once is kept (see :mod:`advisor.engine.rulebook`), so pydantic is imported
only for a rule text not seen before.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from advisor.engine.rule import REFINED_NAMES, SEVERITIES, Severity
from advisor.errors import ExpressionError
from advisor.expr.expression import compile_expression
from advisor.expr.template import Template

__all__ = ["REFINED_NAMES", "SEVERITIES", "Impact", "Refinement", "Rule", "RuleTest", "Severity", "SeverityTier",
           "dump"]

ID_PATTERN = re.compile(r"^[A-Z]{2,6}\d{3}$")
URL_PATTERN = re.compile(r"^https?://\S+$")
NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def _expression(value: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be an expression (text), not {type(value).__name__}")
    try:
        compile_expression(value)
    except ExpressionError as exc:
        raise ValueError(f"is not a valid expression: {exc.message}") from None
    return value


class SeverityTier(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: Severity
    when: str = "true"

    _check = field_validator("when")(classmethod(lambda cls, v: _expression(v)))


class Impact(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ms_per_step: str
    basis: str = Field(min_length=1)
    confidence: Literal["low", "medium", "high"] = "medium"
    #: the phase of the step the gain comes from (dataloader, forward, backward, optimizer, other), or an
    #: expression naming it: gains of one phase are combined within that phase's time (advisor.engine.story)
    phase: str | None = None

    _check = field_validator("ms_per_step", "phase")(
        classmethod(lambda cls, v: None if v is None else _expression(v)))


class Refinement(BaseModel):
    """A deeper-stage rule explains an earlier diagnosis: it is shown inside that diagnosis, not beside it."""

    model_config = ConfigDict(extra="forbid")
    rule: str
    when: str = "true"

    _check = field_validator("when")(classmethod(lambda cls, v: _expression(v)))

    @field_validator("rule")
    @classmethod
    def _rule(cls, v: str) -> str:
        if not ID_PATTERN.match(v):
            raise ValueError("must be the id of the rule it refines, like DL001")
        return v


class RuleTest(BaseModel):
    """One test case: fact values, and what the rule must conclude from them."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    expect: Literal["fires", "quiet", "not_applicable"]
    facts: dict[str, Any] = Field(default_factory=dict)
    severity: Severity | None = None
    impact_ms: float | None = None
    #: the rule whose diagnosis this case's diagnosis refines ("" for none); ``refined.*`` may be given in facts
    refines: str | None = None

    @model_validator(mode="after")
    def _only_when_firing(self) -> RuleTest:
        given = [f for f in ("severity", "impact_ms", "refines") if getattr(self, f) is not None]
        if given and self.expect != "fires":
            raise ValueError(f"`{given[0]}` can only be checked in a case that fires")
        return self


def _severity_kind(value: Any) -> str:
    return "tiers" if isinstance(value, list) else "level"


#: one level, or tiers: [{level: high, when: "..."}, {level: medium}]; the tag keeps errors about one branch
SeveritySpec = Annotated[
    Union[Annotated[Severity, Tag("level")], Annotated[list[SeverityTier], Tag("tiers")]],
    Discriminator(_severity_kind),
]


class Rule(BaseModel):
    """A rule file's data, checked: expressions and templates are parsed on validation. The engine reads the
    :class:`advisor.engine.rule.Rule` built from its :func:`dump`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: str
    name: str = ""
    status: Literal["preview", "stable", "deprecated", "disabled"] = "stable"
    stage: Literal["framework", "system", "kernel"] = "framework"
    severity: SeveritySpec = Severity.medium
    when: str = "false"
    impact: Impact | None = None
    what: str = ""
    where: str = ""
    why: str = ""
    fix: str = ""
    fix_code: str = ""
    escalate: Literal["nsys", "ncu"] | None = None
    #: the setting the trial stage tries for the fix (advisor.knobs); ``try`` is a Python keyword
    trial: str | None = Field(None, alias="try")
    refines: list[Refinement] = Field(default_factory=list)
    #: the kernels the diagnosis names (a list of kernel names, or of rows with ``name``/``kernel``): what the
    #: kernel stage is asked about, and what its diagnoses refine; without it, the evidence's ``kernel`` column
    kernels: str | None = None
    evidence: str | None = None
    knowledge: list[str] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)
    tests: list[RuleTest] = Field(default_factory=list)

    @field_validator("severity", mode="before")
    @classmethod
    def _severity(cls, v: Any) -> Any:
        if isinstance(v, list) and not v:
            raise ValueError("needs at least one {level, when} tier")
        if not isinstance(v, (str, list)):
            raise ValueError(f"must be one of {', '.join(SEVERITIES)}, or a list of {{level, when}} tiers")
        return v

    @field_validator("trial")
    @classmethod
    def _knob(cls, v: str | None) -> str | None:
        from advisor.knobs import KNOBS

        if v is not None and v not in KNOBS:
            raise ValueError(f"names a setting the trial stage knows, one of {', '.join(KNOBS)}; not {v!r}")
        return v

    @field_validator("refines", mode="before")
    @classmethod
    def _one_or_more(cls, v: Any) -> Any:
        return [v] if isinstance(v, dict) else v

    @field_validator("knowledge")
    @classmethod
    def _knowledge(cls, v: list[str]) -> list[str]:
        for entry in v:
            if not NAME_PATTERN.match(entry):
                raise ValueError(f"names knowledge entries by id (kebab-case, like dataloader-starvation), "
                                 f"not {entry!r}")
        return v

    @field_validator("references")
    @classmethod
    def _references(cls, v: list[str]) -> list[str]:
        for url in v:
            if not URL_PATTERN.match(url):
                raise ValueError(f"must be http(s) links, not {url!r}")
        return v

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not ID_PATTERN.match(v):
            raise ValueError("must be a category prefix of 2-6 capitals and 3 digits, like DL001")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if v and not NAME_PATTERN.match(v):
            raise ValueError("must be kebab-case, like dataloader-starvation")
        return v

    @field_validator("when", "evidence", "kernels")
    @classmethod
    def _expr(cls, v: str | None) -> str | None:
        return None if v is None else _expression(v)

    @field_validator("what", "where", "why", "fix")
    @classmethod
    def _template(cls, v: str) -> str:
        try:
            Template(v)
        except ExpressionError as exc:
            raise ValueError(f"has a bad hole {exc.message}") from None
        return v

    @model_validator(mode="after")
    def _complete(self) -> Rule:
        if self.status == "disabled":
            return self
        missing = [f for f in ("name", "what", "fix") if not getattr(self, f)]
        if self.when == "false":
            missing.insert(0, "when")
        if self.impact is None:
            missing.append("impact")
        if missing:
            raise ValueError(f"an enabled rule needs {', '.join(f'`{m}`' for m in missing)}")
        return self


def dump(rule: Rule) -> dict[str, Any]:
    """A validated rule as plain data (every field, enums as their values): what
    :meth:`advisor.engine.rule.Rule.from_dict` builds the engine's rule from, and what the cache keeps."""
    return _plain(rule.model_dump())


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
