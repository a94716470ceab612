"""Every fact name is a literal in the file of the analyzer that provides it, so that grep finds its source;
the phases are listed in advisor/naming.py only."""

from __future__ import annotations

import ast

from conftest import REPO

from advisor import naming
from advisor.analyze.framework import gpu_time, step_split
from advisor.analyze.framework.gpu_idle import CAUSES
from advisor.analyze.registry import registered


def _string_literals(path) -> set[str]:  # noqa: ANN001
    tree = ast.parse(path.read_text(), str(path))
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_each_fact_name_is_a_literal_where_its_analyzer_is() -> None:
    missing = []
    for a in registered():
        literals = _string_literals(REPO / a.file)
        missing += [f"{spec.name} ({a.file})" for spec in a.provides if spec.name not in literals]
    assert missing == []


def test_the_phase_lists_are_the_ones_in_naming() -> None:
    assert sorted(naming.PHASE_ORDER) == sorted(naming.PHASES)
    assert naming.STEP_PARTS == (*naming.PHASES, naming.OTHER_PHASE)
    assert tuple(step_split.PHASE_FACTS) == step_split.PHASES == naming.STEP_PARTS
    assert tuple(gpu_time.CAUSE_FACTS) == CAUSES == tuple(gpu_time.CAUSE_MEANING)


def test_the_label_prefix_is_written_only_in_naming() -> None:
    holders = sorted(str(p.relative_to(REPO)) for p in (REPO / "advisor").rglob("*.py")
                     if any(s.startswith(naming.LABEL_PREFIX) for s in _string_literals(p)))
    assert holders == ["advisor/naming.py"]
