"""The published JSON Schemas of ``findings.json`` and ``diagnoses.json``, for machines that read runs.

The models here describe the files exactly as :mod:`advisor.pipeline` writes
them (from :class:`~advisor.analyze.findings.Findings` and
:class:`~advisor.engine.evaluate.Diagnosis`); the schemas in
``docs/schema/`` are generated from them::

    python -m advisor.report.schemas docs/schema

A test checks that the committed files equal the generated ones, that the
models' fields match the dataclasses, and that real runs validate.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from advisor.analyze.findings import UNITS

__all__ = ["SCHEMAS", "DiagnosesFile", "FindingsFile", "schema_text", "write_schemas"]

Unit = Literal[tuple(UNITS)]  # type: ignore[valid-type]
Severity = Literal["info", "low", "medium", "high", "critical"]
FACT_NAME = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$"
Scalar = Union[bool, int, float, str, None]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Fact(_Strict):
    """One measured fact: a scalar, or an evidence table (a list of records)."""

    name: str = Field(pattern=FACT_NAME, description="dotted name, e.g. phases.dataloader.ms or ops.top")
    value: Union[Scalar, list[dict[str, Any]], list[Any]] = Field(
        description="the value in `unit`; a list of records when the unit is `table`; null when not finite")
    unit: Unit = Field(description="ms, us, s, fraction (0..1), count, bytes, GB/s, bool, text, ratio or table")
    source: str = Field(description="the analyzer that measured it")
    evidence: Optional[str] = Field(None, description="the trace or report file it was measured in")


class FindingsFile(_Strict):
    """findings.json: every fact the analyzers measured in one run."""

    model_config = ConfigDict(extra="forbid", title="advisor findings.json")

    facts: list[Fact]
    skipped: dict[str, str] = Field(description="analyzer name -> why it was skipped")
    notes: list[str] = Field(description="remarks on the analysis (e.g. which rank was analysed)")


class Verdict(_Strict):
    status: Literal["slow", "healthy", "inconclusive"]
    headline: str
    missing: list[str] = Field(description="what the data could not support; empty when nothing is missing")
    combined_impact_ms: Optional[float] = Field(
        description="the time per step all the fixes give back together, overlapping gains counted once; at most "
                    "the step time; null when no diagnosis estimates a gain")


Stage = Literal["framework", "system", "kernel"]


class Refinement(_Strict):
    """A deeper stage's diagnosis that explains this one, shown inside it (its how or why)."""

    rule_id: str = Field(pattern=r"^[A-Z]{2,6}\d{3}$")
    name: str
    stage: Stage
    tool: str = Field(description="the tool of that stage, e.g. Nsight Systems")
    severity: Severity
    impact_ms: Optional[float] = Field(description="that rule's own estimate; not added to the combined gain")
    what: str
    where: str
    why: str
    fix: str
    evidence: list[dict[str, Any]] = Field(description="evidence rows (records), at most 20")
    facts: dict[str, Any] = Field(description="the facts of that stage the rule read, with this run's values")
    reads: list[str] = Field(description="the facts of that stage the rule read, its tables included (ncu.kernels)")
    files: list[str] = Field(description="the raw files those facts were measured in")


class Diagnosis(_Strict):
    """A rule that fired, rendered with the run's numbers."""

    rule_id: str = Field(pattern=r"^[A-Z]{2,6}\d{3}$")
    name: str = Field(description="kebab-case name of the problem")
    stage: Literal["framework", "system", "kernel"]
    severity: Severity
    impact_ms: Optional[float] = Field(description="time per step the fix gives back, measured by the trial "
                                                   "(gain_source trial) or estimated; null if unknown")
    confidence: Literal["low", "medium", "high"]
    impact_basis: str = Field(description="how the gain was estimated")
    what: str
    where: str = Field(description="file:line (function), module, kernel or phase")
    why: str
    fix: str
    fix_code: str = Field(description="a code snippet of the fix; empty when none")
    escalate: Optional[Literal["nsys", "ncu"]] = Field(description="the next stage this diagnosis asks for")
    phase: Optional[str] = Field(description="the phase of the step the gain comes from (impact.phase); null when "
                                             "the gain is not tied to one phase")
    kernels: list[str] = Field(description="the kernels it names, as the framework trace names them (its rule's "
                               "`kernels`, or its evidence's kernel column): what the kernel stage is asked about")
    stages: list[Stage] = Field(description="the stages whose findings it uses, in workflow order")
    refinements: list[Refinement] = Field(description="deeper stages' diagnoses that explain this one, in stage "
                                                       "order")
    knowledge: list[str] = Field(description="ids of knowledge entries (knowledge/<id>.md)")
    references: list[str]
    evidence: list[dict[str, Any]] = Field(description="evidence rows (records), at most 20")
    facts: dict[str, Any] = Field(description="the facts the rule read, by name, with this run's values")
    status: Literal["preview", "stable", "deprecated", "disabled"]
    source: str = Field(description="the rule file")
    knob: Optional[str] = Field(description="the setting the trial stage tries for this fix (the rule's `try`)")
    measured: Optional[dict[str, Any]] = Field(
        description="what the trial measured on the script's steps: its row of the fact trial.results (gain_ms, "
                    "spread_ms, pairs, base_ms, tried_ms, share, steps, clear, line, numerics); null if not tried")
    estimate_ms: Optional[float] = Field(description="the rule's own estimate, where a trial measured the gain")
    gain_source: Literal["estimate", "trial"] = Field(
        description="where impact_ms comes from: the rule's estimate, or the trial's measured gain")


class Outcome(_Strict):
    rule_id: str
    result: Literal["fired", "quiet", "not_applicable", "error"]
    reason: str = Field(description="why not applicable (the missing fact) or the error; empty otherwise")


class DiagnosesFile(_Strict):
    """diagnoses.json: the verdict, the diagnoses ranked by the time they give back, and every rule's outcome."""

    model_config = ConfigDict(extra="forbid", title="advisor diagnoses.json")

    verdict: Verdict
    diagnoses: list[Diagnosis]
    outcomes: list[Outcome]


SCHEMAS: dict[str, type[BaseModel]] = {"findings.schema.json": FindingsFile,
                                       "diagnoses.schema.json": DiagnosesFile}


def schema_text(name: str) -> str:
    """The JSON Schema (draft 2020-12) ``name``, as the text committed under docs/schema/."""
    schema = SCHEMAS[name].model_json_schema()
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": name, **schema}
    return json.dumps(schema, indent=2, sort_keys=False) + "\n"


def write_schemas(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in SCHEMAS:
        path = folder / name
        path.write_text(schema_text(name), encoding="utf-8")
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write_schemas(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/schema")):
        print(written)
