"""User rule folders: --rules and $ADVISOR_RULES, overriding and disabling built-in rules by id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rulefiles import write_rule

from advisor.engine.rulebook import ENV_VAR, RuleBook
from advisor.errors import RuleError

OVERRIDE = dict(
    id="DL001", name="dataloader-starvation",
    when="trace.world_size >= 2",
    what="Team override: {{ num(trace.world_size) }} ranks.",
    tests=[
        {"name": "two ranks", "expect": "fires", "facts": {"trace.world_size": 2}},
        {"name": "one rank", "expect": "quiet", "facts": {"trace.world_size": 1}},
    ],
)
NEEDS_LINES = dict(
    id="TEAM002", name="hot-line",
    when="lines.top[0].share >= 0.5",
    tests=[
        {"name": "at", "expect": "fires", "facts": {"lines.top": [{"share": 0.5}]}},
        {"name": "under", "expect": "quiet", "facts": {"lines.top": [{"share": 0.4999}]}},
        {"name": "no lines", "expect": "not_applicable", "facts": {"steps.count": 3}},
    ],
)


def _disable(folder: Path, rule_id: str) -> Path:
    return write_rule(folder, data={"id": rule_id, "status": "disabled"}, filename=f"{rule_id}-off.yaml")


def test_a_user_rule_overrides_a_builtin_by_id(tmp_path: Path) -> None:
    path = write_rule(tmp_path / "mine", **OVERRIDE)
    book = RuleBook.load([tmp_path / "mine"], env=False)
    assert book["DL001"].path == path and not book["DL001"].builtin
    assert book["DL001"].rule.when == "trace.world_size >= 2"
    assert book.overridden["DL001"].name == "DL001-dataloader-starvation.yaml"
    assert {"CPU001", "OPT001"} <= set(book.rules)


def test_a_stub_disables_a_builtin(tmp_path: Path) -> None:
    _disable(tmp_path / "mine", "CPU001")
    book = RuleBook.load([tmp_path / "mine"], env=False)
    assert "CPU001" not in book and "CPU001" in book.disabled
    assert "CPU001" not in {r.rule.id for r in book.active()}


def test_env_folders_come_after_rules_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_rule(tmp_path / "option", **{**OVERRIDE, "what": "from --rules"})
    env_rule = write_rule(tmp_path / "env", **{**OVERRIDE, "what": "from the environment"})
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env"))
    book = RuleBook.load([tmp_path / "option"])
    assert book["DL001"].path == env_rule
    assert book.overridden["DL001"].parent == tmp_path / "option"


def test_the_same_folder_twice_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_rule(tmp_path / "mine", **OVERRIDE)
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "mine"))
    book = RuleBook.load([tmp_path / "mine"])
    assert book.overridden["DL001"].parent.name == "framework"  # replaced the built-in, not itself


def test_duplicate_ids_in_one_folder_and_missing_folders(tmp_path: Path) -> None:
    write_rule(tmp_path / "mine", **OVERRIDE)
    write_rule(tmp_path / "mine", filename="DL001-again.yaml", **OVERRIDE)
    with pytest.raises(RuleError, match="rule id DL001 is also used by"):
        RuleBook.load([tmp_path / "mine"], env=False)
    with pytest.raises(RuleError, match="no such rules folder"):
        RuleBook.load([tmp_path / "nowhere"], env=False)


def test_analyze_uses_overrides_disables_and_skips_what_the_run_lacks(tmp_path: Path) -> None:
    """End to end on a real trace (CPU-only gloo rank 34 of 300): --rules and $ADVISOR_RULES together."""
    from conftest import fixture_path, run_cli

    trace = fixture_path("kineto", "cpu_only_gloo_rank34.pt.trace.json.gz")
    override = write_rule(tmp_path / "team", **OVERRIDE)
    write_rule(tmp_path / "team", **NEEDS_LINES)
    _disable(tmp_path / "personal", "CPU001")
    env = {ENV_VAR: str(tmp_path / "personal")}

    result = run_cli("analyze", str(trace), "--rules", "team", "--out", "run", "-q", cwd=tmp_path, env=env)
    assert result.code == 0, result.output
    saved = json.loads((tmp_path / "run" / "diagnoses.json").read_text())
    outcomes = {o["rule_id"]: o for o in saved["outcomes"]}
    assert "CPU001" not in outcomes
    assert outcomes["DL001"]["result"] == "fired"
    assert outcomes["TEAM002"] == {"rule_id": "TEAM002", "result": "not_applicable", "reason": "needs `lines.top`"}
    assert outcomes["OPT001"]["result"] in ("quiet", "not_applicable")
    (dl001,) = [d for d in saved["diagnoses"] if d["rule_id"] == "DL001"]
    assert dl001["what"] == "Team override: 300 ranks." and dl001["source"] == str(Path("team") / override.name)

    listed = run_cli("rules", "list", "--rules", "team", cwd=tmp_path, env=env)
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert "team/DL001-dataloader-starvation.yaml, replacing rules/framework/DL001-dataloader-starvation.yaml" \
        in lines["DL001"]
    assert "disabled" in lines["CPU001"] and "personal/CPU001-off.yaml" in lines["CPU001"]
