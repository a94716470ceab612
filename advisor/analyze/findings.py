"""Findings: named, typed, unit-carrying facts about one run, with their evidence.

A *fact* is a scalar (``gpu.idle_fraction = 0.42``, unit ``fraction``) or an
evidence table (``ops.top``: a list of records, each column with its own
unit). Each analyzer declares the facts it provides as :class:`FactSpec`; the
set of all declarations is what ``advisor facts`` prints and what rule lint
checks names against.

Findings carry no judgement. They serialise to ``findings.json`` and back, so
a run directory can be re-rendered, and rules can be re-run, without the trace.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FactSpec", "Finding", "Findings", "UNITS"]

#: Units a fact may carry, with how a report writes them.
UNITS: dict[str, str] = {
    "ms": "milliseconds",
    "us": "microseconds",
    "s": "seconds",
    "fraction": "share between 0 and 1",
    "count": "a whole number",
    "bytes": "bytes",
    "GB/s": "gigabytes per second",
    "bool": "true or false",
    "text": "a string",
    "texts": "a list of strings",
    "ratio": "a dimensionless ratio",
    "table": "a list of records (evidence)",
}


@dataclass(frozen=True)
class FactSpec:
    """The declaration of one fact: its name, unit and one-line meaning.

    For evidence tables, ``columns`` maps each column to ``"unit: meaning"``.
    """

    name: str
    unit: str
    meaning: str
    columns: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"fact {self.name}: unknown unit {self.unit!r}")
        if (self.unit == "table") != bool(self.columns):
            raise ValueError(f"fact {self.name}: tables need columns, scalars must not have them")

    @property
    def is_table(self) -> bool:
        return self.unit == "table"


@dataclass
class Finding:
    """One measured fact of this run."""

    name: str
    value: Any
    unit: str
    source: str
    evidence: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "value": _plain(self.value), "unit": self.unit, "source": self.source}
        if self.evidence:
            out["evidence"] = self.evidence
        return out


@dataclass
class Findings:
    """Everything the analyzers found for one run."""

    facts: dict[str, Finding] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, finding: Finding) -> None:
        self.facts[finding.name] = finding

    def __contains__(self, name: object) -> bool:
        return name in self.facts

    def __iter__(self) -> Iterator[Finding]:
        return iter(self.facts.values())

    def __len__(self) -> int:
        return len(self.facts)

    def get(self, name: str, default: Any = None) -> Any:
        finding = self.facts.get(name)
        return default if finding is None else finding.value

    def values(self) -> dict[str, Any]:
        """Name -> plain value, the environment that rule expressions read."""
        return {name: f.value for name, f in self.facts.items()}

    def merge(self, other: Findings) -> None:
        self.facts.update(other.facts)
        self.skipped.update(other.skipped)
        self.notes.extend(n for n in other.notes if n not in self.notes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "facts": [f.to_dict() for f in self.facts.values()],
            "skipped": dict(self.skipped),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Findings:
        out = cls(skipped=dict(data.get("skipped", {})), notes=list(data.get("notes", [])))
        for item in data.get("facts", []):
            out.add(Finding(item["name"], item["value"], item["unit"], item["source"], item.get("evidence", "")))
        return out


def _plain(value: Any) -> Any:
    """Turn numpy scalars and NaN into JSON-friendly Python values."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def records(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Evidence rows as plain dicts, ready for JSON and for expressions."""
    return [{k: _plain(v) for k, v in row.items()} for row in rows]
