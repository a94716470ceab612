"""``advisor rules list|explain|lint|test`` and ``advisor facts``, run as a user would."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import run_cli

from advisor.analyze.registry import all_specs
from advisor.engine.rulebook import RuleBook

NO_USER_RULES = {"ADVISOR_RULES": ""}


def cli(*args: str, cwd: Path):  # noqa: ANN201
    return run_cli(*args, cwd=cwd, env=NO_USER_RULES)


def test_builtin_rules_lint_and_pass_their_tests(tmp_path: Path) -> None:
    lint = cli("rules", "lint", cwd=tmp_path)
    assert lint.code == 0, lint.output
    assert lint.stdout.startswith(f"Checked {len(RuleBook.load(env=False).rules)} rule files and ")
    test = cli("rules", "test", cwd=tmp_path)
    assert test.code == 0, test.output
    for rule_id in RuleBook.load(env=False).rules:
        assert any(line.startswith(f"{rule_id} ") and ": ok (" in line for line in test.stdout.splitlines())


def test_list_filters_by_stage_and_severity(tmp_path: Path) -> None:
    everything = cli("rules", "list", cwd=tmp_path).stdout.splitlines()
    assert everything[0].split() == ["ID", "NAME", "STAGE", "SEVERITY", "STATUS", "FROM"]
    assert {line.split()[0] for line in everything[1:]} == set(RuleBook.load(env=False).rules)
    framework = cli("rules", "list", "--stage", "framework", cwd=tmp_path).stdout
    assert all(line.split()[2] == "framework" for line in framework.splitlines()[1:])
    critical = cli("rules", "list", "--severity", "critical", cwd=tmp_path)
    book = RuleBook.load(env=False)
    expected = {r for r, loaded in book.rules.items() if loaded.rule.base_severity.value == "critical"}
    assert {line.split()[0] for line in critical.stdout.splitlines()[1:] if line.strip() != "No rules match."} \
        == expected


def test_explain_shows_rule_facts_and_knowledge(tmp_path: Path) -> None:
    result = cli("rules", "explain", "dl001", cwd=tmp_path)
    assert result.code == 0, result.output
    out = result.stdout
    assert out.startswith("DL001 dataloader-starvation\nstable, framework stage; rules/framework/DL001-")
    assert "When      phases.dataloader.share >= 0.15 and phases.dataloader.ms >= 1" in out
    assert "phases.dataloader.share  fraction  share of step time in dataloader [framework/step_split]" in out
    assert re.search(r"^ +computed in advisor/analyze/framework/step_split.py:\d+ \(step_split\)$", out, re.M)
    assert "The input pipeline starves the model (dataloader-starvation, data loading)" in out
    assert "## How to fix" in out and "Test cases: " in out


def test_explain_an_unknown_id_suggests(tmp_path: Path) -> None:
    result = cli("rules", "explain", "DL01", cwd=tmp_path)
    assert result.code == 2
    assert result.stderr.strip() == "advisor: error: no rule with id DL01; did you mean DL001?"


def test_rules_test_reports_a_failing_case_with_its_line(tmp_path: Path) -> None:
    from rulefiles import BASE, write_rule

    cases = BASE["tests"] + [{"name": "wrong on purpose", "expect": "fires", "facts": {"steps.time_ms": 50}}]
    path = write_rule(tmp_path / "mine", tests=cases)
    result = cli("rules", "test", "mine", cwd=tmp_path)
    assert result.code == 1
    assert "TST001 slow-steps: FAILED (2 of 3 cases passed)" in result.stdout
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "wrong on purpose" in text)
    assert f"  FAIL wrong on purpose: expected fires, got quiet (mine/{path.name}:{line})" in result.stdout


def test_facts_lists_every_declared_fact(tmp_path: Path) -> None:
    result = cli("facts", "--json", cwd=tmp_path)
    listed = {item["name"]: item for item in json.loads(result.stdout)}
    specs = all_specs()
    assert set(listed) == set(specs)
    assert listed["phases.dataloader.ms"]["unit"] == "ms"
    assert listed["ops.top"]["columns"]["share"].startswith("fraction:")
    text = cli("facts", "dataloader", cwd=tmp_path).stdout
    assert "dataloader.fetch_ms" in text and "ms        mean time the training loop waits" in text
    assert "trace.device" not in text


def test_index_refuses_incomplete_entries(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The index is built only from complete entries: one without a section fails the command."""
    from typer.testing import CliRunner

    import advisor.engine.lint as lint_module
    from advisor.cli import app
    from advisor.resources import knowledge_dir

    for entry in knowledge_dir().glob("*.md"):
        (tmp_path / entry.name).write_text(entry.read_text())
    broken = tmp_path / "pin-memory-off.md"
    broken.write_text(broken.read_text().replace("## Expected gain", "## Gains"))
    monkeypatch.setattr(lint_module, "knowledge_dir", lambda: tmp_path)
    result = CliRunner().invoke(app, ["rules", "index"], env=NO_USER_RULES)
    assert result.exit_code == 1
    assert f"{broken}: section `## Expected gain` is missing or empty" in result.output
