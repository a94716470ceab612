"""The reference docs and the generated rule index say what the code does."""

from __future__ import annotations

import re

from conftest import REPO, run_cli

from advisor.engine.rule_index import render_index
from advisor.engine.rulebook import RuleBook
from advisor.engine.schema import Impact, Rule, RuleTest
from advisor.expr import syntax, values
from advisor.expr.functions import FUNCTIONS
from advisor.knowledge import load_entries
from advisor.resources import rules_dir

DOCS = REPO / "docs"


def test_rule_index_is_up_to_date() -> None:
    book = RuleBook.load(env=False)
    expected = render_index([*book.rules.values()], load_entries(), rules_dir())
    assert (DOCS / "rules.md").read_text() == expected, "run: advisor rules index --out docs/rules.md"


def test_rule_index_lists_every_rule_and_entry() -> None:
    text = (DOCS / "rules.md").read_text()
    for rule_id, loaded in RuleBook.load(env=False).rules.items():
        assert f"[{rule_id}](../rules/{loaded.rule.stage}/{loaded.path.name})" in text
    for entry_id in load_entries():
        assert f"](../knowledge/{entry_id}.md) (`{entry_id}`)" in text


def test_index_check_fails_on_a_stale_page(tmp_path) -> None:  # noqa: ANN001
    stale = tmp_path / "rules.md"
    stale.write_text((DOCS / "rules.md").read_text().replace("dataloader-starvation", "x", 1))
    result = run_cli("rules", "index", "--check", str(stale), cwd=tmp_path)
    assert result.code == 1 and "is out of date; run: advisor rules index --out" in result.output
    fresh = run_cli("rules", "index", "--check", str(DOCS / "rules.md"), cwd=tmp_path)
    assert fresh.code == 0, fresh.output


def test_every_function_is_documented() -> None:
    text = (DOCS / "expressions.md").read_text()
    documented = set(re.findall(r"^\| `(\w+)\(", text, re.M))
    assert documented == set(FUNCTIONS)


def test_documented_limits_match_the_code() -> None:
    text = (DOCS / "expressions.md").read_text()
    for number in (syntax.MAX_SOURCE, values.MAX_STEPS, values.MAX_STRING, values.MAX_LIST):
        assert f"{number:,}" in text
    for number in (syntax.MAX_DEPTH, syntax.MAX_NODES, values.MAX_EXPONENT, values.MAX_PATTERN):
        assert f"| {number}" in text or f" {number} " in text


def test_every_schema_field_is_documented() -> None:
    text = (DOCS / "rule-schema.md").read_text()
    # under the name a rule file uses: `try`, a Python keyword, is the field `trial`
    fields = {f.alias or n for n, f in Rule.model_fields.items()} - {"impact"} | {
        f"impact.{f}" for f in Impact.model_fields}
    for name in fields:
        assert f"| `{name}` |" in text, name
    for name in RuleTest.model_fields:
        assert f"{name}:" in text, name


def test_rule_index_lists_the_entries_no_rule_detects() -> None:
    text = (DOCS / "rules.md").read_text()
    section = text.split("## Not detected yet", 1)[1]
    used = {k for loaded in RuleBook.load(env=False).rules.values() for k in loaded.rule.knowledge}
    for entry_id, entry in load_entries().items():
        row = f"| [{entry_id}](../knowledge/{entry_id}.md) |"
        assert (row in section) == (entry_id not in used), entry_id
        if entry.detection is not None and entry_id not in used:
            assert f"{row} {', '.join(entry.detection.needs)} |" in section


def test_every_detection_word_is_documented() -> None:
    from advisor.knowledge import NEEDS

    text = (DOCS / "rule-schema.md").read_text()
    for word in NEEDS:
        assert f"| `{word}` |" in text, word
