"""Rule data checked once is kept: a second process builds the same rules without pydantic, a bad file fails again."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from advisor.engine import rule as plain, rulebook, schema
from advisor.engine.rulebook import RuleBook, parse_rule_file
from advisor.errors import RuleError
from advisor.yamlio import yaml_cache


def _new_process(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Save the caches as an exiting process does; then start as a new process: nothing in memory."""
    for cache in yaml_cache._named.values():
        cache.save()
    if yaml_cache._shared is not None:
        yaml_cache._shared.save()
    monkeypatch.setenv(yaml_cache.CACHE_ENV, str(folder))
    monkeypatch.setattr(yaml_cache, "_named", {})
    monkeypatch.setattr(yaml_cache, "_shared", None)


def test_the_plain_rule_classes_have_the_schemas_fields() -> None:
    pairs = [(plain.Rule, schema.Rule), (plain.Impact, schema.Impact), (plain.Refinement, schema.Refinement),
             (plain.RuleTest, schema.RuleTest), (plain.SeverityTier, schema.SeverityTier)]
    for ours, checked in pairs:
        assert [f.name for f in fields(ours)] == list(checked.model_fields), ours.__name__


def test_a_second_process_builds_the_same_rules_without_checking_them(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _new_process(monkeypatch, tmp_path)
    first = RuleBook.load([], env=False)
    _new_process(monkeypatch, tmp_path)
    monkeypatch.setattr(rulebook, "_check", lambda *a: pytest.fail("a rule was checked again"))
    second = RuleBook.load([], env=False)
    assert list(second.rules) == list(first.rules) and len(first.rules) > 40
    assert all(second.rules[k].rule == first.rules[k].rule for k in first.rules)
    assert all(type(r.rule) is plain.Rule for r in second.rules.values())
    # the built rules read as the pydantic models of the same files do
    for loaded in list(first.rules.values())[:10]:
        model = schema.Rule.model_validate(yaml.safe_load(loaded.path.read_text()))
        assert loaded.rule.base_severity == (model.severity if isinstance(model.severity, plain.Severity)
                                             else max((t.level for t in model.severity), key=lambda s: s.rank))
        assert loaded.rule.impact.ms_per_step == model.impact.ms_per_step
        assert [t.expect for t in loaded.rule.tests] == [t.expect for t in model.tests]


def test_a_bad_rule_fails_every_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "rules" / "XX001-bad.yaml"
    bad.parent.mkdir()
    bad.write_text("id: XX001\nname: bad-rule\nwhen: a >\nseverity: high\n")
    for _ in range(2):
        _new_process(monkeypatch, tmp_path / "cache")
        loaded, errors = parse_rule_file(bad)
        assert loaded is None and errors and isinstance(errors[0], RuleError)
        assert "when" in str(errors[0])


def test_loading_cached_rules_imports_no_pydantic(tmp_path: Path) -> None:
    code = ("import sys\nfrom advisor.engine.rulebook import RuleBook\nb = RuleBook.load([], env=False)\n"
            "print(len(b.rules), 'pydantic' in sys.modules)\n")
    env = {**os.environ, yaml_cache.CACHE_ENV: str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
            for _ in range(2)]
    assert runs[0].stdout.split()[1] == "True"  # the first process checked the files
    count, imported = runs[1].stdout.split()
    assert int(count) > 40 and imported == "False"
