"""Writing rule files for tests: a valid base rule, changed one field at a time."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

BASE: dict[str, Any] = {
    "id": "TST001",
    "name": "slow-steps",
    "stage": "framework",
    "severity": "low",
    "when": "steps.time_ms >= 100",
    "impact": {"ms_per_step": "steps.time_ms * 0.1", "basis": "a tenth of the step, for the test"},
    "what": "Steps take {{ ms(steps.time_ms) }}.",
    "where": "the training loop",
    "why": "Because the test says so.",
    "fix": "Make the steps shorter.",
    "knowledge": ["tiny-op-storm"],
    "tests": [
        {"name": "at the threshold", "expect": "fires", "facts": {"steps.time_ms": 100}},
        {"name": "just under", "expect": "quiet", "facts": {"steps.time_ms": 99.5}},
    ],
}


def rule_data(**changes: Any) -> dict[str, Any]:
    """The base rule with some fields replaced (``None`` removes a field)."""
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def write_rule(folder: Path, data: dict[str, Any] | None = None, filename: str | None = None, **changes: Any) -> Path:
    data = data if data is not None else rule_data(**changes)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (filename or f"{data.get('id', 'X')}-{data.get('name', 'rule')}.yaml")
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=1000))
    return path


def line_of(path: Path, key: str) -> int:
    """The 1-based line where ``key:`` starts a line of the file."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.lstrip(" -").startswith(f"{key}:"):
            return number
    raise AssertionError(f"{key} not in {path}")
